package watch_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/watch"
)

// TestHealthyWatchResetsTheBackoff: failures before a watch that lasted do
// not slow the attempts after it. The agent starts cut off from etcd, so its
// lists fail and the backoff grows (50 ms, 500 ms, 5 s: the next would be
// 30 s); then it lists and watches; once the watch has lasted, the path
// goes silent for a moment (the connection up, nothing answered): it must
// be connected again within seconds of the thaw, not after the 30 s the
// earlier failures had grown the backoff to.
func TestHealthyWatchResetsTheBackoff(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	_, proxy := exampleBehindProxy(t)
	// gRPC reconnects every 50 ms, so only the mirror's own backoff delays
	// the attempts.
	quick := grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 200 * time.Millisecond,
		Backoff: grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1, MaxDelay: 50 * time.Millisecond}})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.URL()}, DialTimeout: time.Second,
		DialOptions: []grpc.DialOption{quick}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	grows := func() *backoff.Backoff {
		b := backoff.New(50*time.Millisecond, 30*time.Second)
		b.Factor, b.Jitter, b.ResetAft = 10, 0, time.Hour
		return b
	}
	reg := prometheus.NewRegistry()
	proxy.Sever()
	m, err := watch.New(watch.Config{Client: cli, Prefix: prefix, Registerer: reg, NewBackoff: grows,
		ProgressInterval: 200 * time.Millisecond, RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	listFailed := func() float64 { return resyncsBy(t, reg, watch.ReasonListFailed) }
	waitFor := func(what string, within time.Duration, cond func() bool) time.Duration {
		t.Helper()
		began := time.Now()
		for !cond() {
			if time.Since(began) > within {
				t.Fatalf("%s: not within %v", what, within)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(began)
	}
	// Three failed lists (the third waits 5 s: the backoff is at 5 s, its
	// next delay 30 s).
	waitFor("three failed lists", 20*time.Second, func() bool { return listFailed() >= 3 })
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitFor("connected after the first outage", 20*time.Second, func() bool { return m.Status().Connected })
	time.Sleep(1500 * time.Millisecond) // the watch lasts: a success

	// The second outage leaves the connection up (the path goes silent),
	// so the wait's early end on a connection back after an outage
	// (WaitConn) does not apply: only the reset after the healthy watch
	// keeps the next delay short, not the 30 s the first outage grew it to.
	proxy.Freeze()
	waitFor("disconnected", 10*time.Second, func() bool { return !m.Status().Connected })
	time.Sleep(time.Second) // reopens time out meanwhile, and back off
	proxy.Thaw()
	took := waitFor("connected again (the backoff left at 30 s by the first outage's failures?)", 15*time.Second,
		func() bool { return m.Status().Connected })
	t.Logf("connected again %v after the thaw; lists failed: %v", took.Round(time.Millisecond), listFailed())
}
