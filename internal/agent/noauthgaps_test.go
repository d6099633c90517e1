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
	if h := p.hint(rpctypes.ErrUserEmpty); !strings.Contains(h, "set --user, or --cert") {
		t.Fatalf("hint for %q to an agent without a user: %q, want how to give it credentials", rpctypes.ErrUserEmpty, h)
	}
}
