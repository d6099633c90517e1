package php_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// diffResidencies are the residency classes of randomWorld's pools, eu
// the likeliest.
var diffResidencies = []string{"eu", "eu", "eu", "us", "apac", "uk", "global", "ch"}

// randomWorld returns a random routing prefix (not validated) at now.
func randomWorld(r *rand.Rand, now time.Time) []routing.KV {
	var kvs []routing.KV
	rev := int64(1)
	put := func(k, v string) {
		rev++
		kvs = append(kvs, routing.KV{Key: k, Value: []byte(v), ModRevision: rev, CreateRevision: rev, Version: 1})
	}
	nPools := 1 + r.IntN(8)
	pools := []string{"ghost"}
	for i := range nPools {
		id := fmt.Sprintf("p%d", i)
		pools = append(pools, id)
		hc := r.IntN(3) == 0
		attrs := fmt.Sprintf(`{"shard":%q,"lang":"pool-%d"}`, id, i)
		if r.IntN(6) == 0 {
			attrs = `{"0":"zero","1":"one"}` // numeric attribute names
		}
		st := []string{"active", "active", "active", "draining", "down"}[r.IntN(5)]
		put(routing.PoolKey(id), fmt.Sprintf(`{"host":"edge-%d.example.net:443","residency":%q,"status":%q,"health_check":%v,"attrs":%s}`,
			i, diffResidencies[r.IntN(len(diffResidencies))], st, hc, attrs))
		if hc && r.IntN(2) == 0 {
			put(routing.HealthKey(id, "i-1"), `{}`)
		}
	}
	if r.IntN(5) > 0 {
		classes := map[string][]string{}
		switch r.IntN(4) {
		case 0:
			classes["eu"] = routing.EEA()
		case 1:
			classes["eu"] = routing.EEA()
			classes["uk"] = []string{"GB"}
			classes["ch"] = []string{"CH", "LI"}[:1]
			classes["apac"] = []string{"JP", "KR", "SG"}
		case 2: // random membership
			for _, cc := range routing.Countries() {
				if r.IntN(4) == 0 {
					c := diffResidencies[r.IntN(len(diffResidencies))]
					classes[c] = append(classes[c], cc)
				}
			}
		case 3: // empty classes
		}
		ucc := []string{"eu", "us", "global", "uk", ""}[r.IntN(5)]
		put(routing.PolicyKey, fmt.Sprintf(`{"classes":%s,"unknown_country_class":%q}`, valueJSON(classes), ucc))
	}
	names := []string{routing.DefaultRoute, "g0", "g1", "eu-general"}
	for range 3 + r.IntN(20) {
		names = append(names, routing.Countries()[r.IntN(len(routing.Countries()))])
	}
	names = append(names, "GB", "CH", "PL", "DE", "US", "RE", "AX")
	groups := []string{"g0", "g1", "eu-general", "missing", routing.DefaultRoute, "PL", "US", "GB"}
	for _, name := range names {
		if r.IntN(10) == 0 {
			continue
		}
		var fb []string
		for range r.IntN(3) {
			if f := groups[r.IntN(len(groups))]; f != name && !slices.Contains(fb, f) {
				fb = append(fb, f)
			}
		}
		aff := "sticky"
		if r.IntN(4) == 0 {
			aff = "random"
		}
		put(routing.RouteKey(name), fmt.Sprintf(`{"targets":%s,"fallback":%s,"affinity":%q,"attrs":{"route":%q}}`,
			randomTargets(r, pools), valueJSON(fb), aff, name))
	}
	for i := range r.IntN(4) {
		exp := ""
		if r.IntN(2) == 0 {
			exp = fmt.Sprintf(`,"expires_at":%q`, now.Add(time.Duration(r.IntN(20)-10)*time.Second).UTC().Format(time.RFC3339))
		}
		put(routing.OverrideKey(fmt.Sprintf("o%d", i)), fmt.Sprintf(`{"route":%q,"targets":%s,"attrs":{"boost":"o%d"}%s}`,
			names[r.IntN(len(names))], randomTargets(r, pools), i, exp))
	}
	return kvs
}

// randomTargets returns a JSON target list of 1 to 4 of pools, weights
// summing to 100, some 0.
func randomTargets(r *rand.Rand, pools []string) string {
	n := 1 + r.IntN(min(4, len(pools)))
	perm := r.Perm(len(pools))[:n]
	left := 100
	var parts []string
	for i, p := range perm {
		w := left
		if i < n-1 {
			w = r.IntN(left + 1)
			if r.IntN(5) == 0 {
				w = 0
			}
		}
		left -= w
		parts = append(parts, fmt.Sprintf(`{"pool":%q,"weight":%d}`, pools[p], w))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// valueJSON is v encoded as a stored value.
func valueJSON(v any) string {
	b, err := routing.EncodeValue(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

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
// worlds (60).
func TestDecidersAgreeOnRandomPolicies(t *testing.T) {
	php(t)
	worlds := 60
	if s := os.Getenv("REGIOND_DIFF_WORLDS"); s != "" {
		if _, err := fmt.Sscan(s, &worlds); err != nil {
			t.Fatalf("REGIOND_DIFF_WORLDS=%q: %v", s, err)
		}
	}
	r := rand.New(rand.NewPCG(77, 88))
	for w := range worlds {
		now := time.Now()
		kvs := randomWorld(r, now)
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
