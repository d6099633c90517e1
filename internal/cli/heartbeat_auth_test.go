package cli

import (
	"strings"
	"testing"
)

// TestHeartbeatWithOriginRole: with authentication on, an origin's role
// reads no pool, so the heartbeat skips the pool check without a word and
// runs; a pool id typo is refused by permission, and the refusal asks
// whether POOL is the pool's id (the role covers one pool's health keys).
// An operator, who reads the pool and so knows it exists, is told it
// lacks the origin role instead (it used to be asked about the id too).
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

	r = e.as(rbacOperator, "heartbeat", "eu-central", "--instance", "fra-1a", "--addr", "10.0.0.12:443")
	want = "needs readwrite on " + p + "/routing/health/eu-central/ (role regiond-origin-eu-central)"
	lacks := "; pool eu-central exists, so its id is right: user op lacks the role regiond-origin-eu-central, which alone writes its health keys"
	if r.code != ExitRefused || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, lacks) || strings.Contains(r.stderr, "the pool's id?") {
		t.Fatalf("an operator's heartbeat of an existing pool: %s; want exit 1 with %q and %q, not asking about the id", r, want, lacks)
	}

	h := e.startOriginHeartbeat(t)
	if code := h.stop(); code != ExitOK || h.errb.String() != "" {
		t.Fatalf("origin heartbeat: exit %d; want 0 and nothing on stderr (the pool check skipped silently):\n%s%s", code, h.out.String(), h.errb.String())
	}
}
