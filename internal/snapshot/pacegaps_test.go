package snapshot

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Gap tests from a mutation review of the pacing (policy.go and its
// callers in writer.go). The pacer is driven with explicit times, and
// budgets that are powers of two, so that every interval is exact.

// TestPacerZeroValueHasFullBucket: the zero pacer has a full bucket: the
// first write is charged its cost against Burst (agent.md: after a quiet
// spell a change is written at once), and the second too, in full.
func TestPacerZeroValueHasFullBucket(t *testing.T) {
	const ms = time.Millisecond
	for _, budget := range []float64{0.25, 1} { // 1: one whole CPU, the most Config allows
		p := pacer{budget: budget, burst: 5 * ms, max: time.Second}
		t0 := time.Unix(1000, 0)
		p.wrote(t0, 3*ms)
		if got := p.next(); !got.Equal(t0) {
			t.Fatalf("budget %v: after a first 3 ms write (Burst 5 ms) the next waits %v, want none (the zero pacer's bucket is full)", budget, got.Sub(t0))
		}
		p.wrote(t0, 3*ms)
		if got, want := p.next().Sub(t0), time.Duration(float64(ms)/budget); got != want {
			t.Fatalf("budget %v: after two 3 ms writes at once (Burst 5 ms) the next waits %v, want %v (1 ms owed): the first write is charged too", budget, got, want)
		}
	}
}

// TestPacerAverageMovesAQuarter: the running average starts at the first
// write's cost and moves a quarter of the way to each newer one, and a
// write is charged at most twice the average of those before it
// (policy.go: "a quarter of the newest each time").
func TestPacerAverageMovesAQuarter(t *testing.T) {
	const ms = time.Millisecond
	p := pacer{budget: 0.25, max: time.Second} // no burst: each write waits out its charge
	now := time.Unix(1000, 0)
	for i, w := range []struct{ cost, wait time.Duration }{
		{4 * ms, 16 * ms},   // charged in full; avg 4
		{20 * ms, 32 * ms},  // charged 2×4; avg 4 + 16/4 = 8
		{40 * ms, 64 * ms},  // charged 2×8; avg 8 + 32/4 = 16
		{10 * ms, 40 * ms},  // charged in full; avg 16 - 6/4 = 14.5
		{40 * ms, 116 * ms}, // charged 2×14.5
	} {
		p.wrote(now, w.cost)
		if got := p.next().Sub(now); got != w.wait {
			t.Fatalf("write %d (%v): the next waits %v, want %v", i, w.cost, got, w.wait)
		}
		now = p.next()
	}
}

// TestPacerBorrowCountsTheRefill: whether a held change may go on credit
// is judged on the credit at that moment, refilled since the last write
// began, not on the credit the write left: late in the interval of a
// dear write the debt after one more stays within what MaxDelay repays.
func TestPacerBorrowCountsTheRefill(t *testing.T) {
	const ms = time.Millisecond
	p := pacer{budget: 0.25, max: 200 * ms} // MaxDelay repays 50 ms
	t0 := time.Unix(1000, 0)
	p.wrote(t0, 30*ms) // owes 30 ms: next at 120 ms
	if p.mayBorrow(t0.Add(ms)) {
		t.Fatal("1 ms after a 30 ms write: borrowed, yet the debt after one more (about 60 ms) is past the 50 ms MaxDelay repays")
	}
	if !p.mayBorrow(t0.Add(100 * ms)) {
		t.Fatal("100 ms after a 30 ms write (5 ms owed): not borrowed, yet the debt after one more (35 ms) is within the 50 ms MaxDelay repays")
	}
}

// TestWriterRefreshNotHeldByThePacing: a change the pacing holds is
// written when the refresh falls due, not after the pacing: the file is
// rewritten at least every Refresh (agent.md: written_at is the dead-man's
// switch).
func TestWriterRefreshNotHeldByThePacing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := New(Config{Path: path, Source: src, Logger: discardLogger, Refresh: time.Minute})
	t.Cleanup(func() { closeOutputs(w) })
	w.cpu = func() time.Duration { return 0 }
	w.mu.Lock()
	defer w.mu.Unlock()
	t0 := time.Now()
	src.set(table(1, 10))
	if _, again := w.step(t0, false); !again {
		t.Fatal("the first table was not written")
	}
	src.set(table(2, 20))
	t1 := t0.Add(time.Minute - time.Millisecond)
	// The pacing holds writes 100 ms, and the change may not be borrowed
	// (one more 15 ms write would owe 25 ms, past the 20 ms MaxDelay repays).
	w.pace.lastStart, w.pace.credit, w.pace.avg = t1, -10*time.Millisecond, 15*time.Millisecond
	if wait, again := w.step(t1, false); again || wait != time.Millisecond {
		t.Fatalf("a change held 100 ms by the pacing, the refresh due in 1 ms: the writer waits %v (again %v), want 1ms", wait, again)
	}
	if _, again := w.step(t0.Add(time.Minute), false); !again || readRevision(t, path) != 2 {
		t.Fatalf("the refresh due: wrote %v, the file at revision %d, want the held change's 2", again, readRevision(t, path))
	}
}

// TestWriterPacingDefaults: the pacing's defaults are agent.md's: 10% of
// one CPU, a 5 ms bucket, 200 ms at most, 2 ms of quiet; a budget past
// one CPU is the default too.
func TestWriterPacingDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	for _, budget := range []float64{0, -1, 1.5} {
		w := New(Config{Path: path, Source: newSource(), Logger: discardLogger, Budget: budget})
		c, p := w.cfg, w.pace
		if c.Budget != 0.1 || c.Burst != 5*time.Millisecond || c.MaxDelay != 200*time.Millisecond || c.Quiet != 2*time.Millisecond || c.Refresh != time.Minute {
			t.Errorf("Budget %v: config %v %v %v %v %v, want 0.1 5ms 200ms 2ms 1m0s", budget, c.Budget, c.Burst, c.MaxDelay, c.Quiet, c.Refresh)
		}
		if p.budget != c.Budget || p.burst != c.Burst || p.max != c.MaxDelay {
			t.Errorf("Budget %v: the pacer has %v %v %v, want the config's", budget, p.budget, p.burst, p.max)
		}
		closeOutputs(w)
	}
	w := New(Config{Path: path, Source: newSource(), Logger: discardLogger, Budget: 1})
	if w.cfg.Budget != 1 {
		t.Errorf("Budget 1 (one whole CPU) became %v", w.cfg.Budget)
	}
	closeOutputs(w)
}

// TestFlushLeavesAWrittenTableAlone: at the stop, flush writes only a
// change the pacing still holds: the table the files already hold is
// neither rendered again nor counted as an unchanged skip.
func TestFlushLeavesAWrittenTableAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := New(Config{Path: path, Source: src, Logger: discardLogger})
	t.Cleanup(func() { closeOutputs(w) })
	w.mu.Lock()
	defer w.mu.Unlock()
	src.set(table(1, 10))
	now := time.Now()
	if _, again := w.step(now, false); !again {
		t.Fatal("the first table was not written")
	}
	writes, skips := testutil.ToFloat64(w.outs[0].writes), testutil.ToFloat64(w.skips)
	w.flush(now.Add(time.Millisecond))
	if testutil.ToFloat64(w.outs[0].writes) != writes || testutil.ToFloat64(w.skips) != skips {
		t.Fatalf("flush of the table the files hold: writes %v → %v, unchanged skips %v → %v; want neither",
			writes, testutil.ToFloat64(w.outs[0].writes), skips, testutil.ToFloat64(w.skips))
	}
}
