package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/routing"
)

// TestWriterRefreshDefault: with Refresh unset (the agent's case), an
// unchanged table is rewritten 60 s after the last write, not before:
// written_at is the dead-man's switch (agent.md: at least every 60 s).
func TestWriterRefreshDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := New(Config{Path: path, Source: src, Logger: discardLogger})
	t.Cleanup(func() { closeOutputs(w) })
	w.mu.Lock()
	defer w.mu.Unlock()
	src.set(table(1, 50))
	t0 := time.Now()
	if _, again := w.step(t0, false); !again {
		t.Fatal("the first table was not written")
	}
	if wait, again := w.step(t0, false); again || wait != 60*time.Second {
		t.Fatalf("after a write the writer waits %v (again %v), want 60s", wait, again)
	}
	if _, again := w.step(t0.Add(60*time.Second-time.Millisecond), false); again {
		t.Fatal("rewritten before 60 s")
	}
	if _, again := w.step(t0.Add(60*time.Second), false); !again {
		t.Fatal("not rewritten 60 s after the last write")
	}
	b, err := atomicfile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := writtenAt(t, b); !got.Equal(t0.Add(60 * time.Second)) {
		t.Fatalf("written_at %v after the refresh, want %v", got, t0.Add(60*time.Second))
	}
}

// failingOutput fails its writes while fail is set (no space left).
type failingOutput struct {
	Output
	fail *atomic.Bool
}

func (o failingOutput) Write(t *routing.Table, h routing.JSONHeader, deferred bool) error {
	if o.fail.Load() {
		return errors.New("write: no space left on device (injected)")
	}
	return o.Output.Write(t, h, deferred)
}

// TestWriterRetryBackoff: failed writes are retried after 1 s, doubling
// to at most 30 s (agent.md: 1 s → 30 s; a longer cap keeps the front
// doors on an old table for minutes after the fault clears), back at 1 s
// after a write that succeeds; Failure says why until then, and a failed
// write is no skip of an unchanged table.
func TestWriterRetryBackoff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := New(Config{Path: path, Source: src, Logger: discardLogger})
	t.Cleanup(func() { closeOutputs(w) })
	var fail atomic.Bool
	w.outs[0].Output = failingOutput{w.outs[0].Output, &fail}
	w.mu.Lock()
	defer w.mu.Unlock()
	const slack = 200 * time.Millisecond
	delay := func(rev int64) time.Duration {
		tab := table(rev, int(rev%100))
		src.set(tab)
		before := time.Now()
		w.publish(tab, time.Now(), false, false)
		return w.retryAt.Sub(before)
	}
	fail.Store(true)
	if d := delay(1); d < time.Second || d > 2*time.Second+slack {
		t.Fatalf("first retry after %v, want 1 s (to 2 s with jitter)", d)
	}
	for rev := int64(2); rev <= 20; rev++ {
		if d := delay(rev); d > 30*time.Second+slack {
			t.Fatalf("retry %d after %v, want at most 30 s", rev, d)
		}
	}
	if w.Failure() == "" {
		t.Fatal("Failure empty while the writes fail")
	}
	if n := testutil.ToFloat64(w.skips); n != 0 {
		t.Fatalf("failed writes counted as %v skips of an unchanged table", n)
	}
	fail.Store(false)
	delay(21)
	if readRevision(t, path) != 21 || !w.retryAt.IsZero() {
		t.Fatalf("the write after the fault cleared: file at %d, retry at %v", readRevision(t, path), w.retryAt)
	}
	if f := w.Failure(); f != "" {
		t.Fatalf("Failure %q after a write succeeded, want empty", f)
	}
	fail.Store(true)
	if d := delay(22); d > 2*time.Second+slack {
		t.Fatalf("a failure after a success retried after %v, want the backoff back at 1 s", d)
	}
}

// TestPacerForgivesDebtPastMaxDelay: writes dearer than MaxDelay × Budget
// (a slow disk) are paced by MaxDelay without debt piling up (agent.md),
// so once they are cheap again, after a quiet second, changes are written
// at once again, not each held MaxDelay until a debt of the slow spell is
// repaid.
func TestPacerForgivesDebtPastMaxDelay(t *testing.T) {
	const ms = time.Millisecond
	p := pacer{budget: 0.1, burst: 5 * ms, max: 200 * ms}
	now := time.Unix(1000, 0)
	for i := range 50 { // 40 ms writes, each as soon as allowed
		p.wrote(now, 40*ms)
		if gap := p.next().Sub(now); gap != 200*ms {
			t.Fatalf("slow write %d: the next waits %v, want MaxDelay (200ms)", i, gap)
		}
		now = p.next()
	}
	now = now.Add(time.Second) // the disk recovers; a quiet second
	for i := range 10 {
		p.wrote(now, 200*time.Microsecond)
		if gap := p.next().Sub(now); gap > 10*ms {
			t.Fatalf("cheap write %d after the slow spell: the next waits %v", i, gap)
		}
		now = p.next()
	}
}

// finishHook runs before and after around its Output's Finish.
type finishHook struct {
	Output
	before, after func()
}

func (o finishHook) Finish() error {
	if o.before != nil {
		o.before()
	}
	err := o.Output.Finish()
	if o.after != nil {
		o.after()
	}
	return err
}

