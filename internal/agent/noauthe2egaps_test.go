package agent_test

import (
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
)

// TestNoCredentialsIsNotUnreachable proves that an agent started without
// credentials against an etcd with authentication on is told so, not
// that etcd is unreachable: etcd answers at once ("user name is empty"),
// so etcd_error must not say "etcd unreachable" nor "no answer within
// --dial-timeout". (The auth review: it said exactly that, sending the
// operator to the network instead of to the agent's credentials.)
func TestNoCredentialsIsNotUnreachable(t *testing.T) {
	t.Parallel()
	srv, _ := exampleEtcd(t)
	devetcd.EnableTestAuth(t, srv, "/regiond/v1/")
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, "node-nocreds")
	cfg.DialTimeout = 500 * time.Millisecond
	h := runAgent(t, dir, cfg)
	var st api.Status
	waitWithin(t, 10*time.Second, "etcd_error set", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return st.EtcdError != ""
	})
	if strings.Contains(st.EtcdError, "unreachable") || strings.Contains(st.EtcdError, "no answer within") ||
		!strings.Contains(st.EtcdError, "(user name is empty) to a client with no etcd user: etcd's authentication is on; give --user with $REGIOND_PASSWORD, or --cert and --key") {
		t.Fatalf("etcd_error for an agent without credentials: %q; want it named as missing credentials, not an unreachable etcd", st.EtcdError)
	}
}
