package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/regiond/regiond/routing"
)

// TestErrorsGapConflictOnAGuardedKeyNamesNoHandEdit guards the message of
// a conflict on a guarded key that changed with the epoch unmoved and no
// config key written meanwhile (a boost's lease ended, an override
// replaced): it says the key changed concurrently and to re-run, and never
// blames a hand edit "outside regionctl (etcdctl, a script)" that did not
// happen, which would send an operator hunting for one.
func TestErrorsGapConflictOnAGuardedKeyNamesNoHandEdit(t *testing.T) {
	msg := (&ConflictError{Epoch: 7, Now: 7, Key: "boosts/kr-week"}).Error()
	if want := "boosts/kr-week changed concurrently (expired or replaced); re-run"; msg != want {
		t.Fatalf("conflict on a guarded key: %q, want %q", msg, want)
	}
	outside := (&ConflictError{Epoch: 7, Now: 7, Key: "pools/eu-west", Outside: true}).Error()
	if !strings.HasPrefix(outside, "pools/eu-west was written outside regionctl") {
		t.Fatalf("conflict on a config key written by hand: %q", outside)
	}
}

// TestErrorsGapConflictNamesTheHistoryToRead guards the history command a
// conflict names: one write between the read and the Txn is `regionctl
// history N` of the new epoch; several, `--limit` of how many; the epoch
// key put far forward by hand (no records of the epochs skipped) names
// the new epoch alone, not a --limit of thousands of records that do not
// exist.
func TestErrorsGapConflictNamesTheHistoryToRead(t *testing.T) {
	for _, tc := range []struct {
		epoch, now int64
		want       string
	}{
		{4, 5, "config changed concurrently (epoch 4 → 5); re-run (it builds on the new state: regionctl history 5 shows what changed)"},
		{4, 7, "config changed concurrently (epoch 4 → 7: 3 writes); re-run (it builds on the new state: regionctl history --limit 3 shows what changed)"},
		{4, 5000, "config changed concurrently (epoch 4 → 5000); re-run (it builds on the new state: regionctl history 5000 shows what changed)"},
	} {
		if got := (&ConflictError{Epoch: tc.epoch, Now: tc.now}).Error(); got != tc.want {
			t.Errorf("conflict %d → %d: %q, want %q", tc.epoch, tc.now, got, tc.want)
		}
	}
}

// TestErrorsGapShortfallOnlyWhenFewerConfirmed guards --expect-agents'
// part of a not-converged message: it says "N of the M agents expected
// confirmed it: the others are behind…" only when fewer than M did; with
// M confirmed (the wait failed for another agent, one whose key vanished)
// it would send the operator after agents that all answered.
func TestErrorsGapShortfallOnlyWhenFewerConfirmed(t *testing.T) {
	vanished := []AgentInfo{{AgentStatus: routing.AgentStatus{Node: "n3", Revision: 8}}}
	if msg := (&NotConvergedError{Revision: 9, Vanished: vanished, Expected: 2, Confirmed: 2}).Error(); strings.Contains(msg, "--expect-agents") {
		t.Errorf("2 of 2 expected agents confirmed: %q names a shortfall", msg)
	}
	if msg := (&NotConvergedError{Revision: 9, Vanished: vanished, Expected: 2, Confirmed: 1}).Error(); !strings.Contains(msg, "1 of the 2 agents expected (--expect-agents) confirmed it") {
		t.Errorf("1 of 2 expected agents confirmed: %q; want the shortfall named", msg)
	}
}

// TestErrorsGapNothingWrittenNeverMarksAnUnknownOutcome guards
// NothingWritten's contract (docs/regionctl.md, exit 4: an outcome
// unknown never says nothing was written): an *OutcomeUnknownError whose
// commit error is an *UnreachableError is left unmarked, so its message
// cannot tell an operator a re-run is safe when the write may be
// committed.
func TestErrorsGapNothingWrittenNeverMarksAnUnknownOutcome(t *testing.T) {
	err := NothingWritten(&OutcomeUnknownError{Epoch: 5, Endpoints: []string{"10.0.0.1:2379"},
		Err:     &UnreachableError{Endpoints: []string{"10.0.0.1:2379"}, Err: errors.New("commit epoch 5: context deadline exceeded")},
		ReadErr: errors.New("context deadline exceeded")})
	if msg := err.Error(); strings.Contains(msg, "nothing") || !strings.Contains(msg, "outcome unknown") {
		t.Fatalf("NothingWritten of an unknown outcome: %q; want it unmarked", msg)
	}
}
