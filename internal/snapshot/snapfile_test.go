package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/routing"
)

// source is an in-memory table source that swaps tables like the mirror.
type source struct {
	mu       sync.Mutex
	t        *routing.Table
	ch       chan struct{}
	polls    int // calls of Changed: one per writer loop
	syncedAt time.Time
}

func newSource() *source { return &source{ch: make(chan struct{})} }

func (s *source) Table() *routing.Table {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t
}

func (s *source) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	return s.ch
}

func (s *source) SyncedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncedAt
}

// synced sets the time SyncedAt returns, without a swap (as a silence
// probe confirms the table).
func (s *source) synced(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncedAt = at
}

func (s *source) set(t *routing.Table) {
	s.swap(t)
	s.wake()
}

// swap sets the table without waking Changed waiters; wake wakes them.
// The mirror does both apart, AfterChange between them.
func (s *source) swap(t *routing.Table) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t = t
}

func (s *source) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}

func table(rev int64, weight int) *routing.Table {
	kvs := []routing.KV{
		{Key: "pools/a", Value: []byte(`{"host":"a.example.net","residency":"eu"}`)},
		{Key: "pools/b", Value: []byte(`{"host":"b.example.net","residency":"eu"}`)},
		{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"a","weight":` + strconv.Itoa(weight) + `},{"pool":"b","weight":` + strconv.Itoa(100-weight) + `}]}`)},
	}
	return routing.Compile(rev, kvs, nil, routing.CompileOptions{})
}

func readRevision(t *testing.T, path string) int64 {
	t.Helper()
	b, err := atomicfile.ReadFile(path)
	if err != nil {
		return -1
	}
	tb, _, err := routing.LoadTableJSON(b)
	if err != nil {
		t.Fatalf("snapshot does not load: %v", err)
	}
	return tb.Revision()
}

func waitRevision(t *testing.T, path string, rev int64) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if readRevision(t, path) == rev {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("snapshot never reached revision %d (at %d)", rev, readRevision(t, path))
}

// TestWriterPacesByCost drives the writer's step on a clock of the test's
// own (step is given the time, and each write takes writeCost on it;
// Refresh is an hour, so the wall clock it also reads for the refresh does
// not matter): an isolated change is written at once; during a burst of
// 2,000 changes 150 µs apart, the writes' CPU never runs ahead of Budget
// by more than Burst (and one write), the first writes go at once until
// the credit is spent, and then writes begin writeCost/Budget apart and as
// soon as the pacing allows (no more than one change's gap later); once
// the burst ends, the file shows the last change within one pacing
// interval. A write that costs more than MaxDelay×Budget is paced by
// MaxDelay.
func TestWriterPacesByCost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		writeCost time.Duration
	}{{"cheap writes", 200 * time.Microsecond}, {"1 ms writes", time.Millisecond}, {"slow writes", 40 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) { testPacing(t, tc.writeCost) })
	}
}

// pacingRig steps a writer on a clock of the test's own: each write costs
// writeCost on the CPU clock, and step records when writes happened.
type pacingRig struct {
	w        *Writer
	src      *source
	path     string
	now      time.Time
	writesAt []time.Time
}

func newPacingRig(t *testing.T, writeCost time.Duration, reg prometheus.Registerer) *pacingRig {
	r := &pacingRig{path: filepath.Join(t.TempDir(), "table.json"), src: newSource(), now: time.Now()}
	r.w = New(Config{Path: r.path, Source: r.src, Registerer: reg, Refresh: time.Hour})
	r.w.finish()
	t.Cleanup(func() { closeOutputs(r.w) })
	calls := 0
	r.w.cpu = func() time.Duration { calls++; return time.Duration(calls/2) * writeCost }
	return r
}

// step runs the writer's step at now until it waits, recording the
// writes, and returns how long it asks to wait.
func (r *pacingRig) step() time.Duration {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		// A publish is a write or a skip (the same weight again).
		before := testutil.ToFloat64(w.outs[0].writes) + testutil.ToFloat64(w.skips)
		wait, again := w.step(r.now, false)
		if testutil.ToFloat64(w.outs[0].writes)+testutil.ToFloat64(w.skips) > before {
			r.writesAt = append(r.writesAt, r.now)
		}
		if !again {
			return wait
		}
	}
}

func testPacing(t *testing.T, writeCost time.Duration) {
	reg := prometheus.NewRegistry()
	r := newPacingRig(t, writeCost, reg)
	src, path, cfg := r.src, r.path, r.w.cfg
	interval := min(time.Duration(float64(writeCost)/cfg.Budget), cfg.MaxDelay)
	step := r.step

	src.set(table(1, 50))
	step()
	if len(r.writesAt) != 1 || readRevision(t, path) != 1 {
		t.Fatalf("the first table: %d writes, file at revision %d; want it written at once", len(r.writesAt), readRevision(t, path))
	}
	r.now = r.now.Add(time.Second) // a quiet spell
	const changes, gap = 2000, 150 * time.Microsecond
	began := r.now
	for i := int64(2); i <= changes+1; i++ {
		weight := int(i % 100)
		if i == changes+1 {
			weight = 100 // content of its own: not skipped as unchanged
		}
		src.set(table(i, weight))
		step()
		if i == 2 && len(r.writesAt) != 2 {
			t.Fatalf("a change after a quiet spell was not written at once")
		}
		r.now = r.now.Add(gap)
	}
	last := r.now.Add(-gap)
	// Once the changes stop, the last goes on credit after Quiet, unless a
	// write costs more than half of what MaxDelay repays (then the pacing
	// interval holds).
	deadline := interval
	if 2*writeCost < time.Duration(float64(cfg.MaxDelay)*cfg.Budget) {
		deadline = min(interval, cfg.Quiet)
	}
	for range 3 {
		if readRevision(t, path) == changes+1 {
			break
		}
		wait := step()
		if readRevision(t, path) == changes+1 {
			break
		}
		if wait <= 0 || wait > deadline {
			t.Fatalf("after the burst the writer waits %v, want at most %v", wait, deadline)
		}
		r.now = r.now.Add(wait)
	}
	if got := readRevision(t, path); got != changes+1 {
		t.Fatalf("after the burst the file is at revision %d, want the last change's %d", got, changes+1)
	}
	writesAt := r.writesAt
	if end := writesAt[len(writesAt)-1]; end.After(last.Add(deadline)) {
		t.Fatalf("the last change was written %v after it, more than %v", end.Sub(last), deadline)
	}
	inBurst := writesAt[1:]
	if time.Duration(float64(writeCost)/cfg.Budget) <= cfg.MaxDelay { // else MaxDelay paces, past the budget
		for i, at := range inBurst {
			spent := time.Duration(i+1) * writeCost
			if allowed := cfg.Burst + time.Duration(float64(at.Sub(began))*cfg.Budget) + writeCost; spent > allowed {
				t.Fatalf("by %v into the burst the writes took %v of CPU, more than Burst + Budget × time (%v); writes at %v",
					at.Sub(began), spent, allowed, offsets(writesAt, began))
			}
		}
	}
	paced := false // the credit is spent: the writes are paced
	for i := 1; i < len(inBurst); i++ {
		d := inBurst[i].Sub(inBurst[i-1])
		switch {
		case !paced && d <= gap:
			continue // at once, while the credit lasts
		case !paced:
			paced = true
			if i == 1 && writeCost < cfg.Burst {
				t.Fatalf("the second write of the burst waited %v, want at once while the credit (Burst %v) lasts; writes at %v",
					d, cfg.Burst, offsets(writesAt, began))
			}
			// The credit left before the last free write (any of [0, cost))
			// shortens this one wait: the CPU bound above covers it.
		case d < interval-gap: // a write late by part of a gap repays its credit on the next
			t.Fatalf("writes during the burst %v apart once the credit is spent, want at least %v (cost %v / budget %v, less a gap); writes at %v",
				d, interval-gap, writeCost, cfg.Budget, offsets(writesAt, began))
		}
		if d > interval+gap {
			t.Fatalf("writes during the burst %v apart, want at most %v (as soon as the pacing allows); writes at %v",
				d, interval+gap, offsets(writesAt, began))
		}
	}
	if !paced {
		t.Fatalf("the writes were never paced during the burst; writes at %v", offsets(writesAt, began))
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metric lint: %v %v", problems, err)
	}
}

// TestWriterBorrowsAtTheEndOfABurst: once the credit is spent, a change
// right after a paced write would wait the pacing interval (cost/Budget);
// when it is the last of its burst it is written Quiet after it, on
// credit. A write dearer than half of what MaxDelay repays is not
// borrowed right after a paced write: it waits its interval.
func TestWriterBorrowsAtTheEndOfABurst(t *testing.T) {
	for _, tc := range []struct {
		cost   time.Duration
		borrow bool
	}{{time.Millisecond, true}, {5 * time.Millisecond, true}, {15 * time.Millisecond, false}} {
		t.Run(tc.cost.String(), func(t *testing.T) {
			r := newPacingRig(t, tc.cost, nil)
			cfg := r.w.cfg
			r.src.set(table(1, 50))
			r.step()
			const gap = 150 * time.Microsecond
			rev := int64(2)
			for ; len(r.writesAt) < 6; rev++ { // a burst, until the credit is spent and writes are paced
				r.src.set(table(rev, int(rev%100)))
				r.step()
				r.now = r.now.Add(gap)
			}
			r.now = r.writesAt[len(r.writesAt)-1].Add(gap)
			r.src.set(table(rev, 100)) // the last change, right after a paced write
			last := r.now
			for range 10 {
				wait := r.step()
				if readRevision(t, r.path) == rev {
					break
				}
				r.now = r.now.Add(wait)
			}
			if got := readRevision(t, r.path); got != rev {
				t.Fatalf("file at revision %d, want %d", got, rev)
			}
			took := r.writesAt[len(r.writesAt)-1].Sub(last)
			interval := min(time.Duration(float64(tc.cost)/cfg.Budget), cfg.MaxDelay)
			switch {
			case tc.borrow && took != cfg.Quiet:
				t.Fatalf("the last change was written %v after it, want Quiet (%v)", took, cfg.Quiet)
			case !tc.borrow && took < interval-2*gap:
				t.Fatalf("a %v write was borrowed: written %v after the change, want about the interval %v", tc.cost, took, interval)
			}
		})
	}
}

// TestWriterBorrowingStaysWithinBudget: changes that keep coming, each a
// little more than Quiet after the last (so each looks like the end of a
// burst), are written on credit only while the debt stays within what
// MaxDelay repays: over ten seconds the writes take no more CPU than
// Burst + Budget × time + that debt, and once the credit is spent most
// changes are coalesced.
func TestWriterBorrowingStaysWithinBudget(t *testing.T) {
	const writeCost = time.Millisecond
	r := newPacingRig(t, writeCost, nil)
	cfg := r.w.cfg
	gap := cfg.Quiet + cfg.Quiet/2
	r.src.set(table(1, 50))
	r.step()
	began := r.now
	changes := 0
	for i := int64(2); r.now.Sub(began) < 10*time.Second; i++ {
		r.src.set(table(i, int(i%100)))
		changes++
		next := r.now.Add(gap)
		for r.now.Before(next) { // step at every wake-up the writer asks for
			wait := r.step()
			if wait <= 0 {
				t.Fatalf("the writer asks to wait %v", wait)
			}
			if r.now = r.now.Add(wait); r.now.After(next) {
				r.now = next
			}
		}
	}
	spent := time.Duration(len(r.writesAt)-1) * writeCost
	debt := time.Duration(float64(cfg.MaxDelay) * cfg.Budget)
	if allowed := cfg.Burst + time.Duration(float64(r.now.Sub(began))*cfg.Budget) + debt + writeCost; spent > allowed {
		t.Fatalf("%d writes of %d changes took %v of CPU over %v, more than Burst + Budget × time + MaxDelay × Budget (%v)",
			len(r.writesAt)-1, changes, spent, r.now.Sub(began), allowed)
	}
	if len(r.writesAt)-1 > changes/2 {
		t.Fatalf("%d writes of %d changes: the borrowing is not bounded", len(r.writesAt)-1, changes)
	}
}

// offsets returns the times in ts as durations since t0.
func offsets(ts []time.Time, t0 time.Time) []time.Duration {
	ds := make([]time.Duration, len(ts))
	for i, at := range ts {
		ds[i] = at.Sub(t0)
	}
	return ds
}

// TestWriterSkipsUnchangedContent: a new table with the file's content
// and change revision is not written, nor is one that only a progress
// notification moved (WithRevision); events that leave the content as the
// file has it (a burst that flips a route and back within one write) are:
// the file moves to their revision.
func TestWriterSkipsUnchangedContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := runWriter(t, Config{Path: path, Source: src})
	src.set(table(5, 30))
	waitRevision(t, path, 5)
	time.Sleep(20 * time.Millisecond)
	check := func(what string, skips, writes float64, rev int64) {
		t.Helper()
		for i := 0; i < 100 && testutil.ToFloat64(w.skips) < skips; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if got := testutil.ToFloat64(w.skips); got != skips {
			t.Fatalf("%s: skips = %v, want %v", what, got, skips)
		}
		if rev > 0 {
			waitRevision(t, path, rev)
		}
		if got := testutil.ToFloat64(w.outs[0].writes); got != writes {
			t.Fatalf("%s: writes = %v, want %v", what, got, writes)
		}
	}
	src.set(table(5, 30))
	check("identical content", 1, 1, 0)
	src.set(table(5, 30).WithRevision(9))
	check("progress", 2, 1, 0)
	if got := readRevision(t, path); got != 5 {
		t.Fatalf("after a progress notification the file is at %d, want 5", got)
	}
	src.set(table(12, 30))
	check("events at 12 that changed nothing", 2, 2, 12)
}

func TestWriterRefreshesWrittenAt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	runWriter(t, Config{Path: path, Source: src, Refresh: 50 * time.Millisecond})
	src.set(table(7, 30))
	waitRevision(t, path, 7)
	b, _ := atomicfile.ReadFile(path)
	_, first, _ := routing.LoadTableJSON(b)
	for i := 0; i < 200; i++ {
		time.Sleep(10 * time.Millisecond)
		b, _ = atomicfile.ReadFile(path)
		if _, at, err := routing.LoadTableJSON(b); err == nil && at.After(first) {
			return
		}
	}
	t.Fatal("written_at never refreshed without a change")
}

// TestWriterRefreshKeepsSyncedAt: the periodic rewrite carries the
// source's synced_at as it is, however old (etcd down: the file is
// rewritten, but not confirmed); a synced_at that moved without a change
// of content waits for the refresh, which then carries it.
func TestWriterRefreshKeepsSyncedAt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	synced := time.Now().Add(-79*time.Second - 123456789)
	src.synced(synced)
	runWriter(t, Config{Path: path, Source: src, Refresh: 50 * time.Millisecond})
	src.set(table(7, 30))
	waitRevision(t, path, 7)
	header := func() routing.JSONHeader {
		b, err := atomicfile.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, h, err := routing.LoadTableJSONHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	first := header()
	if !first.SyncedAt.Equal(synced) {
		t.Fatalf("file's synced_at %v, want the source's %v", first.SyncedAt, synced)
	}
	waitHeader := func(what string, ok func(routing.JSONHeader) bool) routing.JSONHeader {
		t.Helper()
		for i := 0; i < 300; i++ {
			if h := header(); ok(h) {
				return h
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("the file never %s: %+v", what, header())
		return routing.JSONHeader{}
	}
	h := waitHeader("refreshed", func(h routing.JSONHeader) bool { return h.WrittenAt.After(first.WrittenAt) })
	if !h.SyncedAt.Equal(synced) {
		t.Fatalf("the refresh wrote synced_at %v, want the source's unchanged %v", h.SyncedAt, synced)
	}
	later := synced.Add(75 * time.Second)
	src.synced(later)
	waitHeader("took the moved synced_at", func(h routing.JSONHeader) bool { return h.SyncedAt.Equal(later) })
}

// TestWriterEnsuresItsDirectory: a write that finds no directory asks
// EnsureDir for one: what it refuses is not written (and counted as an
// error); what it creates is written into.
func TestWriterEnsuresItsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snap")
	path := filepath.Join(dir, "table.json")
	var refuse atomic.Bool
	refuse.Store(true)
	var asked atomic.Int32
	src := newSource()
	w := runWriter(t, Config{Path: path, Source: src, Logger: discardLogger, EnsureDir: func(d string) error {
		asked.Add(1)
		if d != dir {
			t.Errorf("EnsureDir(%s), want %s", d, dir)
		}
		if refuse.Load() {
			return errors.New("not the agent's own")
		}
		return os.Mkdir(d, 0o750)
	}})
	src.set(table(3, 40))
	for i := 0; i < 200 && testutil.ToFloat64(w.outs[0].errors) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if testutil.ToFloat64(w.outs[0].errors) == 0 || asked.Load() == 0 {
		t.Fatalf("the refused write was not counted (%v errors, EnsureDir asked %d times)", testutil.ToFloat64(w.outs[0].errors), asked.Load())
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("the writer made the directory EnsureDir refused: %v", err)
	}
	refuse.Store(false) // retried with backoff (1s)
	waitRevision(t, path, 3)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("directory %v %v, want EnsureDir's 0750", fi, err)
	}
}

// TestWriterRetriesAFailedWrite: a write that fails (here: the directory
// cannot be created) is retried with backoff, without waiting for the next
// change or the 60s refresh.
func TestWriterRetriesAFailedWrite(t *testing.T) {
	path, blocker := unwritablePath(t)
	src := newSource()
	w := runWriter(t, Config{Path: path, Source: src})
	src.set(table(3, 40))
	for i := 0; i < 200 && testutil.ToFloat64(w.outs[0].errors) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if testutil.ToFloat64(w.outs[0].errors) == 0 {
		t.Fatal("the write never failed: test setup")
	}
	os.Remove(blocker) // the fault clears; no new table arrives
	waitRevision(t, path, 3)
}

// TestWriterIdlesWithoutATable: before the first table (etcd unreachable,
// no snapshot) the writer waits instead of spinning.
func TestWriterIdlesWithoutATable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := New(Config{Path: path, Source: src})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	time.Sleep(200 * time.Millisecond)
	cancel()
	<-done
	src.mu.Lock()
	polls := src.polls
	src.mu.Unlock()
	if polls > 3 {
		t.Fatalf("writer looped %d times in 200ms with no table: it spins", polls)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a snapshot was written with no table: %v", err)
	}
}

// runWriter runs a writer until the test ends.
func runWriter(t *testing.T, cfg Config) *Writer {
	t.Helper()
	w := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// TestAfterChange: called right after a swap, AfterChange writes a change
// before it returns when no write is in flight and the pacing allows it,
// with what follows the renames (the next temp files prepared); it leaves the change to Run
// (without waiting) while a write is in flight, while the pacing holds
// writes back, while Yield says so, while writes are slow, where the
// directory is not in memory, and once Run has returned.
func TestAfterChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	yield := false
	w := New(Config{Path: path, Source: src, Logger: discardLogger, Yield: func() bool { return yield }})
	w.memFS = 1 // the test's directory may be on a disk (atomicfile.TestInMemory checks the detection)
	src.set(table(1, 10))
	w.AfterChange()
	if r := readRevision(t, path); r != 1 {
		t.Fatalf("after AfterChange of a first change: revision %d, want 1", r)
	}
	// What follows the renames is done before it returns, not left to
	// Run (a wake-up more per change): the next temp files are prepared.
	for _, base := range []string{"table.json", "table.idx"} {
		if names := tempNames(filepath.Dir(path), base); len(names) != 1 {
			t.Fatalf("after AfterChange: %s temp files %v; want one prepared", base, names)
		}
	}
	inline := func(name string, want int64) {
		t.Helper()
		w.AfterChange()
		if r := readRevision(t, path); r != want {
			t.Fatalf("%s: revision %d after AfterChange, want %d", name, r, want)
		}
	}
	paced := func() { w.pace.lastStart, w.pace.credit = time.Now().Add(-time.Hour), 0 }

	paced()
	src.set(table(2, 20))
	w.mu.Lock() // a write in flight
	inline("a write in flight", 1)
	w.mu.Unlock()
	w.pace.lastStart, w.pace.credit = time.Now(), -500*time.Microsecond // the pacing holds writes back 5 ms
	inline("within the pacing interval", 1)
	paced()
	yield = true
	inline("while Yield says so", 1)
	yield = false
	w.memFS = -1
	inline("a directory not in memory", 1)
	w.memFS = 1
	w.lastWall = 2 * inlineMax
	inline("after a slow write", 1)
	w.lastWall = 0
	paced()
	inline("the pacing allows it", 2)

	// Run writes what is left to it, then stops.
	src.set(table(3, 30))
	w.mu.Lock()
	inline("a write in flight", 2)
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	waitRevision(t, path, 3)
	cancel()
	<-done
	paced()
	src.set(table(4, 40))
	inline("after Run returned", 3)
}

// unwritablePath returns a snapshot path whose directory cannot be created
// (a file stands where it should be), and that file: removing it makes the
// path writable.
func unwritablePath(t *testing.T) (path, blocker string) {
	t.Helper()
	blocker = filepath.Join(t.TempDir(), "shm")
	if err := os.WriteFile(blocker, []byte("a file where the directory should be"), 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(blocker, "table.json"), blocker
}

// writtenAt returns the written_at of the table JSON b.
func writtenAt(t *testing.T, b []byte) time.Time {
	t.Helper()
	var h struct {
		WrittenAt time.Time `json:"written_at"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatalf("snapshot header: %v", err)
	}
	return h.WrittenAt
}

