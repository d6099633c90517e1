package watch_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/tcpproxy"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// cutOffMirror: the example fleet in an embedded etcd, a mirror reaching
// it through a proxy the test can sever, and a direct client.
func cutOffMirror(t *testing.T, cfg watch.Config) (*watch.Mirror, *tcpproxy.Proxy, *clientv3.Client) {
	t.Helper()
	direct, proxy := exampleBehindProxy(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.URL()}, DialTimeout: time.Second,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return startMirror(t, cli, cfg), proxy, direct
}

// TestLongCatchUpAfterCutOff: while the mirror is cut off (no
// compaction): more than 1,000 revisions of changes in the prefix (etcd
// then replays them in several responses), large values (a replay of more
// than the agent's 4 MiB flow-control window in one response), a lease
// that expires (its health keys deleted in one revision), and a pool
// deleted and created again. Once back, the table is etcd's state.
func TestLongCatchUpAfterCutOff(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	m, proxy, direct := cutOffMirror(t, watch.Config{})
	ctx := context.Background()
	put(t, direct, "pools/kr-music", `{"host":"edge-icn-1.example.net:443","residency":"apac","status":"active","health_check":true}`)
	lease, err := direct.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Put(ctx, prefix+"health/kr-music/dying", `{}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	rev := put(t, direct, "pools/zz", `{"host":"zz0.example.net","residency":"eu","status":"active"}`)
	waitUntil(t, m, "set-up", func(tb *routing.Table) bool { return tb.Revision() >= rev })

	proxy.Sever()
	big := strings.Repeat("x", 60<<10)
	for i := 0; i < 100; i++ { // ~6 MiB of health values
		put(t, direct, fmt.Sprintf("health/kr-music/i%03d", i), fmt.Sprintf(`{"addr":"10.0.0.%d:443","pad":%q}`, i, big))
	}
	for i := 0; i < 1100; i++ {
		put(t, direct, "pools/zz", fmt.Sprintf(`{"host":"zz%d.example.net","residency":"eu","status":"active"}`, i))
	}
	if _, err := direct.Delete(ctx, prefix+"pools/eu-general-2"); err != nil { // may not exist: harmless
		t.Fatal(err)
	}
	if _, err := direct.Delete(ctx, prefix+"pools/zz"); err != nil {
		t.Fatal(err)
	}
	put(t, direct, "pools/zz", `{"host":"reborn.example.net","residency":"eu","status":"active"}`)
	// The lease expires while the mirror is away.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := direct.Get(ctx, prefix+"health/kr-music/dying")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease did not expire")
		}
		time.Sleep(200 * time.Millisecond)
	}
	last := put(t, direct, "routes/_default", `{"targets":[{"pool":"eu-west","weight":100}],"affinity":"sticky"}`)
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	tb := waitUntil(t, m, "the catch-up", func(tb *routing.Table) bool { return tb.Revision() >= last })
	want := configLines(etcdState(t, direct))
	got := tableState(t, tb)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after the catch-up the table differs from etcd:\n got: %v\nwant: %v", got, want)
	}
	if p, _ := tb.Pool("kr-music"); p.Instances != 100 {
		t.Fatalf("kr-music instances %d, want 100 (the lease's key expired)", p.Instances)
	}
	if p, _ := tb.Pool("zz"); p.Host != "reborn.example.net" {
		t.Fatalf("pools/zz host %s, want the recreated one", p.Host)
	}
}
