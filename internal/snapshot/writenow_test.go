package snapshot

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSlowWriteStopsInlineWrites: after a write that took longer than
// inlineMax, AfterChange leaves writing to Run, whether that write succeeded
// or failed (a file system that hangs, then times out). Found in review:
// only successful writes were timed. The write is made slow by handing it
// a start 10 ms in the past.
func TestSlowWriteStopsInlineWrites(t *testing.T) {
	for _, fail := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "table.json")
		if fail {
			path, _ = unwritablePath(t)
		}
		src := newSource()
		w := New(Config{Path: path, Source: src, Logger: discardLogger})
		w.memFS = 1
		src.set(table(1, 10))
		w.mu.Lock()
		w.seen = src.Table()
		w.publish(src.Table(), time.Now().Add(-10*time.Millisecond), false, false)
		w.retryAt = time.Time{}                                         // the backoff has passed
		w.pace.lastStart, w.pace.credit = time.Now().Add(-time.Hour), 0 // and the pacing: only the cost is left
		w.mu.Unlock()
		errs, writes := testutil.ToFloat64(w.outs[0].errors), testutil.ToFloat64(w.outs[0].writes)
		time.Sleep(time.Millisecond) // an isolated change
		src.set(table(2, 20))
		w.AfterChange()
		if testutil.ToFloat64(w.outs[0].errors) > errs || testutil.ToFloat64(w.outs[0].writes) > writes {
			t.Errorf("the last write took 10 ms (failed: %v), yet AfterChange wrote in the caller's goroutine", fail)
		}
	}
}

// TestAfterChangeFailedWriteRetried: a write that fails inside AfterChange is
// retried by Run although no further change arrives.
func TestAfterChangeFailedWriteRetried(t *testing.T) {
	path, blocker := unwritablePath(t)
	src := newSource()
	w := runWriter(t, Config{Path: path, Source: src, Logger: discardLogger})
	w.mu.Lock()
	w.memFS = 1
	w.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // Run idle, waiting for a table
	src.set(table(3, 40))
	w.AfterChange() // fails; nothing changes afterwards
	for i := 0; i < 200 && testutil.ToFloat64(w.outs[0].errors) == 0; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	if testutil.ToFloat64(w.outs[0].errors) == 0 {
		t.Fatal("the write never failed: test setup")
	}
	os.Remove(blocker)
	waitRevision(t, path, 3)
}

// TestAfterChangeWithRun: a "mirror" swaps tables with random gaps (bursts
// and isolated changes) and calls AfterChange after each swap, before it
// wakes the Changed waiters (as watch.Mirror does), while Run runs;
// the file reaches the last table soon after the last swap (no lost
// wakeup), with and without AfterChange. Run it with -race.
func TestAfterChangeWithRun(t *testing.T) {
	for _, inline := range []bool{true, false} {
		for round := range 3 {
			path := filepath.Join(t.TempDir(), "table.json")
			src := newSource()
			w := runWriter(t, Config{Path: path, Source: src, Logger: discardLogger})
			w.mu.Lock()
			w.memFS = 1
			w.mu.Unlock()
			r := rand.New(rand.NewPCG(uint64(round), 1))
			var last int64
			for i := range 150 {
				last = int64(i + 1)
				if inline { // as the mirror does: swap, AfterChange, then wake
					src.swap(table(last, 1+i%99))
					w.AfterChange()
					src.wake()
				} else {
					src.set(table(last, 1+i%99))
				}
				switch r.IntN(4) {
				case 1:
					time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
				case 2:
					time.Sleep(time.Duration(8+r.IntN(8)) * time.Millisecond)
				case 3:
					time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
				}
			}
			waitRevision(t, path, last)
			// The last write was finished: the next temp file is prepared.
			waitPrepared(t, filepath.Dir(path), "table.json")
		}
	}
}
