package watch_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/tcpproxy"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// TestNotConnectedBeforeTheWatchIsCreated: the only endpoint drops between
// the list and the watch (the TCP proxy in front of etcd is severed the
// moment the first Watch stream is opened). The mirror has listed, yet no
// watch exists: at no sample may it say Connected, through several failed
// creations, until the endpoint is back and a watch is created; a change
// then reaches it.
func TestNotConnectedBeforeTheWatchIsCreated(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	direct, proxy := exampleBehindProxy(t)
	var once sync.Once
	cut := make(chan struct{})
	severOnWatch := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
		method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == "/etcdserverpb.Watch/Watch" {
			once.Do(func() { proxy.Sever(); close(cut) })
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.URL()}, DialTimeout: time.Second,
		DialOptions: []grpc.DialOption{severOnWatch}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() }) // after the mirror stops
	o := startObserved(t, "cut-after-list", cli, watch.Config{})
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("the mirror opened no watch after its list")
	}
	failures := func() float64 { return counterSum(t, o.reg, "regiond_watch_create_failures_total") }
	watchStatus(t, o.m, "two failed watch creations", 15*time.Second,
		func(watch.Status) bool { return failures() >= 2 },
		func(s watch.Status) error {
			if !s.Synced {
				return fmt.Errorf("not synced: the list was before the cut")
			}
			if s.Connected {
				return fmt.Errorf("Connected with no watch created (%v failed creations so far)", failures())
			}
			return nil
		})
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	watchStatus(t, o.m, "Connected once the endpoint is back", 15*time.Second,
		func(s watch.Status) bool { return s.Connected }, func(watch.Status) error { return nil })
	rev := put(t, direct, "routes/DE", newDE)
	waitUntil(t, o.m, "the change after the reconnect", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	if n := counterSum(t, o.reg, "regiond_watch_resyncs_total"); n != 1 {
		t.Fatalf("%v relists, want only the initial one: failed creations are retried, not relisted", n)
	}
}

// TestMetricsLint: the mirror's metrics pass Prometheus' linter, and the
// liveness metrics exist from the start with every label value.
func TestMetricsLint(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	o := startObserved(t, "lint", cli, watch.Config{})
	if problems, err := testutil.GatherAndLint(o.reg); err != nil || len(problems) > 0 {
		t.Fatalf("metrics lint: %v %v", problems, err)
	}
	for name, labels := range map[string]int{
		"regiond_watch_resyncs_total":         9,
		"regiond_watch_reopens_total":         6,
		"regiond_watch_create_failures_total": 5,
		"regiond_watch_silence_probes_total":  5,
	} {
		if n, err := testutil.GatherAndCount(o.reg, name); err != nil || n != labels {
			t.Errorf("%s has %d label values (%v), want %d", name, n, err, labels)
		}
	}
}

// exampleBehindProxy starts an embedded etcd holding the example fleet and
// a TCP proxy in front of it (closed when the test ends); it returns a
// client that reaches etcd directly, and the proxy the mirror's client is
// to dial (and the test to sever).
func exampleBehindProxy(t *testing.T) (*clientv3.Client, *tcpproxy.Proxy) {
	t.Helper()
	srv := devetcd.NewTest(t)
	direct := devetcd.NewTestClient(t, srv)
	loadExample(t, direct)
	proxy, err := tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return direct, proxy
}
