package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/logbuf"
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
// agents/) and revokes it on shutdown.
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
	port, err := freeport.Get()
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

// TestRefusedLoginServesSnapshotAndRetries: an agent restarted with a
// password etcd refuses keeps serving its snapshot (marked stale), names
// the refusal in /v1/status, in its metrics and in an error log with the
// user and the endpoints, and retries: once the user's password in etcd is
// changed to the one the agent has, it syncs, without a restart.
func TestRefusedLoginServesSnapshotAndRetries(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	sec := devetcd.NewTestSecure(t, "/regiond/v1/")
	srv, certs, a := sec.Server, sec.Certs, sec.Auth
	loadExample(t, sec.Client)
	dir := t.TempDir()
	cfg := tlsAgentConfig(t, dir, srv, certs)
	cfg.Username, cfg.Password = a.User, a.Password
	h := runAgent(t, dir, cfg)
	waitFor(t, "first sync and snapshot", func() bool { c, _ := h.resolve("PL", "k"); return c == 200 && h.snapshot() != nil })
	h.stop()

	var logs logbuf.Buffer
	refused := cfg
	refused.Password = "rotated-secret"
	refused.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	h2 := runAgent(t, dir, refused)
	var st api.Status
	waitFor(t, "the refusal in /v1/status", func() bool { h2.get("/v1/status", &st); return st.EtcdError != "" })
	if !strings.Contains(st.EtcdError, "authentication failed") || !strings.Contains(st.EtcdError, a.User) ||
		!strings.Contains(st.EtcdError, srv.Endpoints[0]) || !st.Stale || st.Connected {
		t.Fatalf("status with the login refused: %+v, want etcd_error naming the user, the endpoint and the refusal; stale; not connected", st)
	}
	if c, d := h2.resolve("PL", "k"); c != 200 || !contains(d.Degraded, "stale-table") {
		t.Fatalf("resolve with the login refused: %d %+v, want the snapshot's decision marked stale-table", c, d)
	}
	if g := gauge(t, h2, "regiond_agent_etcd_login_refused"); g != 1 {
		t.Fatalf("regiond_agent_etcd_login_refused = %v, want 1", g)
	}
	if n := counter(t, h2, "regiond_agent_etcd_login_refusals_total"); n < 1 {
		t.Fatalf("regiond_agent_etcd_login_refusals_total = %v, want >= 1", n)
	}
	if l := logs.String(); !strings.Contains(l, `"level":"ERROR"`) || !strings.Contains(l, `"user":"`+a.User+`"`) ||
		!strings.Contains(l, srv.Endpoints[0]) {
		t.Fatalf("no error log naming the user and the endpoints:\n%s", l)
	}

	root, err := srv.ClientAs("root", a.RootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.UserChangePassword(context.Background(), a.User, refused.Password); err != nil {
		t.Fatal(err)
	}
	p, err := root.Put(context.Background(), prefix+"routes/PL", `{"targets":[{"pool":"eu-north","weight":100}]}`)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "sync after the password change", func() bool {
		c, d := h2.resolve("PL", "k")
		return c == 200 && d.Pool == "eu-north" && d.Revision >= p.Header.Revision && !contains(d.Degraded, "stale-table")
	})
	st = api.Status{} // etcd_error is omitted when empty
	h2.get("/v1/status", &st)
	if st.EtcdError != "" || st.Stale || gauge(t, h2, "regiond_agent_etcd_login_refused") != 0 {
		t.Fatalf("status after the sync: %+v, login refused gauge %v; want no etcd_error, not stale, gauge 0", st,
			gauge(t, h2, "regiond_agent_etcd_login_refused"))
	}
}

