package agent

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/regiond/regiond/internal/devetcd"
)

// TestStatusSetErrCountsOnlyRefusedLogins proves that the publisher's
// setErr marks a refused login (regiond_agent_etcd_login_refused) only
// for etcd's "authentication failed", and counts each one: a
// status put refused for permission, or failing otherwise, is no
// refused login, and a put that passes ends the spell.
func TestStatusSetErrCountsOnlyRefusedLogins(t *testing.T) {
	c := new(atomic.Int64)
	p := &publisher{key: "/regiond/v1/agents/n1", node: "n1", user: "regiond-agent-n1", loginRefusals: c}
	p.setErr("put the status key", rpctypes.ErrPermissionDenied)
	p.setErr("no lease for the status key", errors.New("context deadline exceeded"))
	if p.loginRefused.Load() || c.Load() != 0 {
		t.Fatalf("a permission refusal or a timeout: login refused %v, refusals %v; want false, 0", p.loginRefused.Load(), c.Load())
	}
	p.setErr("no lease for the status key", rpctypes.ErrAuthFailed)
	p.setErr("no lease for the status key", rpctypes.ErrAuthFailed)
	if !p.loginRefused.Load() || c.Load() != 2 {
		t.Fatalf("two refused logins: login refused %v, refusals %v; want true, 2 (each counted, as the dial and the mirror count)", p.loginRefused.Load(), c.Load())
	}
}

// TestPublisherKnowsACertificatesUser proves newPublisher's wiring of
// userFromCert: set when the agent's user is its certificate's common
// name (no --user), so a refusal names what keeps etcd from taking it;
// unset for a login with --user, even with a certificate.
func TestPublisherKnowsACertificatesUser(t *testing.T) {
	certs := devetcd.NewTestCerts(t)
	tc, err := certs.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		username string
		user     string
		fromCert bool
	}{
		{"", devetcd.TestClientCN, true},
		{"alice", "alice", false},
	} {
		a := &Agent{cfg: Config{Endpoints: []string{"https://127.0.0.1:1"}, Node: "n1", TLS: tc, Username: c.username, Password: "pw"},
			log: slog.Default()}
		p := newPublisher(nil, "/regiond/v1/agents/n1", "/regiond/v1/nodes/n1", a)
		if p.user != c.user || p.userFromCert != c.fromCert {
			t.Errorf("--user %q: publisher user %q, userFromCert %v; want %q, %v", c.username, p.user, p.userFromCert, c.user, c.fromCert)
		}
	}
}
