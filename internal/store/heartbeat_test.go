package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/internal/tcpproxy"
	"github.com/regiond/regiond/routing"
)

// runHeartbeat runs s.Heartbeat for pool eu-central, instance i-1 (TTL
// 2s) until the test ends; its OnUp leases arrive on the channel.
func runHeartbeat(t *testing.T, s *Store) <-chan int64 {
	t.Helper()
	up, stop := startHeartbeat(s, 2*time.Second)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("heartbeat: %v", err)
		}
	})
	return up
}

// startHeartbeat runs s's heartbeat of eu-central/i-1 with ttl; stop ends
// it (once) and returns what Heartbeat returned.
func startHeartbeat(s *Store, ttl time.Duration) (up <-chan int64, stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	ups := make(chan int64, 8)
	done := make(chan error, 1)
	go func() {
		done <- s.Heartbeat(ctx, HeartbeatConfig{Pool: "eu-central", Instance: "i-1", Addr: "10.0.0.1:443", TTL: ttl,
			OnUp: func(l int64, _ time.Duration) { ups <- l }})
	}()
	var once sync.Once
	var err error
	return ups, func() error { once.Do(func() { cancel(); err = <-done }); return err }
}

// loseLeaseEtcdKeeps has the heartbeat lose its lease old while etcd
// keeps it (another client renews it, as a new leader does after a lost
// quorum) behind the frozen proxy; the proxy stays frozen. The returned
// func stops renewing old.
func loseLeaseEtcdKeeps(t *testing.T, direct *clientv3.Client, proxy *tcpproxy.Proxy, old int64, logs *logbuf.Buffer) (release func()) {
	t.Helper()
	kctx, kcancel := context.WithCancel(context.Background())
	t.Cleanup(kcancel)
	ka, err := direct.KeepAlive(kctx, clientv3.LeaseID(old))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range ka {
		}
	}()
	proxy.Freeze()
	if _, ok := poll.Until(30*time.Second, func() bool { return strings.Contains(logs.String(), "heartbeat: lease lost") }); !ok {
		proxy.Thaw()
		t.Fatalf("the heartbeat did not lose its lease behind a frozen connection:\n%s", logs)
	}
	return kcancel
}

// nextUp returns the next lease a heartbeat came up under.
func nextUp(t *testing.T, up <-chan int64, logs *logbuf.Buffer) int64 {
	t.Helper()
	select {
	case l := <-up:
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("the heartbeat did not come up:\n%s", logs)
		return 0
	}
}