// closeOutputs closes w's outputs (a writer stepped without Run).
func closeOutputs(w *Writer) {
	for _, o := range w.outs {
		o.Close()
	}
}

// recordingOutput is an Output that logs its calls into a shared list.
type recordingOutput struct {
	Output
	name string
	log  *[]string
}

func (o recordingOutput) Write(t *routing.Table, h routing.JSONHeader, deferred bool) error {
	*o.log = append(*o.log, fmt.Sprintf("write %s deferred=%v", o.name, deferred))
	return o.Output.Write(t, h, deferred)
}

func (o recordingOutput) Finish() error {
	*o.log = append(*o.log, "finish "+o.name)
	return o.Output.Finish()
}

// TestPublishRenamesAllBeforeFinishing: a publish writes every output up
// to its rename, the table JSON first, and only then finishes them (the
// replaced files released, the next temp files prepared), in the same
// call: readers of the index do not wait for the JSON's finish, and
// nothing is left for a later wake-up of the writer.
func TestPublishRenamesAllBeforeFinishing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := New(Config{Path: path, Source: src, Logger: discardLogger})
	w.memFS = 1
	var calls []string
	for _, o := range w.outs {
		o.Output = recordingOutput{Output: o.Output, name: o.name, log: &calls}
	}
	src.set(table(1, 10))
	w.AfterChange()
	want := []string{"write snapshot deferred=true", "write snapshot index deferred=true", "finish snapshot", "finish snapshot index"}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls of one publish:\n got %q\nwant %q", calls, want)
	}
	if r := readRevision(t, path); r != 1 {
		t.Fatalf("revision %d in the file, want 1", r)
	}
	for _, base := range []string{"table.json", "table.idx"} {
		if names := tempNames(filepath.Dir(path), base); len(names) != 1 {
			t.Fatalf("%s temp files %v after the publish; want one prepared", base, names)
		}
	}
}

