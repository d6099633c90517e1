// Package snapshot keeps the agent's snapshot files equal to the mirror's
// table: the table JSON (--snapshot) and, beside it, the per-country index.
// It owns the whole publishing policy: when to write (at once, or after
// the write in flight, paced by the writes' own cost), from which
// goroutine (the mirror's, inline, or the Writer's), skipping unchanged
// content, the periodic refresh of written_at, retries with backoff, and
// keeping a table without pools out of a file that has them.
// What a write puts in a file is an Output's; how a file is replaced is
// internal/atomicfile's.
//
// The agent wires it as:
//
//	w := snapshot.New(snapshot.Config{Path: path, Source: src, Yield: api.Waiting})
//	mirrorCfg.AfterChange = w.AfterChange // an isolated change is written from the mirror's goroutine
//	go w.Run(ctx)                         // everything else
package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/routing"
)

// Source is what the writer snapshots: the mirror.
type Source interface {
	// Table returns the current table, or nil.
	Table() *routing.Table
	// Changed returns a channel closed at the next table swap.
	Changed() <-chan struct{}
	// SyncedAt returns when the table was last confirmed current against
	// etcd (watch.Status.SyncedAt), or zero: the file's synced_at.
	SyncedAt() time.Time
}

// Config configures a Writer. Path and Source are required.
type Config struct {
	// Path is the table JSON file's path (--snapshot); the index is
	// written beside it, at IndexPath(Path).
	Path string
	// Source is the mirror whose table is written.
	Source Source
	// Budget is the share of one CPU the rewrites may take, sustained:
	// once Burst is spent, after a write that took d the next one starts
	// no sooner than d/Budget after it began. Default 0.1.
	Budget float64
	// Burst is the CPU time the rewrites may take beyond Budget after a
	// quiet spell (the pacing's credit fills at Budget up to Burst).
	// Default 5ms.
	Burst time.Duration
	// MaxDelay bounds the pacing: a change is never held back longer than
	// this after the previous write. Default 200ms.
	MaxDelay time.Duration
	// Quiet: a change the pacing holds back goes at once, on credit, when
	// no other change has followed it for this long (the end of a burst),
	// as long as the debt stays within what MaxDelay repays. Default 2ms.
	Quiet time.Duration
	// Refresh: rewrite at least this often, so written_at is a dead-man's
	// switch; synced_at is the source's, moved or not. Default 60s.
	Refresh time.Duration
	// EnsureDir makes the files' directory ready when a write finds no
	// prepared temp file in it (atomicfile.Options.EnsureDir). Default:
	// create it, and its parents, 0755.
	EnsureDir func(dir string) error
	// Yield, if set, is asked before a write from the mirror's goroutine
	// (AfterChange): true leaves the change to Run's goroutine, woken
	// with the swap's other waiters (the agent: when blocking queries
	// wait for the change, which answer first).
	Yield func() bool
	// File is the table the file at Path holds when the writer starts
	// (the agent loaded it), or nil: if it has pools, a table without
	// pools is not written over it (see Writer).
	File *routing.Table
	// Logger receives the writer's logs; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the writer's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Writer keeps the snapshot files equal to the source's table, with one
// exception: a table without pools does not replace a table with pools
// (it routes nothing; the front doors reading the file keep the last
// table that routed). Run does the work; AfterChange lets the source
// write a change at once from its own goroutine.
type Writer struct {
	cfg Config
	log *slog.Logger
	// mu is held by whoever writes: Run's loop, or the mirror in
	// AfterChange. Held means a write is in flight: what changes
	// meanwhile is coalesced into the next write.
	mu sync.Mutex

	// outs are written in order on each publish: the table JSON first,
	// then the index (readers of the index may look at the JSON).
	outs        []*output
	skips       prometheus.Counter
	lastWriteTS prometheus.Gauge
	retry       *backoff.Backoff
	pace        pacer
	retryAt     time.Time      // after a failed write: not before this
	seen        *routing.Table // last table observed
	lastTable   *routing.Table // last table published (written or skipped as unchanged)
	lastWrite   time.Time      // last write of the table JSON: the refresh counts from it
	stopped     bool           // Run has returned: AfterChange does nothing
	memFS       int8           // the files' directory is in memory: 1 yes, -1 no, 0 unknown yet
	lastSeen    time.Time      // when the last table observed was first seen
	// filePools: the table JSON holds a table with pools (revision
	// fileRevision); holding: a table without pools is kept out of it.
	filePools    bool
	fileRevision int64
	holding      bool
	heldGauge    prometheus.Gauge
	// failure says why the last write failed, nil once one succeeds
	// (Failure); failed counts the writes that failed since.
	failure atomic.Pointer[string]
	failed  int
	// settled is the change revision of the last table the writer
	// settled (written, found unchanged, failed, or held out); settledCh
	// is closed at the next settling (Settled).
	settled   atomic.Int64
	settledMu sync.Mutex
	settledCh chan struct{}
	// now is the wall clock that times the writes (for inlineMax: a slow
	// file system holds the mirror); cpu reads the CPU time the writing
	// thread has used, the writes' cost for the pacing. Tests step the
	// writer on clocks of their own.
	now      func() time.Time
	cpu      func() time.Duration
	lastWall time.Duration // how long the last write took
}

// output is an Output with what the Writer keeps for it.
type output struct {
	Output
	name           string
	path           string         // the file written
	log            *slog.Logger   // the writer's, with the output's own path
	last           *routing.Table // the table last written (as rendered), nil: to be written
	writes, errors prometheus.Counter
}

// New returns a writer of cfg.Path and its index (IndexPath); call Run to
// start it.
func New(cfg Config) *Writer {
	if cfg.Budget <= 0 || cfg.Budget > 1 {
		cfg.Budget = 0.1
	}
	if cfg.Burst <= 0 {
		cfg.Burst = 5 * time.Millisecond
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 200 * time.Millisecond
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = 2 * time.Millisecond
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	base := cfg.Logger.With("component", "snapshot")
	w := &Writer{cfg: cfg, log: base.With("path", cfg.Path),
		retry: backoff.New(time.Second, 30*time.Second), pace: pacer{budget: cfg.Budget, burst: cfg.Burst, max: cfg.MaxDelay}, now: time.Now, cpu: cpuClock()}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "regiond", Subsystem: "snapshot", Name: name, Help: help})
	}
	// Each output logs under its own file's path: a failed index write
	// names table.idx, not the JSON beside it.
	opts := func(log *slog.Logger) atomicfile.Options {
		return atomicfile.Options{EnsureDir: cfg.EnsureDir, Logger: log}
	}
	idxPath := IndexPath(cfg.Path)
	idxLog := base.With("path", idxPath)
	w.outs = []*output{
		{Output: NewTableJSON(cfg.Path, opts(w.log)), name: "snapshot", path: cfg.Path, log: w.log,
			writes: counter("writes_total", "Snapshot file rewrites."),
			errors: counter("errors_total", "Snapshot writes that failed.")},
		{Output: NewIndex(idxPath, opts(idxLog)), name: "snapshot index", path: idxPath, log: idxLog,
			writes: counter("index_writes_total", "Snapshot index (table.idx) rewrites."),
			errors: counter("index_errors_total", "Snapshot index (table.idx) writes that failed.")},
	}
	if cfg.File != nil {
		w.filePools, w.fileRevision = cfg.File.NumPools() > 0, cfg.File.Revision()
	}
	w.heldGauge = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "snapshot",
		Name: "held", Help: "1 while the table has no pools and the snapshot files keep the last table that had pools."})
	w.skips = counter("unchanged_total", "Snapshot writes skipped because the content was unchanged.")
	w.lastWriteTS = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "snapshot",
		Name: "last_write_timestamp_seconds", Help: "Unix time of the last write that left every snapshot file (the table JSON and its index) holding the table."})
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(w.skips, w.lastWriteTS, w.heldGauge)
		for _, o := range w.outs {
			cfg.Registerer.MustRegister(o.writes, o.errors)
		}
	}
	return w
}

