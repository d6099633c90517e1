package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
)

// copyAgent is an agent with no more than what its snapshot copy needs:
// --snapshot and --snapshot-copy under dir, its log, the copy's metrics.
func copyAgent(t *testing.T, dir string) (*Agent, *logbuf.Buffer) {
	t.Helper()
	var logs logbuf.Buffer
	a := &Agent{cfg: Config{Snapshot: filepath.Join(dir, "shm", "table.json"), SnapshotCopy: filepath.Join(dir, "state", "table.json")},
		log:           slog.New(slog.NewTextHandler(&logs, nil)),
		copyErrors:    prometheus.NewCounter(prometheus.CounterOpts{Name: "copy_errors"}),
		copyLastWrite: prometheus.NewGauge(prometheus.GaugeOpts{Name: "copy_last_write"})}
	for _, p := range []string{a.cfg.Snapshot, a.cfg.SnapshotCopy} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return a, &logs
}

// tableBytes is a table JSON at revision rev under the header h.
func tableBytes(t *testing.T, rev int64, h routing.JSONHeader) []byte {
	t.Helper()
	kvs := []routing.KV{
		{Key: "pools/eu-a", Value: []byte(`{"host":"eu-a.example.net","residency":"eu"}`)},
		{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"eu-a","weight":100}]}`)},
	}
	b, err := routing.Compile(rev, kvs, nil, routing.CompileOptions{Now: h.WrittenAt}).JSONWith(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestGapRestoredCopyWithoutSyncedAt guards restoreSnapshotCopy's
// fallback to written_at: a copy written before synced_at existed is
// served as confirmed at its written_at (as loadSnapshot does for the
// snapshot file), not as never confirmed.
func TestGapRestoredCopyWithoutSyncedAt(t *testing.T) {
	a, _ := copyAgent(t, t.TempDir())
	written := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	writeFile(t, a.cfg.SnapshotCopy, tableBytes(t, 42, routing.JSONHeader{WrittenAt: written}), 0o600)
	if !a.restoreSnapshotCopy("test") {
		t.Fatal("a copy that decodes was not restored")
	}
	if st := (source{a}).Status(); !st.SyncedAt.Equal(written) || st.Revision != 42 {
		t.Fatalf("status from a copy without synced_at: %+v; want synced_at its written_at %v, revision 42", st, written)
	}
}

// TestGapCopyThatCannotBeReadIsCounted guards the count of a copy found
// at start that cannot be read (here a directory at its path): it is not
// served, and regiond_snapshot_copy_errors_total says so (a reboot would
// find nothing to serve); a missing copy is no error.
func TestGapCopyThatCannotBeReadIsCounted(t *testing.T) {
	a, _ := copyAgent(t, t.TempDir())
	if a.restoreSnapshotCopy("test") || testutil.ToFloat64(a.copyErrors) != 0 {
		t.Fatalf("no copy: restored or counted (%v errors)", testutil.ToFloat64(a.copyErrors))
	}
	if err := os.Mkdir(a.cfg.SnapshotCopy, 0o755); err != nil {
		t.Fatal(err)
	}
	if a.restoreSnapshotCopy("test") {
		t.Fatal("a directory at the copy's path restored")
	}
	if n := testutil.ToFloat64(a.copyErrors); n != 1 {
		t.Fatalf("copy_errors_total %v after a copy that cannot be read, want 1", n)
	}
}

// TestGapCopyServedWhenTheFilesCannotBeWritten guards restoreSnapshotCopy
// when the snapshot files cannot be written from the copy (a directory at
// the snapshot's path): the copy is still served on the API ("serving it
// on the API only"), and the failure is counted in copy_errors_total.
func TestGapCopyServedWhenTheFilesCannotBeWritten(t *testing.T) {
	a, logs := copyAgent(t, t.TempDir())
	synced := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	writeFile(t, a.cfg.SnapshotCopy, tableBytes(t, 42, routing.JSONHeader{WrittenAt: synced, SyncedAt: synced}), 0o600)
	if err := os.MkdirAll(filepath.Join(a.cfg.Snapshot, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !a.restoreSnapshotCopy("test") {
		t.Fatalf("the copy not served when the snapshot files cannot be written; log:\n%s", logs.String())
	}
	if tb := (source{a}).Table(); tb == nil || tb.Revision() != 42 {
		t.Fatalf("table served: %v; want the copy's, revision 42", tb)
	}
	if n := testutil.ToFloat64(a.copyErrors); n != 1 {
		t.Fatalf("copy_errors_total %v after the snapshot files failed to be written from the copy, want 1", n)
	}
}

// TestGapCopySkipOfAFileThatDoesNotDecodeIsCounted guards copySnapshot's
// count of a snapshot file that does not decode: it is not copied, and
// copy_errors_total says so (docs/agent.md: "copies skipped because the
// snapshot file does not decode").
func TestGapCopySkipOfAFileThatDoesNotDecodeIsCounted(t *testing.T) {
	a, _ := copyAgent(t, t.TempDir())
	writeFile(t, a.cfg.Snapshot, []byte(`{"format":1,"revision":`), 0o644)
	var zero [sha256.Size]byte
	if got := a.copySnapshot(zero); got != zero {
		t.Fatal("a file that does not decode was taken as copied")
	}
	if _, err := os.Stat(a.cfg.SnapshotCopy); !os.IsNotExist(err) {
		t.Fatalf("a file that does not decode was copied (%v)", err)
	}
	if n := testutil.ToFloat64(a.copyErrors); n != 1 {
		t.Fatalf("copy_errors_total %v after a skipped copy, want 1", n)
	}
}

// TestGapCopyReplacesTheFileMode0600 guards that the copy is a new file
// put in place (atomicfile: temp, fsync, rename), mode 0600: a copy
// found at the path (0644, an older hand's) is replaced, not written
// into, so it takes the copy's mode and no reader sees it half written.
func TestGapCopyReplacesTheFileMode0600(t *testing.T) {
	a, _ := copyAgent(t, t.TempDir())
	now := time.Now()
	b := tableBytes(t, 7, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
	writeFile(t, a.cfg.Snapshot, b, 0o644)
	writeFile(t, a.cfg.SnapshotCopy, []byte("old"), 0o644)
	old := inode(t, a.cfg.SnapshotCopy)
	var zero [sha256.Size]byte
	if got := a.copySnapshot(zero); got != sha256.Sum256(b) {
		t.Fatal("copySnapshot did not return the copied bytes' digest")
	}
	fi, err := os.Lstat(a.cfg.SnapshotCopy)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || inode(t, a.cfg.SnapshotCopy) == old {
		t.Fatalf("copy: mode %v, same inode %v; want a new file (renamed into place), mode 0600", fi.Mode().Perm(), inode(t, a.cfg.SnapshotCopy) == old)
	}
	if got, _ := os.ReadFile(a.cfg.SnapshotCopy); !bytes.Equal(got, b) {
		t.Fatal("copy does not hold the snapshot file's bytes")
	}
}

// TestGapFailedCopyIsRetried guards copySnapshot's return of the previous
// digest when the copy could not be written: the next round tries again
// with the same, unchanged, snapshot file (a copy that failed once, a
// disk full for a minute, was never written until the table changed).
func TestGapFailedCopyIsRetried(t *testing.T) {
	a, _ := copyAgent(t, t.TempDir())
	now := time.Now()
	b := tableBytes(t, 7, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
	writeFile(t, a.cfg.Snapshot, b, 0o644)
	if err := os.MkdirAll(filepath.Join(a.cfg.SnapshotCopy, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	var zero [sha256.Size]byte
	last := a.copySnapshot(zero)
	if testutil.ToFloat64(a.copyErrors) != 1 {
		t.Fatal("a failed copy not counted")
	}
	if err := os.RemoveAll(a.cfg.SnapshotCopy); err != nil {
		t.Fatal(err)
	}
	a.copySnapshot(last)
	if got, err := os.ReadFile(a.cfg.SnapshotCopy); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("the copy after the cause of its failure went, the file unchanged: %v; want it written", err)
	}
}

// TestGapUnchangedFileIsNotCopiedAgain guards keepSnapshotCopy's digest:
// the copy is rewritten only when the snapshot file changed (docs: "every
// minute when the file changed"), not at every round.
func TestGapUnchangedFileIsNotCopiedAgain(t *testing.T) {
	a, _ := copyAgent(t, t.TempDir())
	a.copyEvery = 10 * time.Millisecond
	now := time.Now()
	writeFile(t, a.cfg.Snapshot, tableBytes(t, 7, routing.JSONHeader{WrittenAt: now, SyncedAt: now}), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	writerDone := make(chan struct{})
	close(writerDone)
	done := make(chan struct{})
	go func() { a.keepSnapshotCopy(ctx, writerDone); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(a.cfg.SnapshotCopy); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no copy within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	first := inode(t, a.cfg.SnapshotCopy)
	time.Sleep(200 * time.Millisecond) // many rounds
	if inode(t, a.cfg.SnapshotCopy) != first {
		t.Fatal("the copy of an unchanged snapshot file was written again")
	}
}

// TestGapCopyAtStopWaitsForTheWriter guards keepSnapshotCopy's wait, at
// stop, for the snapshot writer's end: its last write (a change its
// pacing held) is what the copy must hold, not the file before it.
func TestGapCopyAtStopWaitsForTheWriter(t *testing.T) {
	a, _ := copyAgent(t, t.TempDir())
	a.copyEvery = time.Hour
	now := time.Now()
	writeFile(t, a.cfg.Snapshot, tableBytes(t, 7, routing.JSONHeader{WrittenAt: now, SyncedAt: now}), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the stop
	writerDone := make(chan struct{})
	done := make(chan struct{})
	go func() { a.keepSnapshotCopy(ctx, writerDone); close(done) }()
	for range 20 { // 200 ms: the copy waits for the writer
		if _, err := os.Stat(a.cfg.SnapshotCopy); err == nil {
			close(writerDone)
			<-done
			t.Fatal("copied at the stop before the snapshot writer's last write")
		}
		time.Sleep(10 * time.Millisecond)
	}
	last := tableBytes(t, 8, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
	writeFile(t, a.cfg.Snapshot, last, 0o644) // the writer's last write
	close(writerDone)
	<-done
	if got, err := os.ReadFile(a.cfg.SnapshotCopy); err != nil || !bytes.Equal(got, last) {
		t.Fatalf("copy at the stop: %v; want the writer's last write (revision 8)", err)
	}
}
