package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/etcddiag"
	"github.com/regiond/regiond/internal/tcpproxy"
)

// TestSilentPathIsNoticedAndFailedOver: the paths to both of the agent's
// endpoints go silent with their connections open (a dead switch, a
// firewall dropping packets: nothing is closed, nothing answers). The
// agent must notice by its own timeouts, as configured in production
// (gRPC keepalive: 10 s, then 5 s for the answer, found at the next 5 s
// progress tick; the watch's silence probe: 15 s, then 5 s for its read,
// 5 s for a new watch's creation): /v1/status says connected false while
// it serves its last table, why (each endpoint silent), and that its
// status key is not published (counted, for RegiondStatusNotPublished). Then one path comes back and the other stays
// silent: the agent follows etcd again through the live one, with the
// change made meanwhile, and says connected. A connection that was closed
// (Sever) is noticed at once; only this one needs the timeouts.
func TestSilentPathIsNoticedAndFailedOver(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, cli := exampleEtcd(t)
	var px [2]*tcpproxy.Proxy
	for i := range px {
		px[i] = proxyTo(t, srv)
	}
	dir := t.TempDir()
	cfg := tcpConfig(dir, []string{px[0].URL(), px[1].URL()}, "node-1")
	h := runAgent(t, dir, cfg)
	waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })
	_, before := h.resolve("DE", "k")

	px[0].Freeze()
	px[1].Freeze()
	began := time.Now()
	put, err := cli.Put(context.Background(), prefix+"routes/DE", `{"targets":[{"pool":"eu-north","weight":100}]}`)
	if err != nil {
		t.Fatal(err)
	}
	var st api.Status
	waitWithin(t, time.Minute, "connected false on silent paths", func() bool { st = api.Status{}; h.get("/v1/status", &st); return !st.Connected })
	t.Logf("connected false %v after the paths went silent", time.Since(began).Round(time.Millisecond))
	// It says why, and that its status key is not published (an on-call
	// review found both empty: the lease's grant waited without end).
	waitWithin(t, time.Minute, "etcd_error and status_error saying the paths are silent", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return strings.Contains(st.EtcdError, px[0].URL()+": "+etcddiag.Silent) && strings.Contains(st.EtcdError, px[1].URL()+": ") && st.StatusError != ""
	})
	if n := counter(t, h, "regiond_agent_status_put_failures_total"); n == 0 {
		t.Errorf("status_error %q but regiond_agent_status_put_failures_total is 0: RegiondStatusNotPublished would not fire", st.StatusError)
	}
	t.Logf("cut off: etcd_error %q; status_error %q", st.EtcdError, st.StatusError)
	if code, d := h.resolve("DE", "k"); code != 200 || d.Pool != before.Pool || d.Revision >= put.Header.Revision {
		t.Fatalf("DE with etcd out of reach: %d %+v; want the last table's %s", code, d, before.Pool)
	}

	px[1].Thaw() // px[0] stays silent until the test ends
	began = time.Now()
	waitWithin(t, time.Minute, "the change through the live path", func() bool {
		code, d := h.resolve("DE", "k")
		return code == 200 && d.Revision >= put.Header.Revision && d.Pool == "eu-north"
	})
	waitFor(t, "connected again", func() bool { st = api.Status{}; h.get("/v1/status", &st); return st.Connected })
	t.Logf("the change served and connected %v after one path came back", time.Since(began).Round(time.Millisecond))
}

// proxyTo returns a severable proxy (tcpproxy) to srv's first endpoint,
// closed when the test ends.
// exampleBehindProxy starts an embedded etcd holding the example fleet and
// a TCP proxy to it (to cut), and returns a client of etcd, the proxy, a
// directory for the agent and its config as node, dialing the proxy.
func exampleBehindProxy(t *testing.T, node string) (*clientv3.Client, *tcpproxy.Proxy, string, agent.Config) {
	t.Helper()
	srv, cli := exampleEtcd(t)
	px := proxyTo(t, srv)
	dir := t.TempDir()
	return cli, px, dir, tcpConfig(dir, []string{px.URL()}, node)
}

func proxyTo(t *testing.T, srv *devetcd.Server) *tcpproxy.Proxy {
	t.Helper()
	px, err := tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return px
}