// Run writes the files until ctx is done. It first removes temp files a
// crashed earlier run left beside them, and on return the temp files it
// keeps prepared for the next write.
func (w *Writer) Run(ctx context.Context) error {
	w.mu.Lock()
	w.finish()
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		for _, o := range w.outs {
			o.Close()
		}
		w.stopped = true
		w.mu.Unlock()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		ch := w.cfg.Source.Changed()
		w.mu.Lock()
		now := time.Now()
		wait, again := w.step(now, false)
		w.mu.Unlock()
		if again {
			continue
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			w.mu.Lock()
			w.flush(time.Now())
			w.mu.Unlock()
			return nil
		case <-ch:
			// Shortest job first: let the API requests woken by the same
			// swap (blocking queries, each short) answer before the
			// render and write (longer) take the CPU.
			runtime.Gosched()
		case <-timer.C:
		}
	}
}

// flush writes, as Run ends, a change the pacing still holds (up to its
// MaxDelay): front doors read the files while the agent is away (a
// restart), and the agent's copy on disk (--snapshot-copy) is taken from
// them at its stop (the shutdown review: both missed the last change). A
// table held out of the files, or a retry's backoff, is left as it is.
// The caller holds mu.
func (w *Writer) flush(now time.Time) {
	t := w.cfg.Source.Table()
	if t == nil || t == w.lastTable || w.hold(t) || now.Before(w.retryAt) {
		return
	}
	w.publish(t, now, false, false)
}

