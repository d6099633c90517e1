package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
)

// runHeartbeat runs s.Heartbeat for pool eu-central, instance i-1 (TTL
// 2s) until the test ends; its OnUp leases arrive on the channel.
func runHeartbeat(t *testing.T, s *Store) <-chan int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan int64, 8)
	done := make(chan error, 1)
	go func() {
		done <- s.Heartbeat(ctx, HeartbeatConfig{Pool: "eu-central", Instance: "i-1", Addr: "10.0.0.1:443", TTL: 2 * time.Second,
			OnUp: func(l int64, _ time.Duration) { up <- l }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("heartbeat: %v", err)
		}
	})
	return up
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
	s := newStore(t, cli, Options{RequestTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	up := runHeartbeat(t, s)
	old := nextUp(t, up, logs)

	// etcd keeps the old lease alive (here another client renews it)
	// while nothing reaches the heartbeat.
	kctx, kcancel := context.WithCancel(context.Background())
	defer kcancel()
	ka, err := direct.KeepAlive(kctx, clientv3.LeaseID(old))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range ka {
		}
	}()
	proxy.Freeze()
	if _, ok := waitFor(30*time.Second, func() bool { return strings.Contains(logs.String(), "heartbeat: lease lost") }); !ok {
		proxy.Thaw()
		t.Fatalf("the heartbeat did not lose its lease behind a frozen connection:\n%s", logs)
	}
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
}

// waitFor polls cond every 50ms until it holds or d passes; it reports
// whether cond held.
func waitFor(d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d {
		if cond() {
			return time.Since(start), true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start), cond()
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