// finishFailsOnce is an Output whose first Finish after a write fails (a
// directory fsync refused), and which counts its writes.
type finishFailsOnce struct {
	Output
	writes, failed atomic.Int64
}

func (o *finishFailsOnce) Write(t *routing.Table, h routing.JSONHeader, deferred bool) error {
	o.writes.Add(1)
	return o.Output.Write(t, h, deferred)
}

func (o *finishFailsOnce) Finish() error {
	err := o.Output.Finish()
	if o.writes.Load() > 0 && o.failed.CompareAndSwap(0, 1) {
		return errors.New("fsync: input/output error (injected)")
	}
	return err
}

// TestFinishFailureIsRetried: a write whose finish fails (its directory's
// fsync: the rename may not survive a crash) counts as an error and is
// written again after backoff, as a failed write is.
func TestFinishFailureIsRetried(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	src.set(table(1, 10))
	reg := prometheus.NewRegistry()
	w := New(Config{Path: path, Source: src, Logger: discardLogger, Registerer: reg})
	ff := &finishFailsOnce{Output: w.outs[0].Output}
	w.outs[0].Output = ff
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitRevision(t, path, 1)
	deadline := time.Now().Add(10 * time.Second)
	for ff.writes.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ff.writes.Load(); n != 2 {
		t.Fatalf("table.json written %d times after a failed finish, want 2 (written again after backoff)", n)
	}
	if n := testutil.ToFloat64(w.outs[0].errors); n != 1 {
		t.Fatalf("regiond_snapshot_errors_total %v after one failed finish, want 1", n)
	}
	time.Sleep(100 * time.Millisecond) // nothing more to write: no third write
	if n := ff.writes.Load(); n != 2 {
		t.Fatalf("table.json written %d times, want 2", n)
	}
}

