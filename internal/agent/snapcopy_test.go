package agent_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/snapshot"
	"github.com/regiond/regiond/routing"
)

// TestSnapshotCopySurvivesAReboot: with --snapshot-copy on persistent
// disk, the agent keeps a copy of the snapshot file (written at its stop
// here). A reboot empties the snapshot's tmpfs, and etcd does not answer
// at boot: the agent writes the snapshot files from the copy at start, so
// the front doors have the last table, with its old synced_at (they mark
// it stale), and the API serves it. Without a copy it would serve
// nothing (503) until etcd answered.
func TestSnapshotCopySurvivesAReboot(t *testing.T) {
	t.Parallel() // self-contained (its own etcd, agents and directories): beside the waiting tests rather than before them all
	h, dir, cfg, rev := syncedWithCopy(t)
	_, before := h.resolve("PL", "k")
	h.stop()
	written, err := os.ReadFile(cfg.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile(cfg.SnapshotCopy)
	if err != nil || !bytes.Equal(copied, written) {
		t.Fatalf("the copy after a stop: %v; want the snapshot file's bytes (%d of them, copy %d)", err, len(written), len(copied))
	}
	if fi, err := os.Stat(cfg.SnapshotCopy); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the copy's mode: %v %v; want 0600", fi.Mode(), err)
	}

	// The reboot: the tmpfs is empty, etcd unreachable.
	if err := os.RemoveAll(filepath.Dir(cfg.Snapshot)); err != nil {
		t.Fatal(err)
	}
	cfg.Endpoints = []string{"http://127.0.0.1:1"}
	h = runAgent(t, dir, cfg)
	tb := h.snapshot()
	if tb == nil || tb.Revision() != rev {
		t.Fatalf("the snapshot file at a start from the copy: %v; want the copy's table at revision %d", tb, rev)
	}
	if _, err := os.Stat(snapshot.IndexPath(cfg.Snapshot)); err != nil {
		t.Fatalf("the index at a start from the copy: %v", err)
	}
	hdr, ok := h.snapshotHeader()
	_, copyHdr, err := routing.LoadTableJSONHeader(copied)
	if err != nil || !ok || !hdr.SyncedAt.Equal(copyHdr.SyncedAt) {
		t.Fatalf("synced_at %v (%v), want the copy's %v: the front doors judge staleness by it", hdr.SyncedAt, err, copyHdr.SyncedAt)
	}
	if code, d := h.resolve("PL", "k"); code != 200 || d.Pool != before.Pool {
		t.Fatalf("PL after the reboot with etcd away: %d %+v; want the copy's %s", code, d, before.Pool)
	}
	var st api.Status
	h.get("/v1/status", &st)
	if st.Connected || st.Revision != rev {
		t.Fatalf("status after the reboot: %+v; want disconnected at the copy's revision %d", st, rev)
	}
}

// syncedWithCopy runs an agent with --snapshot-copy, synced with an etcd
// holding the example config at rev, its files in dir.
func syncedWithCopy(t *testing.T) (h *harness, dir string, cfg agent.Config, rev int64) {
	t.Helper()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	rev = loadExample(t, cli)
	dir = t.TempDir()
	cfg = offlineConfig(dir)
	cfg.Endpoints = srv.Endpoints
	cfg.SnapshotCopy = filepath.Join(dir, "state", "table.json")
	h = runAgent(t, dir, cfg)
	waitFor(t, "synced and snapshot written", func() bool { s := h.snapshot(); return s != nil && s.Revision() >= rev })
	return h, dir, cfg, rev
}