// AfterChange writes the source's table at once, in the caller's
// goroutine, when a write is due now (no write in flight, the pacing
// allows it) and cheap: the mirror calls it right after a swap
// (watch.Config.AfterChange), so a change reaches the files without
// waking the writer's goroutine (on another CPU, with cold caches).
// Anything else is left to Run. The caller must not be held up by a slow
// or hung file system: AfterChange writes only to a file system held in
// memory (tmpfs, such as the default /dev/shm), and only while the last
// write took less than inlineMax (1 ms: agent.md, "a write under a
// millisecond").
func (w *Writer) AfterChange() {
	if w.cfg.Yield != nil && w.cfg.Yield() {
		return
	}
	if !w.mu.TryLock() {
		return // a write is in flight: Run writes what it missed next
	}
	defer w.mu.Unlock()
	if w.memFS == 0 {
		if ok, err := atomicfile.InMemory(filepath.Dir(w.cfg.Path)); err == nil { // else: ask again next time
			w.memFS = -1
			if ok {
				w.memFS = 1
			}
		}
	}
	if w.stopped || w.memFS != 1 || w.lastWall >= inlineMax {
		return
	}
	w.step(time.Now(), true)
}

// cpuClock returns the clock of the writes' cost: the thread's CPU time,
// or, where there is none, the wall clock.
func cpuClock() func() time.Duration {
	if _, ok := threadCPU(); ok {
		return func() time.Duration { d, _ := threadCPU(); return d }
	}
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}

// inlineMax: AfterChange writes only while the last write took less than
// this (TestInlineWritesUnderAMillisecond).
const inlineMax = time.Millisecond

// finish brings every output to rest after its last write: the replaced
// file released, the directory fsynced, the next temp file prepared (the
// first call also removes leftover temp files). An output whose directory
// fsync fails is written again after backoff, as after a failed write:
// until an fsync succeeds, its rename may not survive a crash. It reports
// whether one failed. The caller holds mu.
func (w *Writer) finish() bool {
	failed := false
	for _, o := range w.outs {
		if err := o.Finish(); err != nil {
			o.errors.Inc()
			o.last, failed = nil, true
			o.log.Error(o.name+" written, but the fsync of its directory failed; writing it again after backoff", "err", err)
		}
	}
	return failed
}

