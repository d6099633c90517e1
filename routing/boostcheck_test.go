package routing

import (
	"slices"
	"testing"
)

// TestBoostsWithoutEligibleTarget: a boost is listed when no viewer whose
// chain holds its route could be sent to any of its targets (residency,
// a drained pool, a route no chain holds), and only the boost in force on
// its route counts.
func TestBoostsWithoutEligibleTarget(t *testing.T) {
	boost := func(route, pool string) string {
		return `{"route":"` + route + `","targets":[{"pool":"` + pool + `","weight":100}]}`
	}
	for _, tc := range []struct {
		name string
		st   store
		revs map[string]int64
		want []string
	}{
		{"no boost", smallStore, nil, nil},
		{"eligible", smallStore.with("overrides/b", boost("PL", "ams")), nil, nil},
		{"attrs only", smallStore.with("overrides/b", `{"route":"PL","attrs":{"x":"y"}}`), nil, nil},
		{"residency", smallStore.with("overrides/b", boost("PL", "iad")), nil, []string{"b"}},
		{"default: eligible for countries in no class", smallStore.with("overrides/b", boost("_default", "iad")), nil, nil},
		{"route no chain holds", smallStore.with("overrides/b", boost("eu-general", "ams")), nil, []string{"b"}},
		{"drained", smallStore.with("overrides/b", boost("PL", "ams")).
			with("pools/ams", `{"host":"edge-ams-1.example.net","residency":"eu","status":"draining"}`), nil, []string{"b"}},
		{"unhealthy", smallStore.with("overrides/b", boost("PL", "fra")).with("health/fra/i-1", ""), nil, []string{"b"}},
		{"an eligible pool of weight 0", smallStore.with("overrides/b", `{"route":"PL","targets":[{"pool":"ams","weight":0},{"pool":"iad","weight":100}]}`), nil, []string{"b"}},
		{"superseded by a good one", smallStore.with("overrides/a", boost("PL", "iad")).with("overrides/b", boost("PL", "ams")),
			map[string]int64{"overrides/a": 2, "overrides/b": 3}, nil},
		{"in force, over a good one", smallStore.with("overrides/a", boost("PL", "ams")).with("overrides/b", boost("PL", "iad")),
			map[string]int64{"overrides/a": 2, "overrides/b": 3}, []string{"b"}},
	} {
		// Past fra's grace window, so that a pool without health keys is
		// unhealthy.
		tbl := Compile(10, tc.st.kvs(tc.revs), nil, CompileOptions{Now: t0}).At(t0.Add(DefaultHealthGrace + 1))
		if got := tbl.BoostsWithoutEligibleTarget(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
