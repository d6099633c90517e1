package agent_test

import (
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
)

// TestUserGoneUnderARunningAgentIsALoginRefused: the agent's etcd user
// disappears under a running agent (etcd restored from a backup older
// than the user, or the user deleted), and its connection is made again
// (the members restarted). Its lists are then refused at the login:
// /v1/status says so in etcd_error, naming the user, and
// regiond_agent_etcd_login_refused is 1, as for a login refused at start
// (the operations review: only status_error said "no lease", and the
// login alert stayed quiet), while the last good table serves on. With
// the user back, the agent follows etcd again and the gauge is 0.
func TestUserGoneUnderARunningAgentIsALoginRefused(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, a, root := authedExample(t)
	px := proxyTo(t, srv)
	dir := t.TempDir()
	cfg := tcpConfig(dir, []string{px.URL()}, "node-gone")
	cfg.Username, cfg.Password = a.User, a.Password
	h := runAgent(t, dir, cfg)
	var st api.Status
	status := func() api.Status { st = api.Status{}; h.get("/v1/status", &st); return st }
	waitFor(t, "connected", func() bool { st := status(); return st.Connected && st.EtcdError == "" })

	ctx := context.Background()
	if _, err := root.UserDelete(ctx, a.User); err != nil {
		t.Fatal(err)
	}
	px.Sever()
	if err := px.Restore(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "etcd_error naming the refused login", func() bool {
		st := status()
		return strings.Contains(st.EtcdError, "login") && strings.Contains(st.EtcdError, a.User)
	})
	if g := gauge(t, h, "regiond_agent_etcd_login_refused"); g != 1 {
		t.Fatalf("regiond_agent_etcd_login_refused = %v while the user is gone, want 1 (etcd_error %q)", g, st.EtcdError)
	}
	// The total counts the watch's refused logins too, each retry (the
	// auth restore walk: 0 while the gauge said refused).
	waitFor(t, "the watch's second refused login", func() bool { return h.a.Mirror().Status().LoginRefusals >= 2 })
	if c, m := counter(t, h, "regiond_agent_etcd_login_refusals_total"), h.a.Mirror().Status().LoginRefusals; c < float64(m) {
		t.Fatalf("regiond_agent_etcd_login_refusals_total = %v while the user is gone, want at least the watch's %d", c, m)
	}
	if c, d := h.resolve("PL", "k"); c != 200 || d.Pool == "" {
		t.Fatalf("resolve while the login is refused: %d %+v, want the last good table", c, d)
	}

	if _, err := root.UserAdd(ctx, a.User, a.Password); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctx, a.User, a.User+"-rw"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "connected again with the user back", func() bool { st := status(); return st.Connected && st.EtcdError == "" })
	// The status key's refused login (its put or lease, while the user
	// was gone) ends with its next put, at most a retry after the watch's.
	waitFor(t, "regiond_agent_etcd_login_refused 0 with the user back", func() bool { return gauge(t, h, "regiond_agent_etcd_login_refused") == 0 })
}

// authedExample is exampleEtcd with authentication on (the test user's
// readwrite on /regiond/v1/) and a client of root, closed at the end.
func authedExample(t *testing.T) (*devetcd.Server, devetcd.Auth, *clientv3.Client) {
	t.Helper()
	srv, _ := exampleEtcd(t)
	a := devetcd.EnableTestAuth(t, srv, "/regiond/v1/")
	root, err := srv.ClientAs("root", devetcd.TestRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return srv, a, root
}
