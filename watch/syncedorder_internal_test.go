package watch

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSyncedAtMovesBeforeTheRevision: where only the table's revision
// moves (a progress notification, a probe that found the prefix
// unchanged, a relist that found the same state), SyncedAt is set before the table of the later revision is
// stored, so no Status shows the later revision with the earlier SyncedAt
// (a CI run of TestServerProgressThroughProxy read the two between the
// stores once). The store is held back by holding swapMu: SyncedAt must
// have moved while the revision has not yet.
func TestSyncedAtMovesBeforeTheRevision(t *testing.T) {
	m, cli, _ := listedMirror(t)
	ctx := context.Background()
	// put moves etcd on outside the prefix and returns its revision.
	put := func() int64 {
		resp, err := cli.Put(ctx, "/elsewhere/key", "x")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	for _, c := range []struct {
		name string
		// prepare returns the revision the table moves to and what
		// moves it.
		prepare func() (int64, func())
	}{
		{"progress notification", func() (int64, func()) {
			rev := put()
			return rev, func() {
				resp := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: m.clusterID, Revision: rev}}
				if why := m.drain(make(chan clientv3.WatchResponse), resp, true); why != "" {
					t.Errorf("progress notification: %s", why)
				}
			}
		}},
		{"probe confirming the prefix", func() (int64, func()) {
			rev := put()
			return rev, func() { m.confirm(rev) }
		}},
		// A relist that finds the state the table was compiled from keeps
		// the table and only moves its revision.
		{"list finding the same state", func() (int64, func()) {
			put()
			publish, err := m.list(ctx, ReasonCompacted)
			if err != nil {
				t.Fatal(err)
			}
			return m.applied, publish
		}},
	} {
		before := m.Status()
		time.Sleep(time.Millisecond) // so that a later SyncedAt differs
		rev, move := c.prepare()
		if rev <= before.Revision {
			t.Fatalf("%s: revision %d is not past the table's %d", c.name, rev, before.Revision)
		}
		m.swapMu.Lock()
		done := make(chan struct{})
		go func() { defer close(done); move() }()
		moved := false
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if moved = m.Status().SyncedAt.After(before.SyncedAt); moved {
				break
			}
		}
		st := m.Status()
		m.swapMu.Unlock()
		<-done
		if !moved {
			t.Fatalf("%s: SyncedAt did not move before the table of revision %d was stored", c.name, rev)
		}
		if st.Revision != before.Revision {
			t.Fatalf("%s: the revision moved to %d while the store was held", c.name, st.Revision)
		}
		if after := m.Status(); after.Revision != rev || after.SyncedAt.Before(st.SyncedAt) || !after.Synced {
			t.Fatalf("%s: after the store: revision %d SyncedAt %v, want %d and not before %v", c.name, after.Revision, after.SyncedAt, rev, st.SyncedAt)
		}
	}
}
