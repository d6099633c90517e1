package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// TestHeartbeatWithOriginRole: with authentication on, an origin's role
// reads no pool, so the heartbeat skips the pool check without a word and
// runs; a pool id typo is refused by permission, and the refusal asks
// whether POOL is the pool's id (the role covers one pool's health keys).
func TestHeartbeatWithOriginRole(t *testing.T) {
	t.Parallel()
	e := newRBACEnv(t, true)
	if r := e.as(rbacOperator, "apply", "-f", exampleConfig, "--reason", "seed"); r.code != ExitOK {
		t.Fatalf("operator apply: %s", r)
	}
	p := rbacPrefix
	r := e.as(rbacOrigin, "heartbeat", "eu-centrl", "--instance", "fra-1a", "--addr", "10.0.0.12:443")
	want := "needs readwrite on " + p + "/routing/health/eu-centrl/ (role regiond-origin-eu-centrl)"
	hint := "; is eu-centrl the pool's id? the role regiond-origin-eu-centrl covers only its own pool's health keys (regionctl get pools, as an operator or viewer, lists the ids)"
	if r.code != ExitRefused || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, hint) {
		t.Fatalf("origin heartbeat of a typo'd pool: %s; want exit 1 with %q and %q", r, want, hint)
	}

	key := e.ks.RoutingKey(routing.HealthKey("eu-central", "fra-1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var out, errb bytes.Buffer
	go func() {
		args := append(e.flags(rbacOrigin), "heartbeat", "eu-central", "--instance", "fra-1", "--addr", "10.0.0.1:443", "--ttl", "5s")
		done <- run(ctx, args, &out, &errb, func(string) string { return "" })
	}()
	present := func() bool {
		resp, err := e.root.Get(context.Background(), key)
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease != 0
	}
	if _, ok := waitFor(10*time.Second, present); !ok {
		cancel()
		<-done
		t.Fatalf("origin heartbeat wrote no health key:\n%s%s", out.String(), errb.String())
	}
	cancel()
	if code := <-done; code != ExitOK || errb.String() != "" {
		t.Fatalf("origin heartbeat: exit %d; want 0 and nothing on stderr (the pool check skipped silently):\n%s%s", code, out.String(), errb.String())
	}
}
