package snapfile

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/snapindex"
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

// WriterConfig configures a Writer. Path and Source are required.
type WriterConfig struct {
	Path   string
	Source Source
	// MinInterval: a change at least this long after the previous change
	// is written at once; closer changes form a burst. Default 10ms.
	MinInterval time.Duration
	// Quiet: during a burst, write once no change came for this long.
	// Default 5ms.
	Quiet time.Duration
	// MaxDelay: during a burst, never hold a change back longer than this.
	// Default 200ms.
	MaxDelay time.Duration
	// Refresh: rewrite at least this often, so written_at is a dead-man's
	// switch; synced_at is the source's, moved or not. Default 60s.
	Refresh time.Duration
	// EnsureDir makes the file's directory ready when a write finds no
	// prepared temp file in it (the directory was removed, say): it
	// creates the directory, or returns why it must not be written into.
	// Default: create it, and its parents, 0755.
	EnsureDir  func(dir string) error
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Writer keeps the snapshot file equal to the source's table, coalescing
// bursts of changes. Run does the work; WriteNow lets the source write an
// isolated change at once from its own goroutine.
type Writer struct {
	cfg WriterConfig
	// mu is held by whoever writes: Run's loop, or the mirror in WriteNow.
	mu  sync.Mutex
	log *slog.Logger

	writes, skips, errors prometheus.Counter
	lastWriteTS           prometheus.Gauge
	idxWrites, idxErrors  prometheus.Counter

	file *preparedFile
	// idx is the per-country index (IndexPath), written after each write
	// of the file with the same protocol; idxDue says the last table
	// written to the file is not yet in the index (its write failed).
	idx           *preparedFile
	idxEnc        snapindex.Encoder
	idxBuf        []byte
	idxDue        bool
	lastTable     *routing.Table // last table written (or skipped as unchanged)
	retry         *backoff.Backoff
	retryAt       time.Time      // after a failed write: not before this
	seen          *routing.Table // last table observed
	inBurst       bool           // the pending change came right after another
	lastWrite     time.Time
	lastWriteTook time.Duration // render and write, for WriteNow
	stopped       bool          // Run has returned: WriteNow does nothing
	memFS         int8          // the file's directory is in memory: 1 yes, -1 no, 0 unknown yet
	lastChange    time.Time
	firstPending  time.Time

	// The file's content as segments (routing.Table.JSONSegments), which
	// alias lastScratch and the written table's immutable encodings, and
	// the storage to render the next table into. The two sets are used in
	// turn: no 100 KB buffer and no garbage per change.
	lastSegs, spareSegs       [][]byte
	lastScratch, spareScratch []byte
}

// NewWriter returns a writer; call Run to start it.
func NewWriter(cfg WriterConfig) *Writer {
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = 10 * time.Millisecond
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = 5 * time.Millisecond
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 200 * time.Millisecond
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Writer{cfg: cfg, log: cfg.Logger.With("component", "snapshot", "path", cfg.Path),
		retry: backoff.New(time.Second, 30*time.Second)}
	w.file = newPreparedFile(cfg.Path, 0o644, w.log)
	w.idx = newPreparedFile(IndexPath(cfg.Path), 0o644, w.log)
	if cfg.EnsureDir != nil {
		w.file.ensureDir = cfg.EnsureDir
		w.idx.ensureDir = cfg.EnsureDir
	}
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "regiond", Subsystem: "snapshot", Name: name, Help: help}
	}
	w.writes = prometheus.NewCounter(opts("writes_total", "Snapshot file rewrites."))
	w.skips = prometheus.NewCounter(opts("unchanged_total", "Snapshot writes skipped because the content was unchanged."))
	w.errors = prometheus.NewCounter(opts("errors_total", "Snapshot writes that failed."))
	w.lastWriteTS = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "snapshot",
		Name: "last_write_timestamp_seconds", Help: "Unix time of the last snapshot write."})
	w.idxWrites = prometheus.NewCounter(opts("index_writes_total", "Snapshot index (table.idx) rewrites."))
	w.idxErrors = prometheus.NewCounter(opts("index_errors_total", "Snapshot index (table.idx) writes that failed."))
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(w.writes, w.skips, w.errors, w.lastWriteTS, w.idxWrites, w.idxErrors)
	}
	return w
}