// TestSnapshotCopyServesForAFileThatDoesNotDecode: a snapshot file that
// does not decode (truncated) beside a good copy, etcd unreachable: the
// agent serves the copy and writes the files from it, and at its stop the
// copy is still one that loads (the shutdown review: it served 503, and
// copied the bad file over the good copy, leaving a reboot nothing).
func TestSnapshotCopyServesForAFileThatDoesNotDecode(t *testing.T) {
	t.Parallel() // self-contained (its own etcd, agents and directories): beside the waiting tests rather than before them all
	h, dir, cfg, rev := syncedWithCopy(t)
	_, before := h.resolve("PL", "k")
	h.stop()
	good, err := os.ReadFile(cfg.SnapshotCopy)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Snapshot, good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Endpoints = []string{"http://127.0.0.1:1"}
	h = runAgent(t, dir, cfg)
	if code, d := h.resolve("PL", "k"); code != 200 || d.Pool != before.Pool {
		t.Fatalf("PL with a file that does not decode and etcd away: %d %+v; want the copy's %s", code, d, before.Pool)
	}
	if tb := h.snapshot(); tb == nil || tb.Revision() != rev {
		t.Fatalf("the snapshot file: %v; want it written from the copy, at revision %d", tb, rev)
	}
	h.stop()
	now, err := os.ReadFile(cfg.SnapshotCopy)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := routing.LoadTableJSONHeader(now); err != nil {
		t.Fatalf("the copy after the stop does not decode (%v): the good copy (%d bytes) was replaced (%d bytes)", err, len(good), len(now))
	}
}

// TestSnapshotCopyIsNotReplacedByAFileThatDoesNotDecode: the copy is
// written only from bytes that decode: a file made undecodable while the
// agent runs cut off from etcd (a hand, a disk error) is not copied at
// the stop.
func TestSnapshotCopyIsNotReplacedByAFileThatDoesNotDecode(t *testing.T) {
	t.Parallel() // self-contained (its own etcd, agents and directories): beside the waiting tests rather than before them all
	h, dir, cfg, _ := syncedWithCopy(t)
	h.stop()
	good, err := os.ReadFile(cfg.SnapshotCopy)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Endpoints = []string{"http://127.0.0.1:1"}
	h = runAgent(t, dir, cfg)
	// The agent writes the seed it serves (stale) at start: after that.
	waitFor(t, "the snapshot file written again, stale", func() bool {
		b, err := os.ReadFile(cfg.Snapshot)
		return err == nil && !bytes.Equal(b, good) && bytes.Contains(b, []byte(`"stale":true`))
	})
	if err := os.WriteFile(cfg.Snapshot, []byte(`{"format":1,"revision":`), 0o644); err != nil {
		t.Fatal(err)
	}
	h.stop()
	if now, err := os.ReadFile(cfg.SnapshotCopy); err != nil || !bytes.Equal(now, good) {
		t.Fatalf("the copy after a stop with a file that does not decode: %d bytes (%v); want the good copy's %d", len(now), err, len(good))
	}
}

// TestSnapshotCopyMetrics: the copy's last write time is exported while
// the agent runs, and a copy that cannot be written (a directory put at
// its path while the agent runs: one there at start is refused) is
// counted in regiond_snapshot_copy_errors_total, for an alert: a reboot
// would find an old table, or none; the last write time stays the last
// good copy's.
func TestSnapshotCopyMetrics(t *testing.T) {
	t.Parallel() // self-contained (its own etcd, agents and directories): beside the waiting tests rather than before them all
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	dir := t.TempDir()
	cfg := offlineConfig(dir)
	cfg.Endpoints = srv.Endpoints
	cfg.SnapshotCopy = filepath.Join(dir, "state", "table.json")
	h := runAgent(t, dir, cfg, func(a *agent.Agent) { agent.SetSnapshotCopyEvery(a, 100*time.Millisecond) })
	waitFor(t, "the copy written", func() bool { return gauge(t, h, "regiond_snapshot_copy_last_write_timestamp_seconds") > 0 })
	if n := counter(t, h, "regiond_snapshot_copy_errors_total"); n != 0 {
		t.Errorf("copy_errors_total %v, want 0", n)
	}
	last := gauge(t, h, "regiond_snapshot_copy_last_write_timestamp_seconds")
	if err := os.Remove(cfg.SnapshotCopy); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.SnapshotCopy, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), prefix+"routes/DE", `{"targets":[{"pool":"eu-west","weight":100}]}`); err != nil {
		t.Fatal(err) // a change: the next copy is due
	}
	waitFor(t, "a failed copy counted", func() bool { return counter(t, h, "regiond_snapshot_copy_errors_total") >= 1 })
	if g := gauge(t, h, "regiond_snapshot_copy_last_write_timestamp_seconds"); g != last {
		t.Errorf("copy_last_write_timestamp_seconds %v with the copies failing, want the last good one's %v", g, last)
	}
	h.stop()
	// A copy that does not decode, at a start without a snapshot file:
	// nothing is served from it, and it is counted.
	dir = t.TempDir()
	cfg = offlineConfig(dir)
	cfg.SnapshotCopy = filepath.Join(dir, "state", "table.json")
	if err := os.MkdirAll(filepath.Dir(cfg.SnapshotCopy), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.SnapshotCopy, []byte(`{"not":"a table"`), 0o600); err != nil {
		t.Fatal(err)
	}
	h = runAgent(t, dir, cfg)
	if n := counter(t, h, "regiond_snapshot_copy_errors_total"); n != 1 {
		t.Errorf("copy_errors_total %v after a copy that does not decode, want 1", n)
	}
	if code, _ := h.resolve("PL", "k"); code == 200 {
		t.Error("a table served from a copy that does not decode")
	}
}

