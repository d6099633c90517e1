package agent

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestStatusKeysRefusedLoginsReachTheRefusalsTotal proves that a refused
// login of the status key's puts (the publisher's setErr) is counted in
// regiond_agent_etcd_login_refusals_total, beside the first dial's: the
// publisher is wired to loginMetrics.statusRefusals (newPublisher) and
// the CounterFunc sums it. With a password changed under a watching agent
// (TestPasswordChangedUnderAWatchingAgentIsALoginRefused) the status key's
// refusals are the only ones, the mirror's watch still open; no test read
// the counter there, so dropping either the wiring or the sum passed.
func TestStatusKeysRefusedLoginsReachTheRefusalsTotal(t *testing.T) {
	a := &Agent{cfg: Config{Endpoints: []string{"http://127.0.0.1:1"}, Node: "n1", Username: "regiond-agent-n1", Password: "pw"},
		log: slog.Default()}
	a.login = newLoginMetrics(prometheus.NewRegistry(), a)
	p := newPublisher(nil, "/regiond/v1/agents/n1", "/regiond/v1/nodes/n1", a)
	p.setErr("put the status key", rpctypes.ErrAuthFailed)
	if got := testutil.ToFloat64(a.login.refusals); got != 1 {
		t.Fatalf("regiond_agent_etcd_login_refusals_total = %v after the status key's refused login, want 1", got)
	}
	p.setErr("put the status key", errors.New("context deadline exceeded")) // ends nothing, counts nothing
	a.login.dialRefusals.Add(1)
	if got := testutil.ToFloat64(a.login.refusals); got != 2 {
		t.Fatalf("regiond_agent_etcd_login_refusals_total = %v with one dial and one status refusal, want 2", got)
	}
}
