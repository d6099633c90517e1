package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/logbuf"
)

// TestStatusEndpointsBesideAProxy: with etcd's authentication on, etcd's
// grpc-proxy (v3.7.3) renews a client's lease with no login of its own,
// which etcd refuses ("user name is empty"): an agent logged in through
// the proxy loses its status key's lease at each TTL and puts it again
// under a new one (the proxy review: status keys and heartbeats churned
// every few seconds). With --status-endpoints naming the members, the
// agent follows etcd through the proxy and keeps one lease.
func TestStatusEndpointsBesideAProxy(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	c := etcdproc.Start(t, etcdproc.Config{Members: 1})
	direct := c.Client(t)
	loadExample(t, direct)
	ctx := context.Background()
	if err := devetcd.EnableAuth(ctx, direct, devetcd.Auth{RootPassword: "root-pw", User: "agent", Password: "agent-pw", Prefix: "/regiond/"}); err != nil {
		t.Fatal(err)
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Username: "root", Password: "root-pw", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	p := c.StartProxy(t, etcdproc.ProxyConfig{AuthOn: true})

	// leases runs an agent of node through the proxy for a while and
	// returns the leases its status key was seen under, and its log.
	leases := func(node string, statusEndpoints []string) (map[int64]bool, string) {
		t.Helper()
		var logs logbuf.Buffer
		dir := t.TempDir()
		cfg := tcpConfig(dir, []string{p.URL()}, node)
		cfg.StatusEndpoints, cfg.Username, cfg.Password, cfg.Logger = statusEndpoints, "agent", "agent-pw", slog.New(slog.NewTextHandler(&logs, nil))
		cfg.StatusTTL = 2 * time.Second
		h := runAgent(t, dir, cfg)
		defer h.stop()
		seen := map[int64]bool{}
		lease := func() int64 {
			resp, err := root.Get(ctx, "/regiond/v1/agents/"+node)
			if err != nil || len(resp.Kvs) == 0 {
				return 0
			}
			return resp.Kvs[0].Lease
		}
		waitWithin(t, 30*time.Second, "the status key of "+node, func() bool { return lease() != 0 })
		for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) { // 4 TTLs
			if l := lease(); l != 0 {
				seen[l] = true
			}
		}
		return seen, logs.String()
	}

	// The proxy alone: the etcd behaviour the flag is for.
	seen, logs := leases("behind", nil)
	if len(seen) < 2 || !strings.Contains(logs, "lease lost") {
		t.Fatalf("through the proxy alone: the status key under %d lease(s) in 4 TTLs; want its lease lost and new ones (etcd refuses the proxy's renewals)\n%s", len(seen), logs)
	}
	seen, logs = leases("beside", c.Endpoints())
	if len(seen) != 1 || strings.Contains(logs, "lease lost") {
		t.Fatalf("with --status-endpoints: the status key under %d lease(s) in 4 TTLs; want one\n%s", len(seen), logs)
	}
}

// TestStatusEndpointsThatDoNotAnswerAreNamed: a --status-endpoints where
// nothing listens said only "no lease for the status key: etcd did not
// answer within 5s" while the agent showed connected (the docs review):
// status_error names --status-endpoints and what each answered, and the
// mirror serves on.
func TestStatusEndpointsThatDoNotAnswerAreNamed(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv := devetcd.NewTest(t)
	loadExample(t, devetcd.NewTestClient(t, srv))
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	closed := fmt.Sprintf("http://127.0.0.1:%d", port)
	dir := t.TempDir()
	cfg := offlineConfig(dir)
	cfg.Endpoints, cfg.StatusEndpoints = srv.Endpoints, []string{closed}
	h := runAgent(t, dir, cfg)
	var st api.Status
	waitFor(t, "status_error naming --status-endpoints", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return st.StatusError != ""
	})
	for _, w := range []string{"no lease for the status key: --status-endpoints " + closed + ": etcd did not answer within 5s", closed + ": dial: ", "connection refused"} {
		if !strings.Contains(st.StatusError, w) {
			t.Errorf("status_error %q; want it to contain %q", st.StatusError, w)
		}
	}
	if !st.Connected {
		t.Errorf("/v1/status %+v: want the mirror connected to --endpoints", st)
	}
	if code, d := h.resolve("PL", "k"); code != 200 || d.Pool == "" {
		t.Errorf("resolve with the status endpoints down: %d %+v; want a decision", code, d)
	}
}
