package watch

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
)

// These tests feed the mirror watch responses that a correct etcd never
// sends (PITFALLS: etcd#15271, #20221, #15220): real etcd serves the lists,
// the faulty responses are crafted.

const faultPrefix = "/regiond/v1/routing/"

const zzA = `{"host":"a.example.net","residency":"eu","status":"active"}`
const zzB = `{"host":"b.example.net","residency":"eu","status":"active"}`

func putEvent(rev int64, rel, value string) *clientv3.Event {
	return &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(faultPrefix + rel), Value: []byte(value), ModRevision: rev}}
}

func listedMirror(t *testing.T) (*Mirror, *clientv3.Client, int64) {
	t.Helper()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	fleettest.Load(t, cli, faultPrefix)
	m, err := New(Config{Client: cli, Prefix: faultPrefix})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := m.relist(context.Background(), ReasonInitial)
	if err != nil {
		t.Fatal(err)
	}
	return m, cli, rev
}

// An out-of-order response, after events of it were applied, relists and
// the table then holds what etcd holds at the list revision.
func TestOutOfOrderRelistsToEtcdsState(t *testing.T) {
	m, cli, _ := listedMirror(t)
	ctx := context.Background()
	p1, _ := cli.Put(ctx, faultPrefix+"pools/zz", zzA)
	p2, _ := cli.Put(ctx, faultPrefix+"pools/zz", zzB)
	resp := clientv3.WatchResponse{Events: []*clientv3.Event{
		putEvent(p2.Header.Revision, "pools/zz", zzB),
		putEvent(p1.Header.Revision, "pools/zz", zzA), // backwards
	}}
	why := m.drain(make(chan clientv3.WatchResponse), resp, true)
	if why != ReasonOutOfOrder {
		t.Fatalf("drain = %q, want %q", why, ReasonOutOfOrder)
	}
	if _, err := m.relist(ctx, why); err != nil {
		t.Fatal(err)
	}
	tb := m.Table()
	p, ok := tb.Pool("zz")
	if !ok || p.Host != "b.example.net" || tb.Revision() < p2.Header.Revision {
		t.Fatalf("after relist: table revision %d, pool zz %+v (present %v); want etcd's state at %d", tb.Revision(), p, ok, p2.Header.Revision)
	}
}

// An event newer than every event seen but at or below a progress
// notification's revision means the notification came early: the mirror
// relists instead of dropping the event as a duplicate.
func TestPrematureProgressNotificationRelists(t *testing.T) {
	m, cli, r0 := listedMirror(t)
	ctx := context.Background()
	ch := make(chan clientv3.WatchResponse)
	if why := m.drain(ch, clientv3.WatchResponse{Header: &pb.ResponseHeader{Revision: r0 + 5}}, true); why != "" {
		t.Fatalf("progress notification: %q", why)
	}
	p, _ := cli.Put(ctx, faultPrefix+"pools/zz", zzA)
	resp := clientv3.WatchResponse{Header: &pb.ResponseHeader{Revision: p.Header.Revision},
		Events: []*clientv3.Event{putEvent(p.Header.Revision, "pools/zz", zzA)}}
	if p.Header.Revision > r0+5 {
		t.Fatalf("put landed at %d, beyond the early notification's %d: test setup", p.Header.Revision, r0+5)
	}
	why := m.drain(ch, resp, true)
	if why != ReasonOutOfOrder {
		t.Fatalf("event at %d after a progress notification at %d: drain = %q, want a relist", p.Header.Revision, r0+5, why)
	}
	if _, err := m.relist(ctx, why); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Table().Pool("zz"); !ok {
		t.Fatalf("pools/zz (revision %d) missing after the relist", p.Header.Revision)
	}
}

// A duplicate of an event already applied is dropped, not re-applied.
func TestDuplicateEventsAreDropped(t *testing.T) {
	m, cli, _ := listedMirror(t)
	ctx := context.Background()
	p, _ := cli.Put(ctx, faultPrefix+"pools/zz", zzA)
	ch := make(chan clientv3.WatchResponse)
	resp := clientv3.WatchResponse{Events: []*clientv3.Event{putEvent(p.Header.Revision, "pools/zz", zzA)}}
	if why := m.drain(ch, resp, true); why != "" {
		t.Fatalf("first delivery: %q", why)
	}
	before := m.Table()
	stale := clientv3.WatchResponse{Events: []*clientv3.Event{putEvent(p.Header.Revision, "pools/zz", zzB)}}
	if why := m.drain(ch, stale, true); why != "" {
		t.Fatalf("duplicate delivery: %q, want it dropped", why)
	}
	if m.Table() != before {
		t.Fatal("a duplicate event produced a new table")
	}
	if pz, _ := m.Table().Pool("zz"); pz.Host != "a.example.net" {
		t.Fatalf("duplicate re-applied: pool zz host %s", pz.Host)
	}
}

// A list published while the mirror stops (its context cancelled during
// the history reads of refused keys' last good values) swaps in no table:
// one compiled without those values would serve a refused pool as absent.
func TestListPublishedAtStopSwapsNothingIn(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	fleettest.Load(t, cli, faultPrefix)
	if _, err := cli.Put(context.Background(), faultPrefix+"pools/eu-central", `{"host":`); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Client: cli, Prefix: faultPrefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	publish, err := m.list(ctx, ReasonInitial)
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the mirror stops before the history is read
	publish()
	if tb := m.Table(); tb != nil {
		_, ok := tb.Pool("eu-central")
		t.Fatalf("a table was swapped in at stop (revision %d, pool eu-central present: %v); want none", tb.Revision(), ok)
	}

	// Not stopped, the same list serves eu-central's last good value.
	publish, err = m.list(context.Background(), ReasonInitial)
	if err != nil {
		t.Fatal(err)
	}
	publish()
	if p, ok := m.Table().Pool("eu-central"); !ok || p.Host == "" {
		t.Fatalf("pool eu-central after a whole list: %+v (present %v); want its last good value", p, ok)
	}
}

// A watch etcd created while its listed table was published (a publish
// longer than RequestTimeout: a compile, history reads) is kept, not
// dropped as a creation timeout: the publish's time is not counted in the
// creation's wait. Without that, the select picked at random between the
// fired timer and the answer, so this tries a dozen times.
func TestLongPublishIsNoCreationTimeout(t *testing.T) {
	m, _, _ := listedMirror(t)
	m.cfg.RequestTimeout = 100 * time.Millisecond
	ctx := context.Background()
	for i := range 12 {
		s, chc := m.startWatch(ctx)
		published := false
		p := &duePublish{f: func() { time.Sleep(250 * time.Millisecond); published = true }, timer: time.NewTimer(0)}
		p.due = p.timer.C
		time.Sleep(20 * time.Millisecond) // the creation answered and the publish due, together
		ok, why := m.awaitCreation(ctx, s, chc, p)
		if !ok {
			t.Fatalf("attempt %d: the watch was dropped (%q) after a publish of 250ms (published: %v); want it kept", i, why, published)
		}
		s.cancel()
	}
}
