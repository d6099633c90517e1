package watch

import (
	"context"
	"testing"
	"time"
)

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