// TestLoginOfANoPasswordUser: an agent given --user and a password for a
// user made without one (regionctl auth apply's users log in by their
// certificates) counts a refused login and says what to do, not "etcd
// unreachable" (etcd's error has code Unknown).
func TestLoginOfANoPasswordUser(t *testing.T) {
	sec := devetcd.NewTestSecure(t, "/regiond/v1/")
	srv, certs, a := sec.Server, sec.Certs, sec.Auth
	root, err := srv.ClientAs("root", a.RootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.UserAddWithOptions(context.Background(), "certonly", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := tlsAgentConfig(t, dir, srv, certs)
	cfg.Username, cfg.Password = "certonly", "x"
	h := runAgent(t, dir, cfg)
	var st api.Status
	waitFor(t, "the refusal in /v1/status", func() bool { h.get("/v1/status", &st); return st.EtcdError != "" })
	if !strings.Contains(st.EtcdError, "the user has no password in etcd, it logs in by its client certificate") ||
		!strings.Contains(st.EtcdError, "remove --user and $REGIOND_PASSWORD") ||
		!strings.Contains(st.EtcdError, "behind etcd's grpc-proxy, which passes no client certificate on, it needs a password: delete the user (etcdctl user delete certonly)") {
		t.Fatalf("etcd_error for a no-password user given a password: %q", st.EtcdError)
	}
	if g := gauge(t, h, "regiond_agent_etcd_login_refused"); g != 1 {
		t.Fatalf("regiond_agent_etcd_login_refused = %v, want 1", g)
	}
}

// TestEtcdUserOfACertificate: an agent that logs in by its client
// certificate (no --user) knows its etcd user, the certificate's CN, with
// its TLS config as etcd's transport makes it (the certificate handed out
// by GetClientCertificate, not in Certificates): the status page named it
// "without a user".
func TestEtcdUserOfACertificate(t *testing.T) {
	certs := devetcd.NewTestCerts(t)
	srv := devetcd.NewTestTLS(t, certs)
	dir := t.TempDir()
	a, err := agent.New(tlsAgentConfig(t, dir, srv, certs))
	if err != nil {
		t.Fatal(err)
	}
	if got := agent.EtcdUser(a); got != devetcd.TestClientCN {
		t.Fatalf("etcd user of an agent with a client certificate: %q, want its CN %q", got, devetcd.TestClientCN)
	}
}

// TestStatusRefusedNamesTheNode: an agent whose role was made for another
// node (its --node left to the host name) reads and serves, but etcd
// refuses its status key; /v1/status says so, naming the user, the key
// and --node, not only "permission denied".
func TestStatusRefusedNamesTheNode(t *testing.T) {
	sec := devetcd.NewTestSecure(t, "/regiond/v1/")
	srv, certs, a := sec.Server, sec.Certs, sec.Auth
	loadExample(t, sec.Client)
	root, err := srv.ClientAs("root", a.RootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx := context.Background()
	read, rw := clientv3.PermissionType(clientv3.PermRead), clientv3.PermissionType(clientv3.PermReadWrite)
	for i, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "agent-right"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "agent-right", prefix, clientv3.GetPrefixRangeEnd(prefix), read)
			return err
		},
		func() error {
			_, err := root.RoleGrantPermission(ctx, "agent-right", "/regiond/v1/agents/node-right", "", rw)
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "agentx", "agentx-secret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "agentx", "agent-right"); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	dir := t.TempDir()
	cfg := tlsAgentConfig(t, dir, srv, certs)
	cfg.Username, cfg.Password, cfg.Node = "agentx", "agentx-secret", "node-wrong"
	h := runAgent(t, dir, cfg)
	waitFor(t, "first table", func() bool { c, _ := h.resolve("PL", "k"); return c == 200 })
	var st api.Status
	waitFor(t, "status_error", func() bool { h.get("/v1/status", &st); return st.StatusError != "" })
	for _, want := range []string{"permission denied", "etcd user agentx may not write /regiond/v1/agents/node-wrong", "this --node, node-wrong", "is --node right?"} {
		if !strings.Contains(st.StatusError, want) {
			t.Fatalf("status_error %q; want %q in it", st.StatusError, want)
		}
	}
}

// TestCertificateUserRefusedIsNamedAsTheCertificates: an agent with a
// client certificate and no --user, whose CN is no etcd user, is refused
// the prefix; etcd_error names the user as the certificate's CN and what
// to check (that it is an etcd user with the role; a grpc-proxy between
// them). (The second read: the agent's wiring of a certificate's user
// into the mirror was untested.)
func TestCertificateUserRefusedIsNamedAsTheCertificates(t *testing.T) {
	t.Parallel()
	sec := devetcd.NewTestSecure(t, "/regiond/v1/")
	dir := t.TempDir()
	h := runAgent(t, dir, tlsAgentConfig(t, dir, sec.Server, sec.Certs))
	var st api.Status
	waitFor(t, "the refusal in /v1/status", func() bool { st = api.Status{}; h.get("/v1/status", &st); return st.EtcdError != "" })
	cn := devetcd.TestClientCN
	if !strings.Contains(st.EtcdError, "(permission denied) to etcd user "+cn+" (the common name of this client's certificate): check that "+cn+" is an etcd user") ||
		!strings.Contains(st.EtcdError, "if --endpoints is etcd's grpc-proxy, which passes no client certificate on, etcd saw no user at all") {
		t.Fatalf("etcd_error for a certificate's CN that is no etcd user: %q", st.EtcdError)
	}
}
