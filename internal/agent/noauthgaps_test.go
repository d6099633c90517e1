package agent

import (
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestStatusHintForUserEmpty proves that the hint of a refused status
// lease or put reaches an agent without credentials: etcd refuses a
// request that carries no user with "user name is empty" (ErrUserEmpty),
// not "permission denied", so the publisher's own no-user hint ("set
// --user, or --cert …") must cover that error too. (The auth review: an
// agent left without credentials at `auth enable` showed only
// "no lease for the status key: etcdserver: user name is empty".)
func TestStatusHintForUserEmpty(t *testing.T) {
	p := &publisher{key: "/regiond/v1/agents/n1", node: "n1"}
	if h := p.hint(rpctypes.ErrUserEmpty); !strings.Contains(h, "give --user with $REGIOND_PASSWORD, or --cert and --key") {
		t.Fatalf("hint for %q to an agent without a user: %q, want how to give it credentials", rpctypes.ErrUserEmpty, h)
	}
}

// TestStatusHintForACertificateEtcdDidNotTake: a refusal for no user
// while the agent presents a certificate (its common name is p.user)
// means etcd did not take the certificate (a grpc-proxy between them, or
// etcd without --client-cert-auth): the hint says so, and does not blame
// the role of a user etcd never saw. A permission refusal to that user
// still names its role.
func TestStatusHintForACertificateEtcdDidNotTake(t *testing.T) {
	p := &publisher{key: "/regiond/v1/agents/n1", node: "n1", user: "regiond-agent-n1", userFromCert: true}
	if h := p.hint(rpctypes.ErrUserEmpty); !strings.Contains(h, "etcd saw no user (user name is empty) although this agent presents a certificate whose common name is regiond-agent-n1: etcd's grpc-proxy is between them") ||
		strings.Contains(h, "its role must be made") {
		t.Fatalf("hint for %q to an agent with a certificate: %q", rpctypes.ErrUserEmpty, h)
	}
	if h := p.hint(rpctypes.ErrPermissionDenied); !strings.Contains(h, "etcd user regiond-agent-n1 may not write /regiond/v1/agents/n1: its role must be made for this --node") {
		t.Fatalf("hint for %q: %q", rpctypes.ErrPermissionDenied, h)
	}
	// A password login's user (no certificate) is not told of one (the
	// second read).
	p = &publisher{key: "/regiond/v1/agents/n1", node: "n1", user: "alice"}
	if h := p.hint(rpctypes.ErrUserEmpty); !strings.Contains(h, "although this agent logs in as alice: the request carried no login token") || strings.Contains(h, "certificate") {
		t.Fatalf("hint for %q to a password login: %q", rpctypes.ErrUserEmpty, h)
	}
}

// TestStatusHintForAnotherNodesUser: an agent run as another node's user
// (--node node1, a typo, with node-1's certificate) is asked whether
// --node is right, before the role's way out: giving node-1's user
// node1's role too would be refused by auth apply (one job per user).
func TestStatusHintForAnotherNodesUser(t *testing.T) {
	p := &publisher{key: "/regiond/v1/agents/node1", node: "node1", user: "regiond-agent-node-1", userFromCert: true}
	h := p.hint(rpctypes.ErrPermissionDenied)
	if !strings.HasPrefix(h, "user regiond-agent-node-1 is named for the agent of node node-1, not of --node node1: is --node right?") ||
		!strings.Contains(h, "is the common name of this agent's certificate") {
		t.Fatalf("hint for another node's user: %q", h)
	}
	p = &publisher{key: "/regiond/v1/agents/node-1", node: "node-1", user: "regiond-agent-node-1"}
	if h := p.hint(rpctypes.ErrPermissionDenied); strings.Contains(h, "is --node right? Run") || strings.Contains(h, "common name") {
		t.Fatalf("hint for the node's own user, logged in: %q", h)
	}
}
