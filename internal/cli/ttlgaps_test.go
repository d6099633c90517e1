package cli

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// TestGapBoostTTLColumnKinds guards the boost table's four TTL texts
// (docs/regionctl.md, boost ls): the duration for a lease with life left,
// "ended" for one with none, "no lease" for a key written without one,
// and, when the leases could not be read, "-" for every boost, the
// leaseless one too (not "no lease": its TTL is not known either way).
func TestGapBoostTTLColumnKinds(t *testing.T) {
	target := []routing.Target{{Pool: "eu-central", Weight: 100}}
	boosts := map[string]store.LiveOverride{
		"pl-1": {Override: routing.Override{Route: "PL", Targets: target}, Lease: 7},
		"pl-2": {Override: routing.Override{Route: "PL", Targets: target}, Lease: 8},
		"pl-3": {Override: routing.Override{Route: "PL", Targets: target}},
	}
	check := func(ttls map[string]time.Duration, want map[string]string) {
		t.Helper()
		var b strings.Builder
		printBoosts(&b, boosts, ttls)
		for id, ttl := range want {
			re := regexp.MustCompile(`(?m)^` + id + `\s+PL\s+eu-central 100\s+-\s+` + regexp.QuoteMeta(ttl) + `\s`)
			if !re.MatchString(b.String()) {
				t.Errorf("boost table (ttls %v):\n%s\nwant %s with TTL %q", ttls, b.String(), id, ttl)
			}
		}
	}
	check(map[string]time.Duration{"pl-1": 0, "pl-2": 90 * time.Second},
		map[string]string{"pl-1": "ended", "pl-2": "1m30s", "pl-3": "no lease"})
	check(nil, map[string]string{"pl-1": "-", "pl-2": "-", "pl-3": "-"})
}
