package snapfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/regiond/regiond/routing"
)

func TestWriteFileAtomicReplace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "table.json")
	for _, content := range []string{"first", "second, longer"} {
		if err := WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("ReadFile = %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode = %v, want 0644", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (no temp files left)", len(ents))
	}
}

func TestSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "table.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, []byte("x"), 0o644); !errors.Is(err, ErrSymlink) {
		t.Fatalf("WriteFile through a symlink: err = %v, want ErrSymlink", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Fatalf("symlink target changed to %q", b)
	}
	if _, err := ReadFile(link); !errors.Is(err, ErrSymlink) {
		t.Fatalf("ReadFile through a symlink: err = %v, want ErrSymlink", err)
	}
}

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
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t = t
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
	b, err := ReadFile(path)
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

// TestWriterCoalescesBurstsAndShowsTheLast drives the writer's step on a
// clock of the test's own (step is given the time; Refresh is an hour, so
// the wall clock it also reads for the refresh does not matter): an
// isolated change is written at once; a burst of 2,000 changes 150 µs
// apart is written at most once per MaxDelay; once the burst ends, the
// writer asks to wake within Quiet, and then the file shows the last
// change.
func TestWriterCoalescesBurstsAndShowsTheLast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	reg := prometheus.NewRegistry()
	w := NewWriter(WriterConfig{Path: path, Source: src, Registerer: reg, Refresh: time.Hour})
	cfg := w.cfg
	w.file.start()
	t.Cleanup(w.file.close)

	now := time.Now()
	var writesAt []time.Time
	// step runs the writer's step at now until it waits, recording the
	// writes, and returns how long it asks to wait.
	step := func() time.Duration {
		w.mu.Lock()
		defer w.mu.Unlock()
		for {
			before := testutil.ToFloat64(w.writes)
			wait, again := w.step(now)
			if testutil.ToFloat64(w.writes) > before {
				writesAt = append(writesAt, now)
			}
			if !again {
				return wait
			}
		}
	}

	src.set(table(1, 50))
	step()
	if len(writesAt) != 1 || readRevision(t, path) != 1 {
		t.Fatalf("the first table: %d writes, file at revision %d; want it written at once", len(writesAt), readRevision(t, path))
	}
	now = now.Add(time.Second) // a quiet spell
	const changes, gap = 2000, 150 * time.Microsecond
	began := now
	for i := int64(2); i <= changes+1; i++ {
		weight := int(i % 100)
		if i == changes+1 {
			weight = 100 // content of its own: not skipped as unchanged
		}
		src.set(table(i, weight))
		step()
		if i == 2 && len(writesAt) != 2 {
			t.Fatalf("a change after a quiet spell was not written at once")
		}
		now = now.Add(gap)
	}
	last := now.Add(-gap)
	if readRevision(t, path) == changes+1 {
		t.Fatalf("the last change of the burst was written with no pause after it")
	}
	wait := step()
	if wait <= 0 || wait > cfg.Quiet {
		t.Fatalf("after the burst the writer waits %v, want at most Quiet (%v)", wait, cfg.Quiet)
	}
	now = now.Add(wait)
	step()
	if got := readRevision(t, path); got != changes+1 {
		t.Fatalf("after the burst's pause the file is at revision %d, want the last change's %d", got, changes+1)
	}
	if end := writesAt[len(writesAt)-1]; end.After(last.Add(cfg.Quiet)) {
		t.Fatalf("the last change was written %v after it, more than Quiet (%v)", end.Sub(last), cfg.Quiet)
	}
	// Between the burst's first write (the isolated change) and its last
	// (after the pause), writes are at least MaxDelay apart.
	inBurst := writesAt[1 : len(writesAt)-1]
	for i := 1; i < len(inBurst); i++ {
		if d := inBurst[i].Sub(inBurst[i-1]); d < cfg.MaxDelay {
			t.Fatalf("writes during the burst %v apart, want at least MaxDelay (%v); writes at %v", d, cfg.MaxDelay, offsets(writesAt, began))
		}
	}
	burst := last.Sub(began)
	if most := 2 + int(burst/cfg.MaxDelay) + 1; len(writesAt)-1 > most || len(inBurst) < 2 {
		t.Fatalf("a burst of %d changes over %v caused %d writes at %v, want coalescing (2..%d)", changes, burst, len(writesAt)-1, offsets(writesAt, began), most)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metric lint: %v %v", problems, err)
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

func TestWriterSkipsUnchangedContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := runWriter(t, WriterConfig{Path: path, Source: src})
	src.set(table(5, 30))
	waitRevision(t, path, 5)
	time.Sleep(20 * time.Millisecond)
	src.set(table(5, 30)) // a new table with identical content
	for i := 0; i < 100 && testutil.ToFloat64(w.skips) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := testutil.ToFloat64(w.skips); got != 1 {
		t.Fatalf("unchanged skips = %v, want 1", got)
	}
	if got := testutil.ToFloat64(w.writes); got != 1 {
		t.Fatalf("writes = %v, want 1", got)
	}
}