// TestOutputFinishReportsFsyncFailure: when the fsync of the directory
// after a rename fails (here: the directory is gone when it comes), each
// output's Finish says so, so that the writer counts it, says it in
// Failure and writes that file again (agent.md: the rename may not survive
// a crash). The hook sits on the table JSON's output, finished first.
func TestOutputFinishReportsFsyncFailure(t *testing.T) {
	for _, which := range []int{0, 1} {
		t.Run([]string{"table.json", "table.idx"}[which], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "snap")
			path := filepath.Join(dir, "table.json")
			away := dir + ".away"
			if err := os.Mkdir(dir, 0o755); err != nil { // a write into a missing one does all at once
				t.Fatal(err)
			}
			src := newSource()
			w := New(Config{Path: path, Source: src, Logger: discardLogger})
			t.Cleanup(func() { closeOutputs(w) })
			moveAway := func() {
				if err := os.Rename(dir, away); err != nil {
					t.Error(err)
				}
			}
			moveBack := func() {
				if err := os.Rename(away, dir); err != nil {
					t.Error(err)
				}
			}
			if which == 0 { // gone during the JSON's own Finish
				w.outs[0].Output = finishHook{Output: w.outs[0].Output, before: moveAway, after: moveBack}
			} else { // gone after the JSON's Finish, during the index's
				w.outs[0].Output = finishHook{Output: w.outs[0].Output, after: moveAway}
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			src.set(table(1, 50))
			w.publish(src.Table(), time.Now(), false, false)
			if which == 1 {
				moveBack()
			}
			w.outs[0].Output = w.outs[0].Output.(finishHook).Output
			o := w.outs[which]
			if n := testutil.ToFloat64(o.errors); n != 1 {
				t.Fatalf("%s: errors %v after its directory's fsync failed, want 1", o.name, n)
			}
			if w.Failure() == "" || w.retryAt.IsZero() {
				t.Fatalf("the failed fsync is not a failed write: Failure %q, retry at %v", w.Failure(), w.retryAt)
			}
			w.retryAt = time.Time{} // the backoff has passed
			w.step(time.Now().Add(time.Second), false)
			if n := testutil.ToFloat64(o.writes); n != 2 {
				t.Fatalf("%s written %v times, want 2 (again after the failed fsync)", o.name, n)
			}
		})
	}
}

// TestWriterStartsClean: Run removes the temp files a crashed run left
// beside both files and prepares the next ones at start, before any
// table comes (etcd not answering at boot, a held table: the first write
// may be far off; agent.md: removed at start).
func TestWriterStartsClean(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	leftovers := []string{".table.json.tmp-xyz", ".table.idx.tmp-abc"}
	for _, name := range leftovers {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("crashed"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	startWriter(t, Config{Path: path, Source: newSource(), Logger: discardLogger}) // no table
	clean := func() bool {
		for _, base := range []string{"table.json", "table.idx"} {
			names := tempNames(dir, base)
			if len(names) != 1 || slices.Contains(leftovers, names[0]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < 500 && !clean(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !clean() {
		t.Fatalf("directory %v: want the leftovers gone and one temp file prepared for each file", dirNames(t, dir))
	}
}

// TestWriterSettlesAHeldTable: a table held out of the files (no pools
// over a file with pools) is settled, so the status key does not wait
// for a write that will not come (snapshotSettleMax at each put).
func TestWriterSettlesAHeldTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	src.set(routing.Compile(2, nil, nil, routing.CompileOptions{}))
	w, _ := startWriter(t, Config{Path: path, Source: src, Logger: discardLogger, File: table(1, 50)})
	for i := 0; i < 500; i++ {
		if ok, _ := w.Settled(2); ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the held table was never settled")
}

// TestAfterChangeAfterRunReturned: once Run has returned, AfterChange
// writes nothing, even when nothing else would hold it back (TestAfterChange
// checks this after a write of Run's that may take longer than inlineMax,
// which alone stops it): no file and no temp file appear after the stop.
func TestAfterChangeAfterRunReturned(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	src := newSource()
	w := New(Config{Path: path, Source: src, Logger: discardLogger})
	w.memFS = 1
	src.set(table(1, 10))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	waitRevision(t, path, 1)
	cancel()
	<-done
	w.lastWall = 0                                                  // the last write was quick
	w.pace.lastStart, w.pace.credit = time.Now().Add(-time.Hour), 0 // and the pacing allows one
	src.set(table(2, 20))
	w.AfterChange()
	if r := readRevision(t, path); r != 1 {
		t.Fatalf("AfterChange after Run returned wrote revision %d", r)
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"table.idx", "table.json"}) {
		t.Fatalf("directory after the stop: %v, want only table.idx and table.json", got)
	}
}

// TestWriterWritesAHeldChangeAtStop: a change the pacing holds when Run
// ends is written before it returns: the files are what front doors read
// while the agent is away, and the agent's copy on disk is taken from
// them at its stop (the shutdown review: both kept the table before the
// last change).
func TestWriterWritesAHeldChangeAtStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	// A budget so small, and waits so long, that a second change waits
	// an hour: only the stop writes it.
	_, stop := startWriter(t, Config{Path: path, Source: src, Logger: discardLogger,
		Budget: 1e-9, Burst: time.Nanosecond, MaxDelay: time.Hour, Quiet: time.Hour})
	src.set(table(1, 50))
	waitRevision(t, path, 1)
	src.set(table(2, 60))
	time.Sleep(100 * time.Millisecond) // the writer sees it, and holds it
	if r := readRevision(t, path); r != 1 {
		t.Fatalf("the file at %d before the stop: want the change held (the test means nothing otherwise)", r)
	}
	stop()
	if r := readRevision(t, path); r != 2 {
		t.Fatalf("the file after the stop holds revision %d, want the held change's 2", r)
	}
}