// Run writes the file until ctx is done. It first removes temp files a
// crashed earlier run left beside the file, and on return the temp file it
// keeps prepared for the next write.
func (w *Writer) Run(ctx context.Context) error {
	w.mu.Lock()
	w.file.start()
	w.idx.start()
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.file.close()
		w.idx.close()
		w.stopped = true
		w.mu.Unlock()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		ch := w.cfg.Source.Changed()
		w.mu.Lock()
		now := time.Now()
		wait, again := w.step(now)
		if w.file.pending || w.idx.pending {
			if at := w.lastWrite.Add(finishDelay); now.Before(at) {
				wait = min(wait, at.Sub(now))
			} else {
				if err := w.file.finish(); err != nil {
					w.errors.Inc()
					w.log.Error("snapshot written; fsync of its directory failed", "err", err)
				}
				if err := w.idx.finish(); err != nil {
					w.idxErrors.Inc()
					w.log.Error("snapshot index written; fsync of its directory failed", "err", err)
				}
			}
		}
		w.mu.Unlock()
		if again {
			continue
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
			// Shortest job first: let the API requests woken by the same
			// swap (blocking queries, ~20 µs each) answer before the
			// render and write (~100 µs) take the CPU.
			runtime.Gosched()
		case <-timer.C:
		}
	}
}

// WriteNow writes the source's table at once, in the caller's goroutine,
// when it is a change after a quiet spell (not part of a burst) and the
// writer is not busy: the mirror calls it right after a swap, so an
// isolated change reaches the file without waking the writer's goroutine
// (on another CPU, with cold caches). Anything else is left to Run. The
// caller must not be held up by a slow or hung file system: WriteNow
// writes only to a file system held in memory (tmpfs, such as the default
// /dev/shm), and not while the last write took longer than inlineMax.
func (w *Writer) WriteNow() {
	if !w.mu.TryLock() {
		return
	}
	defer w.mu.Unlock()
	if w.memFS == 0 {
		if ok, err := inMemoryFS(filepath.Dir(w.cfg.Path)); err == nil { // else: ask again next time
			w.memFS = -1
			if ok {
				w.memFS = 1
			}
		}
	}
	if w.stopped || w.memFS != 1 || w.lastWriteTook > inlineMax {
		return
	}
	// Only the write itself, up to the rename: the rest (the directory's
	// fsync, a no-op in memory; preparing the next temp file) is Run's,
	// finishDelay later, once readers have read the new file.
	w.file.deferFinish, w.idx.deferFinish = true, true
	w.step(time.Now())
	w.file.deferFinish, w.idx.deferFinish = false, false
}

// finishDelay: Run finishes an inline write this long after it.
const finishDelay = 2 * time.Millisecond

// inlineMax: WriteNow writes only while writes take less than this.
const inlineMax = time.Millisecond

// step observes the source's table and writes it when a write is due. It
// returns how long Run may wait before the next step, or again when it
// wrote and should look again at once. The caller holds mu.
func (w *Writer) step(now time.Time) (wait time.Duration, again bool) {
	t := w.cfg.Source.Table()
	if t != w.seen {
		// A change right after another one starts (or extends) a burst.
		w.inBurst = now.Sub(w.lastChange) < w.cfg.MinInterval || (w.inBurst && !w.firstPending.IsZero())
		w.seen, w.lastChange = t, now
		if w.firstPending.IsZero() {
			w.firstPending = now
		}
	}
	wait = w.cfg.Refresh - now.Sub(w.lastWrite)
	if t == nil {
		wait = w.cfg.Refresh // nothing to write until the first table
	}
	if t != nil && now.Before(w.retryAt) {
		wait = w.retryAt.Sub(now)
	} else if t != nil && (t != w.lastTable || wait <= 0) {
		due := w.due(now)
		if wait <= 0 || !due.After(now) {
			w.write(t, now)
			return 0, true
		}
		wait = min(wait, due.Sub(now))
	}
	return wait, false
}

// due returns when a pending change should be written: at once when it
// came after a quiet spell, otherwise when the burst pauses for Quiet or
// MaxDelay has passed since the first unwritten change.
func (w *Writer) due(now time.Time) time.Time {
	if !w.inBurst {
		return now
	}
	return minTime(w.lastChange.Add(w.cfg.Quiet), w.firstPending.Add(w.cfg.MaxDelay))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// write renders t and replaces the file, unless only written_at, synced_at
// and the revision would change (a progress notification: the content is
// the same, and the file's revision and synced_at may lag until the
// refresh) and the refresh is not due. The table is rendered as segments,
// the kernel gathers them into the file (writev): its bulk is copied once.
// A failed write is retried with backoff.
func (w *Writer) write(t *routing.Table, now time.Time) {
	w.lastTable, w.firstPending = t, time.Time{}
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: w.cfg.Source.SyncedAt()}
	segs, scratch, err := t.JSONSegmentsWith(w.spareSegs, w.spareScratch, h)
	w.spareSegs, w.spareScratch = segs, scratch
	if err != nil {
		w.errors.Inc()
		w.log.Error("render snapshot", "err", err)
		return
	}
	if now.Sub(w.lastWrite) < w.cfg.Refresh && sameSegments(segs, w.lastSegs) {
		w.skips.Inc()
		if w.idxDue {
			w.writeIndex(t, h)
		}
		return
	}
	err = w.file.write(segs...)
	w.lastWriteTook = time.Since(now) // failed writes too: one that hangs, then fails, is slow
	if err != nil {
		w.errors.Inc()
		w.lastTable = nil // still to be written
		w.retryAt = time.Now().Add(w.retry.Next())
		w.log.Error("write snapshot; readers keep the previous file", "err", err, "retry_at", w.retryAt)
		return
	}
	w.retry.Reset()
	w.retryAt = time.Time{}
	clear(w.lastSegs) // no longer keeps the previous file's table alive
	w.lastSegs, w.spareSegs = segs, w.lastSegs
	w.lastScratch, w.spareScratch = scratch, w.lastScratch
	w.writes.Inc()
	w.lastWriteTS.Set(float64(now.UnixNano()) / 1e9)
	w.writeIndex(t, h)
	w.lastWrite = time.Now()
	w.lastWriteTook = w.lastWrite.Sub(now)
}

