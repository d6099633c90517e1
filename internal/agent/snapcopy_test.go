package agent_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
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
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	rev := loadExample(t, cli)
	dir := t.TempDir()
	cfg := offlineConfig(dir)
	cfg.Endpoints = srv.Endpoints
	cfg.SnapshotCopy = filepath.Join(dir, "state", "table.json")
	h := runAgent(t, dir, cfg)
	waitFor(t, "synced and snapshot written", func() bool { s := h.snapshot(); return s != nil && s.Revision() >= rev })
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
