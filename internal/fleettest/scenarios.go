package fleettest

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// Scenario is a table built from the example fleet with some pools
// drained, down, unhealthy or boosted, for cross-checks of readers.
type Scenario struct {
	// Name is the scenario's name: fleet, drained, down, unhealthy,
	// boosted or stale.
	Name string
	// Table is the scenario's table.
	Table *routing.Table
}

// Scenarios returns tables of the example fleet at revision 4242, epoch 17,
// compiled at now:
//   - fleet: as in examples/routing.yaml;
//   - drained: eu-central draining, JP with affinity random, a weight-0
//     target, attrs set by both a pool and a route, and a _default whose
//     only eu pool is eu-central (unknown viewers get NoRoute);
//   - down: every eu pool down (EU and unknown viewers get NoRoute);
//   - unhealthy: eu-west and us-east with health_check and no live
//     instance past the grace window, apac-tokyo with health_check and one
//     live instance;
//   - boosted: live overrides of KR (targets and attrs) and PL (attrs);
//   - stale: the fleet, marked stale (every decision says stale-table).
func Scenarios(t testing.TB, now time.Time) []Scenario {
	t.Helper()
	base := Config(t)
	drained := base.Clone()
	setPool(drained, "eu-central", func(p *routing.Pool) { p.Status = routing.StatusDraining })
	setPool(drained, "eu-west", func(p *routing.Pool) {
		p.Attrs = maps.Clone(p.Attrs)
		if p.Attrs == nil {
			p.Attrs = map[string]string{}
		}
		p.Attrs["lang"], p.Attrs["pool_only"] = "pool-lang", "yes"
	})
	setRoute(drained, "PL", func(r *routing.Route) {
		r.Attrs = maps.Clone(r.Attrs)
		r.Attrs["cdn"] = "cdn-pl.example.net"
	})
	drained.Routes["JP"] = routing.Route{
		Targets:  []routing.Target{{Pool: "apac-tokyo", Weight: 50}, {Pool: "apac-singapore", Weight: 50}},
		Fallback: []string{"apac-general"},
		Affinity: routing.AffinityRandom,
		Attrs:    map[string]string{"lang": "ja"},
	}
	setRoute(drained, "US", func(r *routing.Route) {
		r.Targets = append(slices.Clone(r.Targets), routing.Target{Pool: "latam-mex", Weight: 0})
	})
	setRoute(drained, "_default", func(r *routing.Route) {
		r.Targets = []routing.Target{{Pool: "eu-central", Weight: 50}, {Pool: "us-east", Weight: 50}}
	})
	unhealthy := base.Clone()
	for _, id := range []string{"eu-west", "us-east", "apac-tokyo"} {
		setPool(unhealthy, id, func(p *routing.Pool) { p.HealthCheck = true })
	}
	boosts := map[string]routing.Override{
		"kr-comeback": {Route: "KR", Targets: []routing.Target{{Pool: "kr-music", Weight: 100}},
			Attrs: map[string]string{"campaign": "comeback", "lang": "ko-KR"}, Reason: "comeback week"},
		"pl-promo": {Route: "PL", Attrs: map[string]string{"promo": "winter"}, Reason: "promo"},
	}
	opts := routing.CompileOptions{Now: now, Start: now.Add(-time.Hour)}
	down := opts
	down.Down = []string{"eu-central", "eu-west", "eu-north"}
	stale := opts
	stale.Stale = true
	return []Scenario{
		{"fleet", compileAt(t, base, nil, nil, opts)},
		{"drained", compileAt(t, drained, nil, nil, opts)},
		{"down", compileAt(t, base, nil, nil, down)},
		{"unhealthy", compileAt(t, unhealthy, nil, map[string]string{"health/apac-tokyo/i-1": `{"addr":"10.0.0.1:443"}`}, opts)},
		{"boosted", compileAt(t, base, boosts, nil, opts)},
		{"stale", compileAt(t, base, nil, nil, stale)},
	}
}

func setPool(cfg *routing.Config, id string, f func(*routing.Pool)) {
	p := cfg.Pools[id]
	f(&p)
	cfg.Pools[id] = p
}

func setRoute(cfg *routing.Config, name string, f func(*routing.Route)) {
	r := cfg.Routes[name]
	f(&r)
	cfg.Routes[name] = r
}

// compileAt compiles cfg with overrides and extra raw keys at revision
// 4242, epoch 17.
func compileAt(t testing.TB, cfg *routing.Config, overrides map[string]routing.Override, extra map[string]string, opts routing.CompileOptions) *routing.Table {
	t.Helper()
	vals, err := cfg.Values()
	if err != nil {
		t.Fatal(err)
	}
	kvs := []routing.KV{{Key: routing.EpochKey, Value: []byte("17"), ModRevision: 1}}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		kvs = append(kvs, routing.KV{Key: k, Value: vals[k], ModRevision: 2})
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		kvs = append(kvs, routing.KV{Key: k, Value: []byte(extra[k]), ModRevision: 3})
	}
	for i, id := range slices.Sorted(maps.Keys(overrides)) {
		b, err := json.Marshal(overrides[id])
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, routing.KV{Key: routing.OverrideKey(id), Value: b, ModRevision: int64(10 + i)})
	}
	tab := routing.Compile(4242, kvs, nil, opts)
	if sk := tab.Skipped(); len(sk) > 0 {
		t.Fatalf("fleettest: compile: keys refused: %+v", sk)
	}
	return tab
}
