package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/routing"
)

// tlsAgentConfig is the config of an agent in dir that dials srv with the
// client certificate of certs, as cmd/regiond builds it from its flags.
func tlsAgentConfig(t *testing.T, dir string, srv *devetcd.Server, certs *devetcd.TestCerts) agent.Config {
	t.Helper()
	tc, err := transport.TLSInfo{TrustedCAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.DefaultConfig()
	cfg.Endpoints = srv.Endpoints
	cfg.TLS = tc
	cfg.Node = "node-tls"
	cfg.Socket = filepath.Join(dir, "run", "regiond.sock")
	cfg.Listen = "127.0.0.1:0"
	cfg.Snapshot = filepath.Join(dir, "shm", "table.json")
	cfg.DialTimeout = 2 * time.Second
	cfg.StatusTTL = 2 * time.Second
	cfg.Logger = quietLogger()
	return cfg
}

// runAgent runs an agent of cfg until the test ends; each setup is
// applied to it before it runs.
func runAgent(t *testing.T, dir string, cfg agent.Config, setup ...func(*agent.Agent)) *harness {
	t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, dir: dir, a: a, cancel: cancel, done: make(chan error, 1), http: &http.Client{Timeout: 5 * time.Second}}
	h.unixHTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", cfg.Socket)
		}}}
	go func() { h.done <- a.Run(ctx) }()
	t.Cleanup(h.stop)
	return h
}

// TestTLSAndAuth: an agent dialing with TLS, a client certificate and a
// user whose role has readwrite on /regiond/v1/ syncs, serves /v1/resolve,
// follows changes, publishes its status key (a lease-bound put under
// agents/) and revokes it on shutdown. A wrong password makes Run fail at
// once, without retries.
func TestTLSAndAuth(t *testing.T) {
	sec := devetcd.NewTestSecure(t, "/regiond/v1/")
	srv, certs, a, cli := sec.Server, sec.Certs, sec.Auth, sec.Client
	rev := loadExample(t, cli)

	dir := t.TempDir()
	cfg := tlsAgentConfig(t, dir, srv, certs)
	cfg.Username, cfg.Password = a.User, a.Password
	h := runAgent(t, dir, cfg)
	waitFor(t, "first table over TLS with auth", func() bool {
		c, d := h.resolve("PL", "k")
		return c == 200 && d.Revision >= rev && strings.HasPrefix(d.Pool, "eu-")
	})
	p, err := cli.Put(context.Background(), prefix+"routes/PL", `{"targets":[{"pool":"eu-north","weight":100}]}`)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "change over TLS with auth", func() bool {
		c, d := h.resolve("PL", "k")
		return c == 200 && d.Pool == "eu-north" && d.Revision >= p.Header.Revision
	})
	key := "/regiond/v1/agents/node-tls"
	var st routing.AgentStatus
	waitFor(t, "agent status key under auth", func() bool {
		resp, err := cli.Get(context.Background(), key)
		if err != nil || len(resp.Kvs) != 1 {
			return false
		}
		json.Unmarshal(resp.Kvs[0].Value, &st)
		return st.Revision >= p.Header.Revision && st.Connected && resp.Kvs[0].Lease != 0
	})
	h.stop()
	resp, err := cli.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatal("agent status key still present after a clean shutdown (lease revoke refused under auth?)")
	}

	bad := tlsAgentConfig(t, t.TempDir(), srv, certs)
	bad.Username, bad.Password = a.User, "wrong"
	start := time.Now()
	ba, err := agent.New(bad)
	if err != nil {
		t.Fatalf("agent.New does not contact etcd, yet failed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ba.Run(ctx); err == nil || !strings.Contains(err.Error(), "authentication failed") || ctx.Err() != nil {
		t.Fatalf("Run with a wrong password: %v after %s, want an authentication error, not retries", err, time.Since(start))
	}
}

// TestStartsWithAuthWhileEtcdIsDown: an agent with --user restarted while
// etcd is down serves its snapshot (stale) instead of exiting, and syncs
// once etcd is back.
func TestStartsWithAuthWhileEtcdIsDown(t *testing.T) {
	sec := devetcd.NewTestSecure(t, "/regiond/v1/")
	srv, certs, a, cli := sec.Server, sec.Certs, sec.Auth, sec.Client
	loadExample(t, cli)
	dir := t.TempDir()
	cfg := tlsAgentConfig(t, dir, srv, certs)
	cfg.Username, cfg.Password = a.User, a.Password
	h := runAgent(t, dir, cfg)
	waitFor(t, "first sync", func() bool { c, _ := h.resolve("PL", "k"); return c == 200 && h.snapshot() != nil })
	h.stop()

	// etcd is unreachable: point the agent at a dead port.
	down := cfg
	port, err := devetcd.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down.Endpoints = []string{fmt.Sprintf("https://127.0.0.1:%d", port)}
	h2 := runAgent(t, dir, down)
	c, d := h2.resolve("PL", "k")
	if c != 200 || !contains(d.Degraded, "stale-table") {
		t.Fatalf("with etcd down and --user: %d %+v, want the snapshot's decision marked stale", c, d)
	}
}
