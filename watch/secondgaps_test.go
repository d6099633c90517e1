package watch

import (
	"context"
	"testing"
	"time"
)

// TestSyncedAtMovesBeforeTheRevisionOnAKeptList guards the third path of
// the SyncedAt ordering (watch/doc.go, "SyncedAt"): a relist that finds
// the state the table was compiled from keeps the table and only moves
// its revision; SyncedAt is set before that revision is stored, so no
// Status shows the list's revision with the SyncedAt of before the list.
// The store is held back by holding swapMu.
func TestSyncedAtMovesBeforeTheRevisionOnAKeptList(t *testing.T) {
	m, cli, _ := listedMirror(t)
	ctx := context.Background()
	if _, err := cli.Put(ctx, "/elsewhere/key", "x"); err != nil { // etcd moves on outside the prefix
		t.Fatal(err)
	}
	before := m.Status()
	time.Sleep(time.Millisecond) // so that a later SyncedAt differs
	publish, err := m.list(ctx, ReasonCompacted)
	if err != nil {
		t.Fatal(err)
	}
	rev := m.applied
	if rev <= before.Revision {
		t.Fatalf("the list is at revision %d, not past the table's %d", rev, before.Revision)
	}
	m.swapMu.Lock()
	done := make(chan struct{})
	go func() { defer close(done); publish() }()
	moved := false
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if moved = m.Status().SyncedAt.After(before.SyncedAt); moved {
			break
		}
	}
	st := m.Status()
	m.swapMu.Unlock()
	<-done
	if !moved {
		t.Fatalf("SyncedAt did not move before the kept table's revision %d was stored", rev)
	}
	if st.Revision != before.Revision {
		t.Fatalf("the revision moved to %d while the store was held", st.Revision)
	}
	if after := m.Status(); after.Revision != rev || after.SyncedAt.Before(st.SyncedAt) || !after.Synced {
		t.Fatalf("after the store: %+v, want revision %d, synced, and SyncedAt not before %v", after, rev, st.SyncedAt)
	}
}

// TestIdleProbeMovesSyncedAt guards "on a fully idle cluster, the probes
// do" (watch/doc.go, "SyncedAt"): a probe that finds the prefix unchanged
// at the very revision already applied (nothing written anywhere) still
// confirms the table, so SyncedAt, and /readyz's staleness, move on.
func TestIdleProbeMovesSyncedAt(t *testing.T) {
	m, _, rev := listedMirror(t)
	before := m.Status()
	time.Sleep(time.Millisecond) // so that a later SyncedAt differs
	res, at := m.probe(context.Background(), false)
	if res != probeCurrent || at != rev {
		t.Fatalf("probe of an idle cluster = %q at %d, want %q at the applied %d", res, at, probeCurrent, rev)
	}
	if st := m.Status(); !st.SyncedAt.After(before.SyncedAt) || st.Revision != before.Revision {
		t.Fatalf("after the probe: revision %d, SyncedAt %v; want revision %d and SyncedAt after %v",
			st.Revision, st.SyncedAt, before.Revision, before.SyncedAt)
	}
}