// TestSnapshotCopyPathIsChecked: a --snapshot-copy at the snapshot's own
// path or its index's (the copy, 0600, took the front doors' file from
// them, or put the table JSON in the index; through a symbolic link to
// the directory too), relative, or naming a directory is refused at start,
// naming the flag, before anything is written. One in the snapshot's
// directory (lost in the reboot it is kept for, unless that directory is
// on disk) starts with a warning; one without --snapshot is ignored with
// a warning, as the packaged unit's is when REGIOND_ARGS turns the files
// off (the diff review: refusing it stopped such a node at an upgrade).
func TestSnapshotCopyPathIsChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		copy func(snapshot string) string
		want string
	}{
		{"the snapshot", func(s string) string { return s }, "is --snapshot"},
		{"the index", func(s string) string { return strings.TrimSuffix(s, ".json") + ".idx" }, "is the snapshot's index"},
		{"the snapshot through a link", func(s string) string {
			link := filepath.Join(filepath.Dir(filepath.Dir(s)), "link")
			if err := os.MkdirAll(filepath.Dir(s), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Dir(s), link); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(link, filepath.Base(s))
		}, "is --snapshot"},
		{"relative", func(string) string { return "state/table.json" }, "must be an absolute path"},
		{"a directory", func(s string) string { return filepath.Dir(filepath.Dir(s)) + "/state/" }, "names a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := offlineConfig(dir)
			cfg.SnapshotCopy = tc.copy(cfg.Snapshot)
			a, err := agent.New(cfg)
			if err == nil {
				stopOffline(t, a)
				t.Fatalf("--snapshot-copy %s (%s) accepted", cfg.SnapshotCopy, tc.name)
			}
			if !strings.Contains(err.Error(), "--snapshot-copy") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("--snapshot-copy %s: %v; want it refused naming the flag and %q", cfg.SnapshotCopy, err, tc.want)
			}
			if _, err := os.Stat(cfg.Snapshot); !os.IsNotExist(err) {
				t.Errorf("the snapshot file was made before the refusal (%v)", err)
			}
		})
	}
	for _, tc := range []struct {
		name     string
		snapshot func(snapshot string) string
		copy     func(snapshot string) string
		want     string
	}{
		{"beside the snapshot", func(s string) string { return s }, func(s string) string { return filepath.Join(filepath.Dir(s), "copy.json") }, "is in --snapshot's directory"},
		{"without --snapshot", func(string) string { return "" }, func(s string) string { return filepath.Join(filepath.Dir(filepath.Dir(s)), "state", "table.json") }, "is ignored: --snapshot is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := offlineConfig(dir)
			var logs logbuf.Buffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			cfg.Snapshot, cfg.SnapshotCopy = tc.snapshot(cfg.Snapshot), tc.copy(cfg.Snapshot)
			a, err := agent.New(cfg)
			if err != nil {
				t.Fatalf("--snapshot-copy %s (%s): %v; want a start with a warning", cfg.SnapshotCopy, tc.name, err)
			}
			stopOffline(t, a)
			if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, tc.want) {
				t.Errorf("--snapshot-copy %s (%s): log %q; want a warning %q", cfg.SnapshotCopy, tc.name, l, tc.want)
			}
		})
	}
}
