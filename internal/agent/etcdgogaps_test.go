package agent_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
)

// TestReadRefusedAtStartIsNotALoginRefused guards awaitEtcd counting a
// read etcd refuses to the agent's user as etcd reached: an agent whose
// login succeeds but whose role cannot read the prefix (docs/agent.md:
// permission-denied, named in etcd_error) has regiond_agent_etcd_client 1
// and regiond_agent_etcd_login_refused 0, no refused login counted. The
// login alert must not send the on-call to the password when the fix is
// the role's permission.
func TestReadRefusedAtStartIsNotALoginRefused(t *testing.T) {
	e := devetcd.NewTestAuthBehindProxy(t, "/regiond/v1/")
	loadExample(t, e.Root)
	e.SetAccess(t, false)
	dir := t.TempDir()
	cfg := tcpConfig(dir, e.Server.Endpoints, "node-1")
	cfg.Username, cfg.Password = e.Auth.User, e.Auth.Password
	h := runAgent(t, dir, cfg)
	defer h.stop()
	waitWithin(t, 10*time.Second, "the probe's verdict", func() bool {
		return gauge(t, h, "regiond_agent_etcd_client") == 1 || gauge(t, h, "regiond_agent_etcd_login_refused") == 1
	})
	var st api.Status
	waitWithin(t, 10*time.Second, "etcd_error naming the refused read", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return strings.Contains(st.EtcdError, "permission denied")
	})
	if c, r, n := gauge(t, h, "regiond_agent_etcd_client"), gauge(t, h, "regiond_agent_etcd_login_refused"),
		counter(t, h, "regiond_agent_etcd_login_refusals_total"); c != 1 || r != 0 || n != 0 {
		t.Fatalf("read refused, login fine: etcd_client %v, etcd_login_refused %v, login_refusals_total %v; want 1, 0, 0 (etcd_error %q)",
			c, r, n, st.EtcdError)
	}
	if strings.Contains(st.EtcdError, "refused the login") {
		t.Fatalf("etcd_error %q blames the login for a refused read", st.EtcdError)
	}
}

// TestLoginRefusedThenUnreachableClearsTheGauge guards dialFailed clearing
// the start's refused login once etcd stops answering: the gauge
// regiond_agent_etcd_login_refused is "1 while refused" (docs/agent.md);
// with etcd then unreachable it is 0 and etcd_error says unreachable, so
// the login alert does not send the on-call to the password of an etcd
// that is down.
func TestLoginRefusedThenUnreachableClearsTheGauge(t *testing.T) {
	e := devetcd.NewTestAuthBehindProxy(t, "/regiond/v1/")
	dir := t.TempDir()
	cfg := tcpConfig(dir, []string{e.Proxy.URL()}, "node-1")
	cfg.Username, cfg.Password = e.Auth.User, "not-the-password"
	cfg.DialTimeout = time.Second
	h := runAgent(t, dir, cfg)
	defer h.stop()
	waitWithin(t, 10*time.Second, "the refused login", func() bool { return gauge(t, h, "regiond_agent_etcd_login_refused") == 1 })
	e.Proxy.Sever() // etcd unreachable: nothing listens on the endpoint
	var st api.Status
	waitWithin(t, 10*time.Second, "etcd_error saying unreachable", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return strings.HasPrefix(st.EtcdError, "etcd unreachable")
	})
	if g := gauge(t, h, "regiond_agent_etcd_login_refused"); g != 0 {
		t.Fatalf("regiond_agent_etcd_login_refused = %v with etcd unreachable (etcd_error %q), want 0", g, st.EtcdError)
	}
}

// TestStopDuringTheLoginSaysNothingUnreachable guards dialTo returning at
// once when the agent stops during a login: the stop's cancelled dial is
// no failure, so no "etcd unreachable" warning follows the stop in the
// log (and etcd's endpoints are not probed for it).
func TestStopDuringTheLoginSaysNothingUnreachable(t *testing.T) {
	e := devetcd.NewTestAuthBehindProxy(t, "/regiond/v1/")
	e.Proxy.Freeze() // the login's connection opens, and nothing answers it
	dir := t.TempDir()
	var logs logbuf.Buffer
	cfg := tcpConfig(dir, []string{e.Proxy.URL()}, "node-1")
	cfg.Username, cfg.Password = e.Auth.User, e.Auth.Password
	cfg.DialTimeout = 20 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h := runAgent(t, dir, cfg)
	time.Sleep(300 * time.Millisecond) // the login is under way
	h.stop()
	if l := logs.String(); strings.Contains(l, "etcd unreachable") {
		t.Fatalf("a stop during the login logged etcd unreachable:\n%s", l)
	}
}
