package watch

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestProgressBehindEventsWaitsForTheirTable: a drain of [events at R]
// then [a progress notification at R] (etcd answers a progress request at
// its revision, often queued behind that revision's events) must not mark
// SyncedAt before the table holding R is served (the second read: it did,
// for the whole compile). After the drain the table is at R and SyncedAt
// is no later than now.
func TestProgressBehindEventsWaitsForTheirTable(t *testing.T) {
	m, cli, _ := listedMirror(t)
	ctx := context.Background()
	mark := time.Now()
	p, err := cli.Put(ctx, faultPrefix+"pools/zz", zzA)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Header.Revision
	checked := false
	m.beforeSwap = func() {
		checked = true
		st := m.Status()
		if st.Revision < r && st.SyncedAt.After(mark) {
			t.Errorf("before the swap: the table served is at %d (without the put at %d), yet SyncedAt %v is after the put was made (%v)",
				st.Revision, r, st.SyncedAt.Format(time.RFC3339Nano), mark.Format(time.RFC3339Nano))
		}
	}
	wch := make(chan clientv3.WatchResponse, 1)
	wch <- clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: m.clusterID, Revision: r}} // a progress notification at R
	m.drain(wch, clientv3.WatchResponse{Events: []*clientv3.Event{putEvent(r, "pools/zz", zzA)}}, true)
	if st := m.Status(); !checked || st.SyncedAt.After(time.Now()) || st.SyncedAt.Before(mark) || st.Revision != r {
		t.Fatalf("after the drain (swap looked at: %v): %+v, want revision %d synced after the put", checked, st, r)
	}
}
