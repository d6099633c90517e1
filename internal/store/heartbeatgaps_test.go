package store

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/routing"
)

// hbUp is one OnUp of a heartbeat.
type hbUp struct {
	lease   int64
	granted time.Duration
}

// hbRun is a heartbeat of eu-central/i-1 (addr 10.0.0.1:443) run by
// runHeartbeatCtx.
type hbRun struct {
	up     chan hbUp
	done   chan struct{} // closed when Heartbeat returned
	err    error         // what it returned, once done
	cancel context.CancelFunc
}

// runHeartbeatCtx runs s's heartbeat of eu-central/i-1 with ttl under a
// context of its own (cancel stops it); the test's end stops it.
func runHeartbeatCtx(t *testing.T, s *Store, ttl time.Duration) *hbRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &hbRun{up: make(chan hbUp, 8), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(h.done)
		h.err = s.Heartbeat(ctx, HeartbeatConfig{Pool: "eu-central", Instance: "i-1", Addr: "10.0.0.1:443", TTL: ttl,
			OnUp: func(l int64, g time.Duration) { h.up <- hbUp{l, g} }})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
			t.Error("the heartbeat did not stop within 30 s")
		}
	})
	return h
}

// next returns the heartbeat's next OnUp, failing the test if Heartbeat
// returns first.
func (h *hbRun) next(t *testing.T, logs *logbuf.Buffer) hbUp {
	t.Helper()
	select {
	case u := <-h.up:
		return u
	case <-h.done:
		t.Fatalf("Heartbeat returned before it was up: %v\n%s", h.err, logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("the heartbeat did not come up:\n%s", logs)
	}
	return hbUp{}
}

// onMessage is a slog handler that runs fn (once) after logging the
// first record with message msg.
type onMessage struct {
	slog.Handler
	msg  string
	once sync.Once
	fn   func()
}

func (h *onMessage) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Message == h.msg {
		h.once.Do(h.fn)
	}
	return err
}

// markerKey is the key of runHeartbeatCtx's marker.
func markerKey(s *Store) string {
	return s.Keyspace().RoutingKey(routing.HealthKey("eu-central", "i-1"))
}

// TestHeartbeatTTLRoundedUp: a TTL of a fraction of a second is rounded
// up to whole seconds (4.5 s: a lease of 5 s), never down: the marker
// must outlive an outage as long as asked. (Mutation review: the
// rounding down survived every test.)
func TestHeartbeatTTLRoundedUp(t *testing.T) {
	t.Parallel()
	_, _, s, _ := storeEnv(t, Options{})
	logs := &logbuf.Buffer{}
	h := runHeartbeatCtx(t, s, 4500*time.Millisecond)
	if u := h.next(t, logs); u.granted != 5*time.Second {
		t.Fatalf("TTL 4.5s granted %s; want 5s", u.granted)
	}
}

// TestHeartbeatStopInItsBackoffRevokesTheLostLease: a heartbeat that lost
// its lease while etcd kept it, and is stopped while it waits to try
// again (its grant had no answer), revokes the lost lease: the marker goes
// at once. (Mutation review: the lost lease left out of that stop
// survived every test; the marker outlived the origin by its TTL.)
func TestHeartbeatStopInItsBackoffRevokesTheLostLease(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	direct := devetcd.NewTestClient(t, srv)
	cli, proxy := proxiedClient(t, srv)
	logs := &logbuf.Buffer{}
	var h *hbRun
	stopped := atomic.Bool{}
	// The grant after the lost lease had no answer: etcd answers again
	// and the stop comes, before the backoff's wait begins.
	handler := &onMessage{Handler: slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}),
		msg: "heartbeat: cannot write marker, retrying", fn: func() { proxy.Thaw(); stopped.Store(true); h.cancel() }}
	s := newStore(t, cli, Options{RequestTimeout: 2 * time.Second, Logger: slog.New(handler)})
	h = runHeartbeatCtx(t, s, 3*time.Second)
	old := h.next(t, logs).lease
	release := loseLeaseEtcdKeeps(t, direct, proxy, old, logs)
	defer release()
	select {
	case <-h.done:
	case <-time.After(60 * time.Second):
		proxy.Thaw()
		t.Fatalf("the heartbeat did not stop:\n%s", logs)
	}
	if !stopped.Load() || h.err != nil {
		t.Fatalf("Heartbeat: %v (stopped in its backoff: %v)\n%s", h.err, stopped.Load(), logs)
	}
	if resp, err := direct.Get(context.Background(), markerKey(s)); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("after the stop: %v %v; want the marker gone, the lost lease %x revoked\n%s", resp.Kvs, err, old, logs)
	}
}

