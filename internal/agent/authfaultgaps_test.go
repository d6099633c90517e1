package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/api"
)

// TestPasswordChangedUnderAWatchingAgentIsALoginRefused proves a gap
// (review "authfault", found by faultsuite's TestAuthFaultsReconverge):
// the agent's etcd password is changed under a running agent (a rotation
// whose new password did not reach the node). etcd keeps the agent's
// established watch going (it checks a watch's token at its creation
// only), so the agent stays connected and follows; but every unary call
// (the status key's grant and put) now logs in again with the old
// password and is refused. /v1/status then says only
// status_error "put …: etcdserver: authentication failed, invalid user ID
// or password" (no user, no hint), etcd_error stays empty and
// regiond_agent_etcd_login_refused stays 0, so RegiondEtcdLoginRefused is
// quiet; the status key keeps its lease (renewed over the keep-alive
// stream, also unchecked) but no longer its revision, so regionctl status
// reports the agent behind while it follows. Only when the watch's
// connection breaks does the agent stop following and the gauge turn 1.
// The PITFALLS want a refused login surfaced in status and metrics: now
// the publisher's refused login sets the gauge, and status_error names
// the user and $REGIOND_PASSWORD.
func TestPasswordChangedUnderAWatchingAgentIsALoginRefused(t *testing.T) {
	t.Parallel()
	srv, a, root := authedExample(t)
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, "node-pw")
	cfg.Username, cfg.Password = a.User, a.Password
	cfg.StatusTTL = 2 * time.Second
	h := runAgent(t, dir, cfg)
	var st api.Status
	status := func() api.Status { st = api.Status{}; h.get("/v1/status", &st); return st }
	waitFor(t, "connected", func() bool { st := status(); return st.Connected && st.EtcdError == "" && st.StatusError == "" })

	ctx := context.Background()
	if _, err := root.UserChangePassword(ctx, a.User, "rotated-elsewhere"); err != nil {
		t.Fatal(err)
	}
	// A change, so that the agent puts its status key (a unary call that
	// must log in again).
	put, err := root.Put(ctx, "/regiond/v1/routing/epoch", "99")
	if err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 10*time.Second, "status_error after the password change", func() bool {
		return status().StatusError != ""
	})
	time.Sleep(2 * time.Second) // a lease TTL: the status key is gone by now
	st = status()
	t.Logf("/v1/status: connected=%v revision=%d (change at %d) etcd_error=%q status_error=%q",
		st.Connected, st.Revision, put.Header.Revision, st.EtcdError, st.StatusError)
	if resp, err := root.Get(ctx, "/regiond/v1/agents/node-pw"); err == nil {
		t.Logf("status key in etcd: %d key(s) (its lease not renewed since the change)", len(resp.Kvs))
	}
	if g := gauge(t, h, "regiond_agent_etcd_login_refused"); g != 1 {
		t.Errorf("regiond_agent_etcd_login_refused = %v while etcd refuses the agent's login, want 1", g)
	}
	if !strings.Contains(st.StatusError, "etcd refuses the login of user "+a.User+": its password in etcd is not this agent's $REGIOND_PASSWORD") {
		t.Errorf("/v1/status names no user for the refused login: etcd_error %q, status_error %q", st.EtcdError, st.StatusError)
	}
	// The password back (the rotation undone): the next put passes, and
	// the gauge is 0 again.
	if _, err := root.UserChangePassword(ctx, a.User, a.Password); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 15*time.Second, "the gauge back to 0 with the password back", func() bool {
		return gauge(t, h, "regiond_agent_etcd_login_refused") == 0 && status().StatusError == ""
	})
}
