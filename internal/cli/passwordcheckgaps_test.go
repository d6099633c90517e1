package cli

import (
	"fmt"
	"strings"
	"testing"
)

// TestNoPasswordCheckOfExactlyTheBound proves the bound's edge: auth
// apply --passwords naming exactly maxPasswordChecks (16, as
// docs/regionctl.md says) users that exist checks them all, with no note
// of users left unchecked ("0 of the 16 …" with >= for >), and names the
// last of them. TestNoPasswordCheckIsBounded tests one over the bound only.
func TestNoPasswordCheckOfExactlyTheBound(t *testing.T) {
	t.Parallel()
	if maxPasswordChecks != 16 {
		t.Fatalf("maxPasswordChecks = %d; docs/regionctl.md says the first 16 users are checked", maxPasswordChecks)
	}
	e := newRBACEnv(t, false)
	var agents []string
	for i := range maxPasswordChecks {
		agents = append(agents, "--agent", fmt.Sprintf("e%02d", i))
	}
	if r, _ := runEnv(nil, append(e.rootFlags(), append([]string{"auth", "apply"}, agents...)...)...); r.code != ExitOK {
		t.Fatalf("auth apply of %d agents: %s", maxPasswordChecks, r)
	}
	r, _ := runEnv(nil, append(e.rootFlags(), append([]string{"auth", "apply", "--passwords"}, agents...)...)...)
	if r.code != ExitOK || strings.Contains(r.stderr, "were not checked") ||
		!strings.Contains(r.stderr, fmt.Sprintf("regiond-agent-e%02d exist without a password", maxPasswordChecks-1)) {
		t.Fatalf("auth apply --passwords of %d users without one: %s; want all named, no note of unchecked users", maxPasswordChecks, r)
	}
}
