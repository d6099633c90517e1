package php_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// everyCountryPair returns the (header, key) pairs of every ISO code, as is
// and in lower case, with and without a key, and of the garbage headers.
func everyCountryPair(r *rand.Rand) []pair {
	var ps []pair
	for _, cc := range routing.Countries() {
		ps = append(ps, pair{cc, randomKey(r)}, pair{strings.ToLower(cc), randomKey(r)}, pair{cc, ""})
	}
	for _, g := range garbage {
		ps = append(ps, pair{g, randomKey(r)}, pair{g, ""})
	}
	return ps
}

// TestDecidersAgreeOnRandomPolicies: the three deciders (Go's
// Table.Resolve, the Go reference reader of table.idx, and the PHP reader
// through table.idx and through table.json alone) and Explain agree on
// random routing prefixes, validated or not (random class membership,
// territories, GB and CH, empty classes, unknown_country_class variants,
// drains, health keys, boosts some of them expired, dangling pools,
// missing routes, fallback cycles), for every ISO code as is and in lower
// case and garbage headers; and no decision of any of them sends a
// viewer out of the class of their country (the residency review: the
// other cross-checks run fixed fleets). REGIOND_DIFF_WORLDS sets how many
// worlds (40; the bigger runs of the review: 400).
func TestDecidersAgreeOnRandomPolicies(t *testing.T) {
	php(t)
	worlds := 40
	if s := os.Getenv("REGIOND_DIFF_WORLDS"); s != "" {
		if _, err := fmt.Sscan(s, &worlds); err != nil {
			t.Fatalf("REGIOND_DIFF_WORLDS=%q: %v", s, err)
		}
	}
	r := rand.New(rand.NewPCG(77, 88))
	for w := range worlds {
		now := time.Now()
		kvs := fleettest.RandomWorld(r, now)
		tab := routing.Compile(100, kvs, nil, routing.CompileOptions{Now: now, Start: now.Add(-time.Duration(r.IntN(10)) * time.Second)})
		h := routing.JSONHeader{WrittenAt: now, SyncedAt: now}
		ps := everyCountryPair(r)
		// Residency of every Go decision and explain agreement.
		for _, p := range ps {
			d, err := tab.Resolve(p.country, p.key, now)
			class := tab.ClassOf(routing.NormalizeCountry(p.country))
			if err == nil {
				pl, _ := tab.Pool(d.Pool)
				if class != "" && pl.Residency != class {
					t.Fatalf("world %d: RESIDENCY %q -> %s (%s), class %s", w, p.country, d.Pool, pl.Residency, class)
				}
			} else if !errors.Is(err, routing.ErrNoRoute) {
				t.Fatal(err)
			}
			ex := tab.Explain(p.country, p.key, now)
			if ex.NoRoute != (err != nil) {
				t.Fatalf("world %d: explain no_route %v, resolve err %v for %q", w, ex.NoRoute, err, p.country)
			}
			if err == nil && p.key != "" && tab.Effective(d.Country).Affinity != routing.AffinityRandom && ex.Decision.Pool != d.Pool {
				t.Fatalf("world %d: explain %s, resolve %s", w, ex.Decision.Pool, d.Pool)
			}
			if err == nil {
				last := ex.Routes[len(ex.Routes)-1]
				if last.Route != d.Route || !last.Chosen || last.Depth != d.FallbackDepth {
					t.Fatalf("world %d: explain's chosen route %+v, decision %s depth %d", w, last, d.Route, d.FallbackDepth)
				}
			}
		}
		// The Go reference index reader.
		idx, err := snapindex.Encode(nil, tab, h)
		if err != nil {
			t.Fatal(err)
		}
		x, err := snapindex.Parse("table.idx", idx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			want, werr := tab.Resolve(p.country, p.key, now)
			got, gerr := x.Resolve(p.country, p.key, now)
			if (werr == nil) != (gerr == nil) || got.Country != want.Country || got.Route != want.Route ||
				(p.key != "" && tab.Effective(want.Country).Affinity != routing.AffinityRandom && got.Pool != want.Pool) {
				t.Fatalf("world %d: index %+v %v; table %+v %v", w, got, gerr, want, werr)
			}
		}
		// PHP through the index and through the JSON.
		for _, withIndex := range []bool{true, false} {
			path := writeSnapshot(t, tab, h, withIndex)
			_, got := resolvePHP(t, path, 180, ps)
			t.Run(fmt.Sprintf("world%d/index=%v", w, withIndex), func(t *testing.T) {
				check(t, tab, now, ps, got, false)
			})
		}
	}
}