// writeIndex replaces the index with t's, rendered with the file's header
// h. A failure is logged and counted, and leaves the previous index in
// place; the next write, of a change or not, tries again.
func (w *Writer) writeIndex(t *routing.Table, h routing.JSONHeader) {
	b, err := w.idxEnc.Encode(w.idxBuf, t, h)
	if err == nil {
		w.idxBuf = b
		err = w.idx.write(b)
	}
	if err != nil {
		w.idxDue = true
		w.idxErrors.Inc()
		w.log.Error("write snapshot index; readers keep the previous index", "index", w.idx.path, "err", err)
		if w.retryAt.IsZero() {
			w.retryAt = time.Now().Add(w.retry.Next())
			w.lastTable = nil // to be written again, then the index
		}
		return
	}
	if w.idxDue {
		w.idxDue = false
		w.retry.Reset()
		w.retryAt = time.Time{}
	}
	w.idxWrites.Inc()
}

// IndexPath returns the path of the per-country index written beside the
// snapshot at path: a ".json" suffix replaced by ".idx", else ".idx"
// appended (docs/snapshot-index.md).
func IndexPath(path string) string {
	if base, ok := strings.CutSuffix(path, ".json"); ok {
		return base + ".idx"
	}
	return path + ".idx"
}

// sameSegments reports whether two renderings of routing.Table.JSONSegments
// differ at most in revision, written_at and synced_at: the headers (the
// first segments) by sameContent, the rest as concatenations, wherever the
// segments end.
func sameSegments(a, b [][]byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false // nothing written yet
	}
	return sameContent(a[0], b[0]) && equalConcat(a[1:], b[1:])
}

// equalConcat reports whether the concatenations of a and b are equal.
// Pieces that are the same memory (sections and effective members shared
// between tables) are equal without being read.
func equalConcat(a, b [][]byte) bool {
	n := 0
	for _, s := range a {
		n += len(s)
	}
	for _, s := range b {
		n -= len(s)
	}
	if n != 0 {
		return false
	}
	var x, y []byte
	for i, j := 0, 0; ; {
		for len(x) == 0 && i < len(a) {
			x, i = a[i], i+1
		}
		for len(y) == 0 && j < len(b) {
			y, j = b[j], j+1
		}
		if len(x) == 0 || len(y) == 0 {
			return len(x) == len(y)
		}
		k := min(len(x), len(y))
		if &x[0] != &y[0] && !bytes.Equal(x[:k], y[:k]) {
			return false
		}
		x, y = x[k:], y[k:]
	}
}

var (
	epochField     = []byte(`,"epoch":`)
	writtenAtField = []byte(`,"written_at":"`)
	syncedAtField  = []byte(`","synced_at":"`)
)

// sameContent reports whether two table JSONs differ at most in revision,
// written_at and synced_at (the first members, in routing.Table.JSON's
// order).
func sameContent(a, b []byte) bool {
	ea, wa, ta := headerCuts(a)
	eb, wb, tb := headerCuts(b)
	if ea < 0 || eb < 0 {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(a[ea:wa], b[eb:wb]) && bytes.Equal(a[ta:], b[tb:])
}

// headerCuts returns where ,"epoch": starts, where ,"written_at":" starts
// and where the closing quote of the times starts (written_at's, or
// synced_at's when it follows); -1s when not found.
func headerCuts(b []byte) (epoch, writtenAt, tail int) {
	epoch = bytes.Index(b, epochField)
	writtenAt = bytes.Index(b, writtenAtField)
	if epoch < 0 || writtenAt < epoch {
		return -1, -1, -1
	}
	tail = writtenAt + len(writtenAtField)
	end := bytes.IndexByte(b[tail:], '"')
	if end < 0 {
		return -1, -1, -1
	}
	tail += end
	if bytes.HasPrefix(b[tail:], syncedAtField) {
		tail += len(syncedAtField)
		if end = bytes.IndexByte(b[tail:], '"'); end < 0 {
			return -1, -1, -1
		}
		tail += end
	}
	return epoch, writtenAt, tail
}
