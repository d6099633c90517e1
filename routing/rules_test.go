package routing

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

func TestReasonOf(t *testing.T) {
	for listed, want := range map[string]Reason{
		"pool-down:eu-central":    ReasonPoolDown,
		"no-route:eu-missing":     ReasonNoRoute,
		"residency-blocked:a:b":   ReasonResidencyBlocked,
		"stale-table":             ReasonStaleTable,
		ReasonPoolDraining.On(""): ReasonPoolDraining,
	} {
		if got := ReasonOf(listed); got != want {
			t.Errorf("ReasonOf(%q) = %q, want %q", listed, got, want)
		}
	}
	if got := ReasonPoolUnhealthy.On("mil"); got != "pool-unhealthy:mil" {
		t.Errorf("On = %q", got)
	}
}

// TestExplainWeightZero: a weight-0 target is listed by Explain with its
// pool's reason when the pool is not eligible, else with weight-0; neither
// reaches degraded (docs/resolution.md, Reason codes).
func TestExplainWeightZero(t *testing.T) {
	s := reasonStore.with("routes/PL", `{"targets":[{"pool":"fra","weight":100},{"pool":"ams","weight":0},{"pool":"mad","weight":0},{"pool":"mil","weight":0}]}`)
	tbl := Compile(3, s.kvs(nil), nil, CompileOptions{Now: t0, Start: t0.Add(-time.Hour)})
	ex := tbl.Explain("PL", "k", t0)
	got, _ := json.Marshal(ex.Routes)
	want := `[{"route":"PL","depth":0,"exists":true,"chosen":true,"pools":[{"pool":"fra","weight":100,"eligible":true},` +
		`{"pool":"ams","weight":0,"eligible":false,"reason":"pool-draining:ams"},{"pool":"mad","weight":0,"eligible":false,"reason":"pool-down:mad"},` +
		`{"pool":"mil","weight":0,"eligible":false,"reason":"pool-unhealthy:mil"}]}]`
	if string(got) != want {
		t.Errorf("Explain routes:\n got  %s\n want %s", got, want)
	}
	if ex.Decision == nil || len(ex.Decision.Degraded) != 0 {
		t.Errorf("decision %+v: want PL with nothing degraded", ex.Decision)
	}
	s = reasonStore.with("routes/PL", `{"targets":[{"pool":"fra","weight":0},{"pool":"mad","weight":100}],"fallback":["eu-general"]}`)
	tbl = Compile(3, s.kvs(nil), nil, CompileOptions{Now: t0, Start: t0.Add(-time.Hour)})
	ex = tbl.Explain("PL", "k", t0)
	if ps := ex.Routes[0].Pools[0]; ps.Eligible || ps.Reason != string(ReasonWeightZero) {
		t.Errorf("weight-0 target of an eligible pool: %+v", ps)
	}
	if d := ex.Decision; d == nil || d.Route != "eu-general" || !slices.Equal(d.Degraded, []string{"pool-down:mad"}) {
		t.Errorf("decision %+v: want eu-general, degraded [pool-down:mad]", d)
	}
}

// TestExplainAgreesWithDegraded: for every viewer of the example fleet in
// every scenario, the reasons Explain gives for the targets of weight > 0
// it passed over are the pool reasons of the Decision's degraded, in order:
// one walk for both.
func TestExplainAgreesWithDegraded(t *testing.T) {
	cfg := exampleConfig(t)
	for _, down := range [][]string{nil, {"eu-central"}, {"eu-central", "eu-west", "us-east"}} {
		tbl := compileCfg(t, cfg, CompileOptions{Down: down, Start: t0.Add(-time.Hour)})
		for _, cc := range append(Countries(), "T1") {
			ex := tbl.Explain(cc, "k", t0)
			var fromSteps reasons
			for _, r := range ex.Routes {
				for _, p := range r.Pools {
					if !p.Eligible && p.Weight > 0 {
						fromSteps.add(p.Reason)
					}
				}
			}
			deg := ex.Reasons
			if ex.Decision != nil {
				deg = ex.Decision.Degraded
			}
			var pools []string
			for _, r := range deg {
				if c := ReasonOf(r); c != ReasonNoRoute && c != ReasonStaleTable {
					pools = append(pools, r)
				}
			}
			if !slices.Equal([]string(fromSteps), pools) {
				t.Errorf("down %v, %s: Explain passed over %v, degraded %v", down, cc, fromSteps, deg)
			}
		}
	}
}

// TestStaticallyReachable: the reachability check counts a target of an
// allowed pool whatever its status or health, and never one of weight 0.
func TestStaticallyReachable(t *testing.T) {
	cfg := &Config{
		Pools: map[string]Pool{
			"fra": {Host: "f", Residency: "eu", Status: StatusDown},
			"ams": {Host: "a", Residency: "eu", Status: StatusDraining, HealthCheck: true},
			"iad": {Host: "i", Residency: "us", Status: StatusActive},
		},
		Routes: map[string]Route{
			"_default": {Targets: tg("iad", 100)},
			"PL":       {Targets: tg("fra", 100)},
			"DE":       {Targets: tg("ams", 0, "iad", 100), Fallback: []string{"eu-x"}},
			"eu-x":     {Targets: tg("ams", 10)},
			"FR":       {Targets: tg("fra", 0, "iad", 100)},
		},
	}
	tbl := compileConfigTable(cfg, DefaultResidency())
	for own, want := range map[string]bool{"PL": true, "DE": true, "FR": false, "IT": false, "": false} {
		if got := staticallyReachable(tbl, own, "eu"); got != want {
			t.Errorf("%q: reachable %v, want %v", own, got, want)
		}
	}
	if !staticallyReachable(tbl, "FR", "") {
		t.Errorf("FR with no class: iad must be reachable")
	}
}