// TestHeartbeatAtRestReadsNothing: a heartbeat whose marker is in place
// reads it once and then waits on its watch: it does not read etcd again
// and again while nothing changes. (Mutation review: its watch started at
// the read's revision instead of the one after survived every test; the
// watch returned the marker's own put at once, and the heartbeat read and
// watched in a loop for as long as etcd had no other write.)
func TestHeartbeatAtRestReadsNothing(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	ks, err := keyspace.New("/hbrest")
	if err != nil {
		t.Fatal(err)
	}
	key := ks.RoutingKey(routing.HealthKey("eu-central", "i-1"))
	var reads atomic.Int64
	counting := faultClient(t, srv, func(_ string, req any) (bool, bool) {
		if r, ok := req.(*pb.RangeRequest); ok && string(r.Key) == key {
			reads.Add(1)
		}
		return true, false
	})
	logs := &logbuf.Buffer{}
	s := New(counting, ks, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	h := runHeartbeatCtx(t, s, 2*time.Second)
	h.next(t, logs)
	if _, ok := poll.Until(30*time.Second, func() bool { return reads.Load() > 0 }); !ok {
		t.Fatal("the heartbeat never read its marker")
	}
	time.Sleep(time.Second) // nothing changes meanwhile
	if n := reads.Load(); n != 1 {
		t.Fatalf("the heartbeat read its marker %d times with nothing changed; want once\n%s", n, logs)
	}
}

// TestHeartbeatTakesOverAMarkerWithoutALease: a marker put without a
// lease (by hand), whatever its address, is taken over at the start, as
// the doc says: it would outlive every process. (Mutation review: the
// refusal of a marker of another address, without its "under a lease",
// survived every test.)
func TestHeartbeatTakesOverAMarkerWithoutALease(t *testing.T) {
	t.Parallel()
	ctx, cli, s, _ := storeEnv(t, Options{})
	if _, err := cli.Put(ctx, markerKey(s), `{"addr":"10.9.9.9:443","since":"2020-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	h := runHeartbeatCtx(t, s, 2*time.Second)
	lease := h.next(t, logs).lease
	resp, err := cli.Get(ctx, markerKey(s))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != lease || markerAddr(resp.Kvs[0].Value) != "10.0.0.1:443" {
		t.Fatalf("the marker: %v %v; want it under lease %x with this heartbeat's addr", resp, err, lease)
	}
}

// TestHeartbeatAfterALostLeaseTakesTheMarkerFromAnother: a heartbeat back
// from a lost lease that finds its marker under another live lease, with
// another address, puts it back under its new lease (logged at ERROR: two
// heartbeats with one --instance), since the time of its put: it does not
// give up as at its start, nor keep the other's since. (Mutation review:
// the start's refusal applied after a lost lease, and the since kept from
// a marker under any lease, each survived every test.)
func TestHeartbeatAfterALostLeaseTakesTheMarkerFromAnother(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	direct := devetcd.NewTestClient(t, srv)
	cli, proxy := proxiedClient(t, srv)
	logs := &logbuf.Buffer{}
	s := newStore(t, cli, Options{RequestTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	h := runHeartbeatCtx(t, s, 2*time.Second)
	old := h.next(t, logs).lease
	ctx := context.Background()

	proxy.Freeze()
	if _, ok := poll.Until(30*time.Second, func() bool { return strings.Contains(logs.String(), "heartbeat: lease lost") }); !ok {
		proxy.Thaw()
		t.Fatalf("the heartbeat did not lose its lease behind a frozen connection:\n%s", logs)
	}
	// Meanwhile the old lease ends and another heartbeat, of another
	// addr, puts the marker under its own.
	if _, err := direct.Revoke(ctx, clientv3.LeaseID(old)); err != nil && !strings.Contains(err.Error(), "requested lease not found") {
		t.Fatal(err)
	}
	other, err := direct.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Revoke(ctx, other.ID)
	if _, err := direct.Put(ctx, markerKey(s), `{"addr":"10.9.9.9:443","since":"2020-01-01T00:00:00Z"}`, clientv3.WithLease(other.ID)); err != nil {
		t.Fatal(err)
	}
	proxy.Thaw()
	lease := h.next(t, logs).lease
	resp, err := direct.Get(ctx, markerKey(s))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != lease || markerAddr(resp.Kvs[0].Value) != "10.0.0.1:443" {
		t.Fatalf("the marker after the lost lease: %v %v; want it under the new lease %x with this heartbeat's addr\n%s", resp, err, lease, logs)
	}
	if since := markerSince(resp.Kvs[0].Value); since == "2020-01-01T00:00:00Z" || since == "" {
		t.Fatalf("since %q: want the time of this put, not the other heartbeat's", since)
	}
	if !strings.Contains(logs.String(), "level=ERROR msg=\"heartbeat: after losing its lease, took the marker from another lease with another --addr") {
		t.Fatalf("the takeover is not logged at ERROR:\n%s", logs)
	}
}

// TestHeartbeatStopRefusedRevoke: a stop whose revoke etcd refuses by
// permission (the heartbeat's role lost its grant) is the error returned,
// as the doc says, not a warning and a clean exit: the marker outlives
// the origin until its TTL. (Mutation review: the refusal taken as etcd
// not answering survived every test.)
func TestHeartbeatStopRefusedRevoke(t *testing.T) {
	t.Parallel()
	const prefix = "/regiond/v1/routing/"
	sec := devetcd.NewTestSecure(t, prefix)
	root, err := sec.Server.ClientAs("root", devetcd.TestRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	logs := &logbuf.Buffer{}
	s := New(sec.Client, keyspace.Default(), Options{User: sec.Auth.User, RequestTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	h := runHeartbeatCtx(t, s, 10*time.Second)
	h.next(t, logs)
	ctx := context.Background()
	if _, err := root.RoleRevokePermission(ctx, sec.Auth.User+"-rw", prefix, clientv3.GetPrefixRangeEnd(prefix)); err != nil {
		t.Fatal(err)
	}
	h.cancel()
	var pe *PermissionError
	select {
	case <-h.done:
		if !errors.As(h.err, &pe) || !strings.Contains(h.err.Error(), "revoke the lease of "+markerKey(s)) {
			t.Fatalf("a stop whose revoke is refused: %v; want the *PermissionError\n%s", h.err, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the heartbeat did not stop within 30 s")
	}
}