// publish renders t with health at now and writes it to every output
// whose last write holds other content (routing.Table.SameContent) or an
// older change (routing.Table.ChangeRevision: events that left the
// content as it was still move the file to their revision), or to all
// when force (the refresh). Outputs are written in order, each only up to
// its rename, and then finished, so that every file shows the change
// before any of them is brought to rest; a failure leaves the later ones
// for the retry, after backoff. The finish is part of the write, in the
// same goroutine: done later, on a timer, it would wake the process once
// more for each change (more CPU, and context switches, than the work
// itself on a small machine). inline says the mirror's goroutine writes
// (for the log).
func (w *Writer) publish(t *routing.Table, now time.Time, force, inline bool) {
	runtime.LockOSThread() // the thread's CPU clock measures this goroutine
	defer runtime.UnlockOSThread()
	cpu0 := w.cpu()
	w.lastTable = t
	rt := t.At(now)
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: w.cfg.Source.SyncedAt()}
	wrote, failed := false, false
	for i, o := range w.outs {
		if !force && o.last != nil && rt.ChangeRevision() <= o.last.ChangeRevision() && rt.SameContent(o.last) {
			continue
		}
		if err := o.Write(rt, h, true); err != nil {
			o.errors.Inc()
			o.last, failed = nil, true
			w.retryAt = time.Now().Add(w.retry.Next())
			o.log.Error("write "+o.name+"; readers keep the previous file, if there is one", "err", err, "retry_at", w.retryAt)
			// The innermost cause (an errno), not the wrapping errors,
			// which name the temp file: a new random name at each retry
			// would make each a new status put.
			msg := fmt.Sprintf("write %s %s: %v", o.name, o.path, innermost(err))
			w.failure.Store(&msg)
			break
		}
		o.last, wrote = rt, true
		o.writes.Inc()
		if i == 0 {
			w.lastWrite = now
			w.filePools, w.fileRevision = rt.NumPools() > 0, rt.Revision()
		}
	}
	if w.finish() && !failed {
		failed = true
		w.retryAt = time.Now().Add(w.retry.Next())
		msg := "bring the snapshot files to rest (fsync of their directory) failed: the journal says why"
		w.failure.Store(&msg)
	}
	if wrote && !failed {
		// Every file holds the table: the index too, which is what most
		// readers read. A write of the JSON alone does not move it, so
		// an index that keeps failing shows as a file not refreshed.
		w.lastWriteTS.Set(float64(now.UnixNano()) / 1e9)
	}
	switch {
	case failed:
		w.failed++
	case w.failed > 0:
		// Said, as the failures were: the error must not be the last
		// word in the log of an agent whose files are written again.
		w.log.Info("snapshot files written again", "failed_writes", w.failed, "revision", rt.Revision())
		w.failed = 0
		w.failure.Store(nil)
	}
	switch {
	case failed:
		w.lastTable = nil // to be written again
	case !w.retryAt.IsZero():
		w.retry.Reset()
		w.retryAt = time.Time{}
	}
	if !wrote && !failed {
		w.skips.Inc()
	}
	w.settle(t)
	// Failed writes count too: one that hangs, then fails, is slow. The
	// finish counts: the mirror's goroutine waits for it too.
	w.lastWall = w.now().Sub(now)
	cost := w.cpu() - cpu0
	w.pace.wrote(now, cost)
	if wrote && w.log.Enabled(context.Background(), slog.LevelDebug) {
		w.log.Debug("snapshot written", "revision", t.Revision(), "cpu", cost, "wall", w.lastWall, "inline", inline, "next", w.pace.next().Sub(now))
	}
}

// Failure says why the snapshot files do not hold the table: the last
// write failed (each output is written in turn; the finish's fsync
// counts), "" once a write succeeds. Safe from any goroutine.
func (w *Writer) Failure() string {
	if p := w.failure.Load(); p != nil {
		return *p
	}
	return ""
}

// Settled reports whether the writer has settled a table of change
// revision changeRev or later (written it, found the files holding it,
// failed to write it: Failure says so, or held it out: a table without
// pools), and returns a channel closed at its next settling: the status
// key waits for it, so that what it says of the files is of that change.
func (w *Writer) Settled(changeRev int64) (bool, <-chan struct{}) {
	w.settledMu.Lock()
	if w.settledCh == nil {
		w.settledCh = make(chan struct{})
	}
	ch := w.settledCh
	w.settledMu.Unlock()
	return w.settled.Load() >= changeRev, ch
}

// settle records that t is settled and wakes Settled's waiters. Tables
// are settled in the order they are served, so the last is the newest;
// its change revision is stored even when lower than the one before (etcd
// restored from a backup: kept as the highest, every later change up to
// it counted as settled before it was written, and the status key did not
// wait for the file).
func (w *Writer) settle(t *routing.Table) {
	w.settled.Store(t.ChangeRevision())
	w.settledMu.Lock()
	if w.settledCh != nil {
		close(w.settledCh)
		w.settledCh = nil
	}
	w.settledMu.Unlock()
}

// innermost returns err's innermost cause: what every retry of a failed
// write has in common ("no space left on device").
func innermost(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}
