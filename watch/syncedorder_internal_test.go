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
// unchanged), SyncedAt is set before the table of the later revision is
// stored, so no Status shows the later revision with the earlier SyncedAt
// (a CI run of TestServerProgressThroughProxy read the two between the
// stores once). The store is held back by holding swapMu: SyncedAt must
// have moved while the revision has not yet.
func TestSyncedAtMovesBeforeTheRevision(t *testing.T) {
	m, cli, _ := listedMirror(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		move func(rev int64)
	}{
		{"progress notification", func(rev int64) {
			resp := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: m.clusterID, Revision: rev}}
			if why := m.drain(make(chan clientv3.WatchResponse), resp, true); why != "" {
				t.Errorf("progress notification: %s", why)
			}
		}},
		{"probe confirming the prefix", func(rev int64) { m.confirm(rev) }},
	} {
		resp, err := cli.Put(ctx, "/elsewhere/key", "x") // etcd moves on outside the prefix
		if err != nil {
			t.Fatal(err)
		}
		rev := resp.Header.Revision
		before := m.Status()
		time.Sleep(time.Millisecond) // so that a later SyncedAt differs
		m.swapMu.Lock()
		done := make(chan struct{})
		go func() { defer close(done); c.move(rev) }()
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
		if after := m.Status(); after.Revision != rev || after.SyncedAt.Before(st.SyncedAt) {
			t.Fatalf("%s: after the store: revision %d SyncedAt %v, want %d and not before %v", c.name, after.Revision, after.SyncedAt, rev, st.SyncedAt)
		}
	}
}
