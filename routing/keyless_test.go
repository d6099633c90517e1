package routing

import (
	"math"
	"testing"
)

// TestResolveStickyRouteWithoutKeyIsWeightedRandom: a viewer with no
// sticky key on a sticky route (the default affinity) is placed by
// weighted random, not hashed: hashing the empty key would send every
// keyless viewer to the same pool (docs/resolution.md, step 5).
func TestResolveStickyRouteWithoutKeyIsWeightedRandom(t *testing.T) {
	cfg := baseConfig()
	cfg.Routes["US"] = Route{Targets: tg("us-east", 100)}
	cfg.Routes["PL"] = Route{Targets: tg("eu-central", 80, "eu-west", 20)} // sticky by default
	tbl := compileCfg(t, cfg, CompileOptions{})
	if a := tbl.Effective("PL").Affinity; a == AffinityRandom {
		t.Fatalf("PL's affinity is %q, want sticky", a)
	}
	const n = 100000
	count := map[string]int{}
	for i := 0; i < n; i++ {
		d, err := tbl.Resolve("PL", "", t0)
		if err != nil {
			t.Fatal(err)
		}
		count[d.Pool]++
	}
	if share := float64(count["eu-west"]) / n; math.Abs(share-0.2) > 0.01 {
		t.Errorf("keyless viewers of a sticky route: eu-west got %.3f (%v), want 0.20 (weighted random)", share, count)
	}
}