// TestHeartbeatPutsAgainUnderItsOwnLostLease: a heartbeat that loses its
// lease while etcd keeps it (its keep-alives unanswered past the TTL, as
// across a lost quorum, whose new leader renews every lease) finds its
// key under that old lease when etcd answers again. It puts the key again
// under its new lease, says so at INFO naming both leases, and revokes
// the old one. It used to log a WARN that it "took over the marker from
// another lease with the same --addr (this instance restarted …)",
// naming its own old lease as another's, and left that lease to expire.
func TestHeartbeatPutsAgainUnderItsOwnLostLease(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	direct := devetcd.NewTestClient(t, srv)
	cli, proxy := proxiedClient(t, srv)
	logs := &logbuf.Buffer{}
	clock := newTestClock()
	s := newStore(t, cli, Options{RequestTimeout: time.Second, Now: clock.now,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	up := runHeartbeat(t, s)
	old := nextUp(t, up, logs)
	since := markerSinceOf(t, direct, s)
	clock.advance(time.Hour)

	// etcd keeps the old lease alive (here another client renews it)
	// while nothing reaches the heartbeat.
	loseLeaseEtcdKeeps(t, direct, proxy, old, logs)
	proxy.Thaw()
	lease := nextUp(t, up, logs)

	key := s.Keyspace().RoutingKey(routing.HealthKey("eu-central", "i-1"))
	resp, err := direct.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != lease {
		t.Fatalf("the key after the lost lease: %v %v; want it under the new lease %x", resp, err, lease)
	}
	want := fmt.Sprintf("level=INFO msg=\"heartbeat: put the marker again under new lease %x after losing lease %x (still alive in etcd, now revoked)\"", lease, old)
	if got := logs.String(); !strings.Contains(got, want) || strings.Contains(got, "took over the marker") {
		t.Fatalf("want %s, and no takeover from another lease, in:\n%s", want, got)
	}
	if ttl, err := direct.TimeToLive(context.Background(), clientv3.LeaseID(old)); err != nil || ttl.TTL != -1 {
		t.Fatalf("the old lease %x: %v %v; want it revoked", old, ttl, err)
	}
	// The key was there all along: its since is kept.
	if got := markerSinceOf(t, direct, s); got != since {
		t.Fatalf("since %s after the key was put again, want the first put's %s (it was never gone)", got, since)
	}
}

// TestHeartbeatSinceIsTheReturnAfterALostLease: a heartbeat whose lease
// etcd ended (the key gone: the instance counted as dead) puts the key
// again with since the time of that put, not the process start: since
// says how long the instance has been live. It kept the start's.
func TestHeartbeatSinceIsTheReturnAfterALostLease(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	logs := &logbuf.Buffer{}
	clock := newTestClock()
	s := newStore(t, cli, Options{Now: clock.now,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	up := runHeartbeat(t, s)
	old := nextUp(t, up, logs)
	if got, want := markerSinceOf(t, cli, s), clock.now().UTC().Format(time.RFC3339); got != want {
		t.Fatalf("since %s at start, want %s", got, want)
	}
	clock.advance(time.Hour)
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(old)); err != nil {
		t.Fatal(err)
	}
	nextUp(t, up, logs)
	if got, want := markerSinceOf(t, cli, s), clock.now().UTC().Format(time.RFC3339); got != want {
		t.Fatalf("since %s after the lease was lost and the key put again, want that put's %s", got, want)
	}
}

// testClock is a clock tests move by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// markerSinceOf reads the since of the marker of runHeartbeat.
func markerSinceOf(t *testing.T, cli *clientv3.Client, s *Store) string {
	t.Helper()
	resp, err := cli.Get(context.Background(), s.Keyspace().RoutingKey(routing.HealthKey("eu-central", "i-1")))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the marker: %v %v", resp, err)
	}
	return markerSince(resp.Kvs[0].Value)
}

// TestHeartbeatRefusesATTLPastItsCap: Heartbeat refuses a TTL above
// MaxHeartbeatTTL, writing nothing: 2562047h47m16s overflowed its
// rounding to whole seconds and ran under a 2s lease.
func TestHeartbeatRefusesATTLPastItsCap(t *testing.T) {
	t.Parallel()
	_, cli, s, _ := storeEnv(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.Heartbeat(ctx, HeartbeatConfig{Pool: "eu-central", Instance: "i-1", Addr: "10.0.0.1:443", TTL: 2562047*time.Hour + 47*time.Minute + 16*time.Second})
	if err == nil || !strings.Contains(err.Error(), "want above 0 and at most 24h0m0s") {
		t.Fatalf("Heartbeat with a TTL past the cap: %v; want it refused naming 24h", err)
	}
	key := s.Keyspace().RoutingKey(routing.HealthKey("eu-central", "i-1"))
	if resp, err := cli.Get(context.Background(), key); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("marker written: %v %v", resp, err)
	}
}

// TestHeartbeatStopBetweenLeasesRevokesTheLostOne: a heartbeat that lost
// its lease while etcd kept it (another client renews it here, as a new
// leader does after a lost quorum) and is stopped before it put its key
// under a new lease revokes the lost one: the key goes at once (the
// shutdown review: it returned with no word, and the key outlived the
// stopped origin by the lease's TTL).
func TestHeartbeatStopBetweenLeasesRevokesTheLostOne(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	direct := devetcd.NewTestClient(t, srv)
	cli, proxy := proxiedClient(t, srv)
	logs := &logbuf.Buffer{}
	s := newStore(t, cli, Options{RequestTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	up, stop := startHeartbeat(s, 3*time.Second)
	defer stop()
	old := nextUp(t, up, logs)
	release := loseLeaseEtcdKeeps(t, direct, proxy, old, logs)
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }() // the stop, as the heartbeat grants a new lease
	time.Sleep(50 * time.Millisecond)
	proxy.Thaw() // etcd answers again
	release()    // and nothing renews the old lease any more
	if err := <-stopped; err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	key := s.Keyspace().RoutingKey(routing.HealthKey("eu-central", "i-1"))
	if resp, err := direct.Get(context.Background(), key); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("after the stop, %s: %v %v; want it gone with the lost lease %x revoked\n%s", key, resp.Kvs, err, old, logs)
	}
}

// TestHeartbeatStopWhileEtcdDoesNotAnswer: a stop whose revoke etcd does
// not answer is clean (nil, so the unit is not marked failed), warns that
// the marker goes with the lease's TTL, and ends within the revoke's
// bound (before, it returned the timeout: exit 1).
func TestHeartbeatStopWhileEtcdDoesNotAnswer(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	cli, proxy := proxiedClient(t, srv)
	logs := &logbuf.Buffer{}
	s := newStore(t, cli, Options{RequestTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	up, stop := startHeartbeat(s, 10*time.Second)
	defer stop()
	nextUp(t, up, logs)
	proxy.Freeze()
	defer proxy.Thaw()
	done := make(chan error, 1)
	go func() { done <- stop() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(logs.String(), "the marker goes when the lease's TTL ends") {
			t.Fatalf("a stop etcd does not answer: %v; want nil and the warning\n%s", err, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the heartbeat did not stop within 30 s")
	}
}
