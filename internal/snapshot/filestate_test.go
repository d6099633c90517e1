package snapshot

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/routing"
)

// indexFailingWriter returns a writer of a temp dir's table.json whose
// index writes fail while the returned flag is set (no space left for
// table.idx alone), stepped by the test (no Run), its mutex held.
func indexFailingWriter(t *testing.T, src *source) (*Writer, string, *atomic.Bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "table.json")
	w := New(Config{Path: path, Source: src, Logger: discardLogger})
	t.Cleanup(func() { closeOutputs(w) })
	fail := new(atomic.Bool)
	w.outs[1].Output = failingOutput{w.outs[1].Output, fail}
	w.mu.Lock()
	t.Cleanup(w.mu.Unlock)
	return w, path, fail
}

// TestHeldOutOfTheJSONWhoseIndexFailed: whether the files hold a table
// with pools is taken from the table JSON's write, not the index's
// (agent.md: a table without pools is not written over a file that has
// pools). The JSON is written with pools while the index beside it keeps
// failing; a table without pools that comes next is held out of the JSON,
// as after a write of both. Taken from the index's write (the mutation
// review's survivor), the writer knew of no pools in its files and wrote
// the table without pools over the JSON that had them.
func TestHeldOutOfTheJSONWhoseIndexFailed(t *testing.T) {
	src := newSource()
	w, path, fail := indexFailingWriter(t, src)
	fail.Store(true)
	src.set(table(1, 50))
	t0 := time.Now()
	w.step(t0, false)
	if r := readRevision(t, path); r != 1 || testutil.ToFloat64(w.outs[1].errors) != 1 {
		t.Fatalf("setup: the JSON at %d, index errors %v; want the JSON written at 1 and the index failed", r, testutil.ToFloat64(w.outs[1].errors))
	}
	src.set(routing.Compile(2, nil, nil, routing.CompileOptions{})) // no pools
	w.retryAt = time.Time{}                                         // the retry's backoff has passed
	w.step(t0.Add(time.Second), false)
	if r := readRevision(t, path); r != 1 {
		t.Fatalf("the JSON holds revision %d; want 1, the table with pools (the table without pools held out)", r)
	}
	if testutil.ToFloat64(w.heldGauge) != 1 {
		t.Fatal("regiond_snapshot_held is not 1 while a table without pools is held out of the JSON")
	}
}

// TestRefreshCountsFromTheJSONsWrite: the refresh (written_at, the
// dead-man's switch: rewritten at least every 60 s, agent.md) counts from
// the table JSON's last write. Here the JSON is written at t0 while its
// index fails; the retry at t0+10s finds the JSON holding the table and
// writes the index alone. The JSON is rewritten 60 s after t0, not 60 s
// after the index's write: taken from the index's write (the mutation
// review's survivor), or from any file's, the JSON's written_at went 70 s
// without a rewrite.
func TestRefreshCountsFromTheJSONsWrite(t *testing.T) {
	src := newSource()
	w, path, fail := indexFailingWriter(t, src)
	fail.Store(true)
	src.set(table(1, 50))
	t0 := time.Now()
	w.step(t0, false)
	fail.Store(false)
	w.retryAt = time.Time{} // the retry's backoff has passed
	jsonWrites := testutil.ToFloat64(w.outs[0].writes)
	if _, again := w.step(t0.Add(10*time.Second), false); !again {
		t.Fatal("the retry of the failed index did not write")
	}
	if r, _ := readIndex(t, IndexPath(path)); r != 1 || testutil.ToFloat64(w.outs[0].writes) != jsonWrites {
		t.Fatalf("after the retry at t0+10s the index is at %d and the JSON was written %v more times; want only the index written (the JSON holds the table, its refresh due at t0+60s)",
			r, testutil.ToFloat64(w.outs[0].writes)-jsonWrites)
	}
	if wait, again := w.step(t0.Add(10*time.Second), false); again || wait != 50*time.Second {
		t.Fatalf("after the index's retry at t0+10s the writer waits %v (again %v); want 50s, to t0+60s, 60 s after the JSON's write", wait, again)
	}
	if _, again := w.step(t0.Add(60*time.Second), false); !again {
		t.Fatal("the JSON was not rewritten 60 s after its last write")
	}
	b, err := atomicfile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := writtenAt(t, b); !got.Equal(t0.Add(60 * time.Second)) {
		t.Fatalf("the JSON's written_at %v after the refresh; want t0+60s, %v", got, t0.Add(60*time.Second))
	}
}

// TestInlineWritesUnderAMillisecond pins inlineMax's documented meaning
// (agent.md, the status key: the writer writes from the mirror's
// goroutine with "a write under a millisecond"): AfterChange writes in
// the caller's goroutine while the last write took less than 1 ms, and
// leaves the change to Run once one took 1 ms or more. A change of the
// constant, or of its comparison, fails one of the three cases.
func TestInlineWritesUnderAMillisecond(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := New(Config{Path: path, Source: src, Logger: discardLogger})
	t.Cleanup(func() { closeOutputs(w) })
	w.memFS = 1 // the test's directory may be on a disk
	rev := int64(0)
	for _, c := range []struct {
		last   time.Duration
		inline bool
	}{
		{999 * time.Microsecond, true},
		{time.Millisecond, false},
		{time.Millisecond + time.Nanosecond, false},
		{0, true},
	} {
		prev := readRevision(t, path)
		rev++
		src.set(table(rev, int(rev)))
		w.pace.lastStart, w.pace.credit = time.Now().Add(-time.Hour), 0 // the pacing allows a write
		w.lastWall = c.last
		w.AfterChange()
		want := prev
		if c.inline {
			want = rev
		}
		if r := readRevision(t, path); r != want {
			t.Errorf("the last write took %v: AfterChange left the file at revision %d; want %d (inline: %v)", c.last, r, want, c.inline)
		}
	}
}
