package agent

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestStatusHintNamesThePrefix: the hint for a refused status put names
// the command that makes the agent's role for this deployment: with
// --prefix when the root is not the default (the RBAC review: it named
// the default root's, which made a role of another deployment), with the
// --role-prefix the agent's user shows (the operations review: a user
// up-agent-n1 was told the default's command, which makes another role),
// or the user named when its name shows none.
func TestStatusHintNamesThePrefix(t *testing.T) {
	for _, tc := range []struct{ key, user, want string }{
		{"/regiond/v1/agents/n1", "regiond-agent-n1", "(regionctl auth apply --agent n1 makes role regiond-agent-n1"},
		{"/a/agents/n1", "regiond-agent-n1", "(regionctl --prefix /a auth apply --agent n1 makes role regiond-agent-n1"},
		{"/regiond/v1/agents/n1", "up-agent-n1", "(regionctl auth apply --role-prefix up- --agent n1 makes role"},
		{"/regiond/v1/agents/n1", "u", "(regionctl auth apply --agent n1=u makes role"},
		{"/regiond/v1/agents/n1", "agent-n1", "(regionctl auth apply --agent n1=agent-n1 makes role"},
		{"/regiond/v1/agents/n1", "bad agent-n1", "(regionctl auth apply --agent 'n1=bad agent-n1' makes role"},
	} {
		p := &publisher{key: tc.key, node: "n1", user: tc.user}
		if h := p.hint(rpctypes.ErrPermissionDenied); !strings.Contains(h, tc.want) || !strings.Contains(h, "revoked") {
			t.Errorf("hint for %s as %s: %q, want %q… and a revoked role named", tc.key, tc.user, h, tc.want)
		}
	}
}

// TestLeaseLostAgainNamesStatusEndpoints: a status key's lease lost again
// and again through the watch's --endpoints is named with the way out
// behind an etcd grpc-proxy (--status-endpoints: the herd review's
// agents lost theirs every ~7 s through a proxy under writes, none
// through the members); with --status-endpoints given, it is not.
func TestLeaseLostAgainNamesStatusEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name      string
		endpoints []string
	}{{"through --endpoints", nil}, {"through --status-endpoints", []string{"http://127.0.0.1:2379"}}} {
		t.Run(tc.name, func(t *testing.T) {
			p := &publisher{node: "n1", ttl: 10 * time.Second, log: slog.New(slog.DiscardHandler), statusEndpoints: tc.endpoints}
			for i := 1; i <= leaseLossesForHint; i++ {
				p.leaseLost()
				hinted := strings.Contains(*p.lastErr.Load(), "give --status-endpoints the members' client URLs")
				if want := i == leaseLossesForHint && tc.endpoints == nil; hinted != want {
					t.Fatalf("lease lost %d time(s) %s: status_error %q; want the hint %v", i, tc.name, *p.lastErr.Load(), want)
				}
			}
		})
	}
}

// TestStatusHintWithoutAUser: a refusal to an agent with no etcd user
// (neither --user nor a certificate's CN) says so, and how to set one,
// rather than naming an empty user. (Mutation review: dropping it passed
// the suite.)
func TestStatusHintWithoutAUser(t *testing.T) {
	p := &publisher{key: "/regiond/v1/agents/n1", node: "n1"}
	if h := p.hint(rpctypes.ErrPermissionDenied); !strings.Contains(h, "etcd user (no user: set --user, or --cert with a certificate whose CN is an etcd user) may not write") {
		t.Fatalf("hint for a refusal without a user: %q", h)
	}
}
