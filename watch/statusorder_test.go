package watch

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestStatusFollowsTheTableServed: until a table is swapped in, Status
// reports nothing of it: not its change (ChangeRevision, EventRevision)
// nor a sync time fresher than the table served, after events and after
// a relist (the concurrency review: the sync time was marked at the end
// of a list, before its table was published, calling the old table
// fresh; and a status put read between the change revision's store and
// the swap reported the old revision with the new change, which skipped
// the change's own put).
func TestStatusFollowsTheTableServed(t *testing.T) {
	m, cli, _ := listedMirror(t)
	ctx := context.Background()
	var checked int
	var mark time.Time // when the change was made
	m.beforeSwap = func() {
		checked++
		st, tb := m.Status(), m.Table()
		if st.ChangeRevision != tb.ChangeRevision() || st.EventRevision > tb.Revision() || st.Revision != tb.Revision() {
			t.Errorf("before the swap: status revision %d, change %d, event %d; the table served is at %d, changed at %d",
				st.Revision, st.ChangeRevision, st.EventRevision, tb.Revision(), tb.ChangeRevision())
		}
		if !st.SyncedAt.Before(mark) {
			t.Errorf("before the swap: synced at %v, after the change was made (%v): the table served does not hold it",
				st.SyncedAt.Format(time.RFC3339Nano), mark.Format(time.RFC3339Nano))
		}
	}

	// Events.
	mark = time.Now()
	p, err := cli.Put(ctx, faultPrefix+"pools/zz", zzA)
	if err != nil {
		t.Fatal(err)
	}
	m.drain(make(chan clientv3.WatchResponse), clientv3.WatchResponse{Events: []*clientv3.Event{
		putEvent(p.Header.Revision, "pools/zz", zzA)}}, true)
	if st := m.Status(); st.ChangeRevision != p.Header.Revision || st.EventRevision != p.Header.Revision || st.SyncedAt.Before(mark) {
		t.Fatalf("after the events' table: %+v, want the change at %d and a sync after it", st, p.Header.Revision)
	}

	// A relist (after a compaction, say).
	mark = time.Now()
	if _, err := cli.Put(ctx, faultPrefix+"pools/zz", zzB); err != nil {
		t.Fatal(err)
	}
	publish, err := m.list(ctx, ReasonCompacted)
	if err != nil {
		t.Fatal(err)
	}
	if st := m.Status(); !st.SyncedAt.Before(mark) {
		t.Fatalf("listed, not yet published: synced at %v, after the change (%v), while the table served lacks it",
			st.SyncedAt.Format(time.RFC3339Nano), mark.Format(time.RFC3339Nano))
	}
	publish()
	if st := m.Status(); st.SyncedAt.Before(mark) {
		t.Fatalf("published: synced at %v, before the change (%v)", st.SyncedAt.Format(time.RFC3339Nano), mark.Format(time.RFC3339Nano))
	}
	if checked < 2 {
		t.Fatalf("the swap was looked at %d times, want 2", checked)
	}
}
