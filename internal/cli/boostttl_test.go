package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// TestBoostsShownWhenTheirLeasesCannotBeRead: a boost's lease that cannot
// be read (etcd's refusal, or the connection lost after the boosts were
// read) leaves the TTLs out with a warning, as get health does with its
// keys: get's table and boost ls still list the boosts (TTL "-",
// ttl_seconds null) and exit 0, where get failed whole (the get review).
func TestBoostsShownWhenTheirLeasesCannotBeRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "PL", "--target", "eu-central=100", "--ttl", "1h", "--id", "pl-1", "--reason", "test")
	fail := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.Lease/LeaseTimeToLive" {
			return rpctypes.ErrGRPCPermissionDenied
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	row := regexp.MustCompile(`(?m)^pl-1 +PL +eu-central 100 +- +- +20`)
	const warning = "regionctl: warning: the boosts' remaining lives are not shown: "
	for _, args := range [][]string{{"get", "boosts"}, {"boost", "ls"}} {
		r := e.runCtx(withInterceptor(fail), args...)
		if r.code != ExitOK || !strings.Contains(r.stderr, warning) || !row.MatchString(r.stdout) {
			t.Errorf("%s with the leases unread: %s; want exit 0, a warning, the boost with TTL \"-\"", strings.Join(args, " "), r)
		}
	}
	r := e.runCtx(withInterceptor(fail), "boost", "ls", "-o", "json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != ExitOK || err != nil || len(got) != 1 || got[0]["ttl_seconds"] != nil || !strings.Contains(r.stderr, warning) {
		t.Errorf("boost ls -o json with the leases unread: %s (%v); want the boost, ttl_seconds null and a warning", r, err)
	}
}

// TestBoostWithNoLifeLeftShowsEnded: a boost whose lease has no life left
// when it is read (it ended, or was revoked, between the boosts' read and
// their leases') shows TTL "ended", as get health shows such a key, not
// "0s" (the get review).
func TestBoostWithNoLifeLeftShowsEnded(t *testing.T) {
	boosts := map[string]store.LiveOverride{
		"pl-1": {Override: routing.Override{Route: "PL", Targets: []routing.Target{{Pool: "eu-central", Weight: 100}}}, Lease: 7},
		"pl-2": {Override: routing.Override{Route: "PL", Targets: []routing.Target{{Pool: "eu-central", Weight: 100}}}, Lease: 8},
	}
	var b strings.Builder
	printBoosts(&b, boosts, map[string]time.Duration{"pl-1": 0, "pl-2": 90 * time.Second})
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^pl-1\s+PL\s+eu-central 100\s+-\s+ended\s`),
		regexp.MustCompile(`(?m)^pl-2\s+PL\s+eu-central 100\s+-\s+1m30s\s`),
	} {
		if !want.MatchString(b.String()) {
			t.Errorf("boost table:\n%s\nwant a line matching %s", b.String(), want)
		}
	}
}