func TestWriterRefreshesWrittenAt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	runWriter(t, WriterConfig{Path: path, Source: src, Refresh: 50 * time.Millisecond})
	src.set(table(7, 30))
	waitRevision(t, path, 7)
	b, _ := ReadFile(path)
	_, first, _ := routing.LoadTableJSON(b)
	for i := 0; i < 200; i++ {
		time.Sleep(10 * time.Millisecond)
		b, _ = ReadFile(path)
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
	runWriter(t, WriterConfig{Path: path, Source: src, Refresh: 50 * time.Millisecond})
	src.set(table(7, 30))
	waitRevision(t, path, 7)
	header := func() routing.JSONHeader {
		b, err := ReadFile(path)
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

func TestSameContent(t *testing.T) {
	a := []byte(`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","stale":false,"x":1}`)
	as := []byte(`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","synced_at":"2025-12-31T23:59:00.5Z","stale":false,"x":1}`)
	for name, tc := range map[string]struct {
		b    string
		same bool
	}{
		"written_at only": {`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:05.123Z","stale":false,"x":1}`, true},
		"synced_at added": {string(as), true},
		"revision only":   {`{"revision":9,"epoch":3,"written_at":"2026-01-01T00:00:00Z","stale":false,"x":1}`, true},
		"epoch":           {`{"revision":1,"epoch":4,"written_at":"2026-01-01T00:00:00Z","stale":false,"x":1}`, false},
		"content":         {`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","stale":false,"x":2}`, false},
		"stale flag":      {`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","stale":true,"x":1}`, false},
		"nothing written": {``, false},
	} {
		if got := sameContent(a, []byte(tc.b)); got != tc.same {
			t.Errorf("%s: sameContent = %v, want %v", name, got, tc.same)
		}
	}
	for name, tc := range map[string]struct {
		b    string
		same bool
	}{
		"synced_at only":   {`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","synced_at":"2026-01-01T00:00:00Z","stale":false,"x":1}`, true},
		"all times":        {`{"revision":2,"epoch":3,"written_at":"2026-01-01T00:01:00Z","synced_at":"2026-01-01T00:01:00Z","stale":false,"x":1}`, true},
		"stale flag":       {`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","synced_at":"2025-12-31T23:59:00.5Z","stale":true,"x":1}`, false},
		"content":          {`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","synced_at":"2025-12-31T23:59:00.5Z","stale":false,"x":3}`, false},
		"unclosed":         {`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","synced_at":"2025-12-31`, false},
		"epoch, synced_at": {`{"revision":1,"epoch":4,"written_at":"2026-01-01T00:00:00Z","synced_at":"2026-01-01T00:00:00Z","stale":false,"x":1}`, false},
	} {
		if got := sameContent(as, []byte(tc.b)); got != tc.same {
			t.Errorf("with synced_at, %s: sameContent = %v, want %v", name, got, tc.same)
		}
	}
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
	w := runWriter(t, WriterConfig{Path: path, Source: src, Logger: discardLogger, EnsureDir: func(d string) error {
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
	for i := 0; i < 200 && testutil.ToFloat64(w.errors) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if testutil.ToFloat64(w.errors) == 0 || asked.Load() == 0 {
		t.Fatalf("the refused write was not counted (%v errors, EnsureDir asked %d times)", testutil.ToFloat64(w.errors), asked.Load())
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
	w := runWriter(t, WriterConfig{Path: path, Source: src})
	src.set(table(3, 40))
	for i := 0; i < 200 && testutil.ToFloat64(w.errors) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if testutil.ToFloat64(w.errors) == 0 {
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
	w := NewWriter(WriterConfig{Path: path, Source: src})
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
func runWriter(t *testing.T, cfg WriterConfig) *Writer {
	t.Helper()
	w := NewWriter(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// TestWriteNow: called right after a swap, WriteNow writes an isolated
// change before it returns, leaves a change that is part of a burst to
// Run, and writes nothing inline while writes are slow or once Run has
// returned.
func TestWriteNow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := NewWriter(WriterConfig{Path: path, Source: src, Logger: discardLogger, MinInterval: time.Hour})
	w.memFS = 1 // the test's directory may be on a disk (TestInMemoryFS checks the detection)
	src.set(table(1, 10))
	w.WriteNow()
	if r := readRevision(t, path); r != 1 {
		t.Fatalf("after WriteNow of a first change: revision %d, want 1", r)
	}
	// What follows the rename is left for later: the next temp file is
	// prepared by finish (Run calls it finishDelay after the write).
	if names := tempNames(filepath.Dir(path), "table.json"); len(names) != 0 {
		t.Fatalf("WriteNow prepared the next temp file itself: %v", names)
	}
	w.mu.Lock()
	err := w.file.finish()
	w.mu.Unlock()
	if names := tempNames(filepath.Dir(path), "table.json"); err != nil || len(names) != 1 {
		t.Fatalf("after finish: %v, temp files %v; want one prepared", err, names)
	}
	src.set(table(2, 20)) // within MinInterval: a burst
	w.WriteNow()
	if r := readRevision(t, path); r != 1 {
		t.Fatalf("WriteNow wrote a change of a burst: revision %d, want 1 (left to Run)", r)
	}
	// Run writes it when the burst pauses (Quiet), then stops.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	waitRevision(t, path, 2)
	cancel()
	<-done
	src.set(table(3, 30))
	w.WriteNow()
	if r := readRevision(t, path); r != 2 {
		t.Fatalf("WriteNow wrote after Run returned: revision %d, want 2", r)
	}

	slow := NewWriter(WriterConfig{Path: filepath.Join(t.TempDir(), "table.json"), Source: src, Logger: discardLogger})
	slow.memFS, slow.lastWriteTook = 1, 2*inlineMax
	slow.WriteNow()
	if _, err := os.Stat(slow.cfg.Path); !os.IsNotExist(err) {
		t.Fatalf("WriteNow wrote while writes are slow: %v", err)
	}
}

// TestInMemoryFS: WriteNow writes only where writes cannot wait for a
// disk: /dev/shm (tmpfs, where /proc/mounts lists it so) is in memory, a
// missing directory is an error (asked again later), and a writer whose
// directory is not in memory leaves every write to Run.
func TestInMemoryFS(t *testing.T) {
	if _, err := inMemoryFS(filepath.Join(t.TempDir(), "missing")); err == nil && runtime.GOOS == "linux" {
		t.Error("a missing directory: no error")
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "/dev/shm" {
			continue
		}
		got, err := inMemoryFS("/dev/shm")
		if want := f[2] == "tmpfs" || f[2] == "ramfs"; err != nil || got != want {
			t.Errorf("/dev/shm (%s): in memory %v, %v; want %v", f[2], got, err, want)
		}
	}
	src := newSource()
	w := NewWriter(WriterConfig{Path: filepath.Join(t.TempDir(), "table.json"), Source: src, Logger: discardLogger})
	w.memFS = -1
	src.set(table(1, 10))
	w.WriteNow()
	if _, err := os.Stat(w.cfg.Path); !os.IsNotExist(err) {
		t.Fatalf("WriteNow wrote to a directory that is not in memory: %v", err)
	}
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