// indexFailsAfterFirst is the index's Output with every write but the
// first failing while fail is set.
type indexFailsAfterFirst struct {
	Output
	writes atomic.Int64
	fail   atomic.Bool
}

func (o *indexFailsAfterFirst) Write(t *routing.Table, h routing.JSONHeader, deferred bool) error {
	if o.writes.Add(1) > 1 && o.fail.Load() {
		return errors.New("write: no space left on device (injected)")
	}
	return o.Output.Write(t, h, deferred)
}

// TestIndexFailureStopsTheWriteTimestamp: while the index's writes fail
// and the table JSON's succeed, regiond_snapshot_last_write_timestamp_seconds
// stays at the last write that left both files holding the table (so the
// alert on a file not refreshed fires: most readers read the index), and
// moves again once the index is written.
func TestIndexFailureStopsTheWriteTimestamp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	src.set(table(1, 10))
	w := New(Config{Path: path, Source: src, Logger: discardLogger, Registerer: prometheus.NewRegistry()})
	idx := &indexFailsAfterFirst{}
	idx.Output = w.outs[1].Output
	idx.fail.Store(true)
	w.outs[1].Output = idx
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitIndex := func(rev int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if got, _ := readIndex(t, IndexPath(path)); got == rev {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("table.idx never reached revision %d", rev)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitIndex(1)
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(w.lastWriteTS) == 0 { // set once the write's finish is done, after the renames
		if time.Now().After(deadline) {
			t.Fatal("last_write_timestamp_seconds not set after both files were written")
		}
		time.Sleep(5 * time.Millisecond)
	}
	first := testutil.ToFloat64(w.lastWriteTS)

	src.set(table(2, 90))
	waitRevision(t, path, 2)
	deadline = time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(w.outs[1].errors) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the index's injected failure was never counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := testutil.ToFloat64(w.lastWriteTS); got != first {
		t.Fatalf("last_write_timestamp_seconds moved to %v with table.json at revision 2 and table.idx stuck at 1, want it at %v", got, first)
	}
	if n := testutil.ToFloat64(w.outs[0].errors); n != 0 {
		t.Fatalf("regiond_snapshot_errors_total %v, want 0 (only the index failed)", n)
	}

	idx.fail.Store(false) // the retry, after backoff, writes the index
	waitIndex(2)
	deadline = time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(w.lastWriteTS) == first {
		if time.Now().After(deadline) {
			t.Fatal("last_write_timestamp_seconds did not move once the index was written")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWriterHoldsATableWithoutPools: a table without pools (it routes
// nothing) does not replace a file whose table has pools, whether the
// writer wrote that file or found it at start (Config.File); the next
// table with pools is written, and a file without pools is replaced as
// usual.
func TestWriterHoldsATableWithoutPools(t *testing.T) {
	empty := func(rev int64) *routing.Table { return routing.Compile(rev, nil, nil, routing.CompileOptions{}) }
	held := func(reg *prometheus.Registry) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "regiond_snapshot_held" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("regiond_snapshot_held not registered")
		return 0
	}
	waitHeld := func(reg *prometheus.Registry, want float64) {
		t.Helper()
		for i := 0; i < 500 && held(reg) != want; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if got := held(reg); got != want {
			t.Fatalf("regiond_snapshot_held %v, want %v", got, want)
		}
	}

	t.Run("written by the writer", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "table.json")
		src, reg := newSource(), prometheus.NewRegistry()
		src.set(table(1, 50))
		startWriter(t, Config{Path: path, Source: src, Registerer: reg})
		waitRevision(t, path, 1)
		src.set(empty(2))
		waitHeld(reg, 1)
		if rev := readRevision(t, path); rev != 1 {
			t.Fatalf("the file holds revision %d, want 1: a table without pools was written over one with pools", rev)
		}
		src.set(table(3, 60))
		waitRevision(t, path, 3)
		waitHeld(reg, 0)
	})
	t.Run("found at start", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "table.json")
		src, reg := newSource(), prometheus.NewRegistry()
		src.set(empty(2))
		startWriter(t, Config{Path: path, Source: src, Registerer: reg, File: table(1, 50)})
		waitHeld(reg, 1)
		if rev := readRevision(t, path); rev != -1 {
			t.Fatalf("the file holds revision %d, want it untouched (absent here)", rev)
		}
	})
	t.Run("a file without pools", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "table.json")
		src, reg := newSource(), prometheus.NewRegistry()
		src.set(empty(2))
		startWriter(t, Config{Path: path, Source: src, Registerer: reg, File: empty(1)})
		waitRevision(t, path, 2)
		src.set(empty(3))
		waitRevision(t, path, 3)
		if got := held(reg); got != 0 {
			t.Fatalf("regiond_snapshot_held %v with no pools before either, want 0", got)
		}
	})
}
