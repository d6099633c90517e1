package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestHistoryOfAnEpochNotYetWritten: history N past the current epoch says
// so, with the current epoch, not that old records were dropped.
func TestHistoryOfAnEpochNotYetWritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	r := e.run("history", "999")
	if r.code == ExitOK || !strings.Contains(r.stderr, "the current epoch is 1") || strings.Contains(r.stderr, "only the newest") {
		t.Fatalf("history 999 at epoch 1: %s; want a refusal naming the current epoch", r)
	}
	// The next epoch is what an "outcome unknown" write names: not
	// committed, safe to run again.
	r = e.run("history", "2")
	if r.code == ExitOK || !strings.Contains(r.stderr, "epoch 2 is not committed (the current epoch is 1); a write whose outcome was unknown did not apply, and may be run again") {
		t.Fatalf("history 2 at epoch 1: %s; want it named not committed", r)
	}
	if r := e.run("status", "--max-lag", "-5"); r.code != ExitUsage || !strings.Contains(r.stderr, "--max-lag -5: want 0 or more") {
		t.Fatalf("status --max-lag -5: %s; want a usage error", r)
	}
}

// TestHistoryTableKeepsItsRows: a --reason of several lines, or with a
// tab, is one row of history's table, its control characters escaped
// (raw, they broke the rows and columns); -o json keeps the reason as
// written, '&' included (it was \u0026).
func TestHistoryTableKeepsItsRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "drain", "eu-north", "--reason", "drain & reboot\nticket:\tOPS-1")
	r := e.must(ExitOK, "history")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], `drain & reboot\nticket:\tOPS-1`) { // newest first
		t.Fatalf("history: want a header and two rows, the reason escaped:\n%s", r.stdout)
	}
	r = e.must(ExitOK, "history", "-o", "json")
	if !strings.Contains(r.stdout, `"reason": "drain & reboot\nticket:\tOPS-1"`) {
		t.Fatalf("history -o json: want the reason as written:\n%s", r.stdout)
	}
}

// TestRewrittenAuditRecordIsNamed: an audit record put again after its
// commit (the operator role can write audit/: etcd has no append-only) is
// named as such by history (a warning, "rewritten" in -o json), and
// rollback to its epoch refuses: its revision is the rewrite's, and would
// restore the config of that moment instead of the epoch's. A rollback
// through it goes ahead (the target's revision is sound), marking it.
func TestRewrittenAuditRecordIsNamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()                                                           // epoch 1
	e.must(ExitOK, "pool", "drain", "eu-north")                        // 2
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=100") // 3
	if r := e.must(ExitOK, "history"); strings.Contains(r.stderr, "put again") {
		t.Fatalf("history of records written once warns:\n%s", r)
	}
	key := e.ks.Audit(2)
	rec := e.get(key)
	forged := strings.Replace(rec, `"pool drain`, `"pool drain (forged)`, 1)
	if _, err := testClient.Put(context.Background(), key, forged); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "history")
	if !strings.Contains(r.stderr, "the audit record of epoch 2 was put again after its commit") || strings.Contains(r.stderr, "epoch 1 ") || strings.Contains(r.stderr, "epoch 3 ") {
		t.Fatalf("history after epoch 2's record was rewritten: %s; want a warning naming epoch 2 alone", r)
	}
	var recs []struct {
		Epoch     int64
		Rewritten bool
	}
	mustJSON(t, e.must(ExitOK, "history", "-o", "json").stdout, &recs)
	for _, x := range recs {
		if x.Rewritten != (x.Epoch == 2) {
			t.Errorf("history -o json: epoch %d rewritten %v", x.Epoch, x.Rewritten)
		}
	}
	if r := e.run("rollback", "2", "--dry-run"); r.code != ExitRefused || !strings.Contains(r.stderr, "was put again after its commit") {
		t.Fatalf("rollback to a rewritten record's epoch: %s; want a refusal naming the rewrite", r)
	}
	// Through it: epoch 1's config is read at its own revision, which no
	// record can forge; the warning naming what it undoes marks epoch 2's
	// record as rewritten.
	if r := e.must(ExitOK, "rollback", "1", "--dry-run"); !strings.Contains(r.stderr, "2 (its audit record put again after its commit, so not what it wrote: pool drain (forged)") {
		t.Fatalf("rollback through a rewritten record: %s; want the warning to mark epoch 2's record", r)
	}

	// Deleted and put again (its version is 1 again): found by its
	// revision, past the next epoch's record, or the epoch key's for the
	// newest; and a record naming another epoch than its key's.
	for _, tc := range []struct {
		epoch int64
		value func(string) string
	}{
		{1, func(v string) string { return v }},
		{3, func(v string) string { return v }},
		{1, func(v string) string { return strings.Replace(v, `"epoch":1`, `"epoch":7`, 1) }},
	} {
		e := newEnv(t)
		e.seed()
		e.must(ExitOK, "pool", "drain", "eu-north")
		e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=100")
		key := e.ks.Audit(tc.epoch)
		rec := e.get(key)
		if _, err := testClient.Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		if _, err := testClient.Put(context.Background(), key, tc.value(rec)); err != nil {
			t.Fatal(err)
		}
		r := e.must(ExitOK, "history")
		if !strings.Contains(r.stderr, fmt.Sprintf("the audit record of epoch %d was put again", tc.epoch)) {
			t.Errorf("history after epoch %d's record was deleted and put again: %s; want it named", tc.epoch, r)
		}
		if r := e.run("history", fmt.Sprint(tc.epoch)); !strings.Contains(r.stderr, "was put again") {
			t.Errorf("history %d after its record was deleted and put again: %s; want it named", tc.epoch, r)
		}
	}
}

// TestGetNamesKeysWrittenAroundRegionctl: a config or boost key put after
// the epoch's commit (etcdctl, a script with the operator role) has no
// audit record; get names it on stderr. Once a regionctl write commits
// after it, it is part of that epoch's state and no longer named.
func TestGetNamesKeysWrittenAroundRegionctl(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	if r := e.must(ExitOK, "get"); strings.Contains(r.stderr, "written after") {
		t.Fatalf("get after regionctl's own writes warns:\n%s", r)
	}
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey("pools/eu-north"),
		`{"host":"edge-sto-1.example.net","region":"eu-north","residency":"eu","status":"down"}`); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "get", "pools")
	if !strings.Contains(r.stderr, "written after epoch 1's commit") || !strings.Contains(r.stderr, "pools/eu-north") || strings.Contains(r.stderr, "routes/") {
		t.Fatalf("get after a hand put of pools/eu-north: %s; want a warning naming it alone", r)
	}
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=100")
	if r := e.must(ExitOK, "get"); strings.Contains(r.stderr, "written after") {
		t.Fatalf("get after a later commit still warns:\n%s", r)
	}
}
