package fleettest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/regiond/regiond/routing"
)

// worldResidencies are the residency classes of RandomWorld's pools, eu
// the likeliest.
var worldResidencies = []string{"eu", "eu", "eu", "us", "apac", "uk", "global", "ch"}

// RandomWorld returns a random routing prefix at now, not validated, for
// the differential tests of the deciders (Go, PHP, JavaScript): random
// class membership (territories, GB and CH, empty classes), every
// unknown_country_class, pools drained, down or without health, boosts
// some of them expired, dangling pools, missing routes, fallback cycles.
// The same r gives the same world.
func RandomWorld(r *rand.Rand, now time.Time) []routing.KV {
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
			i, worldResidencies[r.IntN(len(worldResidencies))], st, hc, attrs))
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
					c := worldResidencies[r.IntN(len(worldResidencies))]
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
