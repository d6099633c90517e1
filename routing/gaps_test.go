package routing

import (
	"slices"
	"testing"
	"time"
)

// TestLoadedTableKeepsTheFilesHealth: a table loaded from a snapshot file
// judges a health-checked pool by the file (its writer saw the health
// keys), not by a clock it has no health keys for: a pool the file has
// healthy is served, however long after the file was written, until etcd
// says otherwise. Judged by the clock, the loaded pool has no instance and
// a grace window long over, so an agent started from its snapshot with
// etcd away (or a Go front door reading the file) answered NoRoute, or a
// fallback, for every viewer of a health-checked pool (mutation review:
// healthy() ignoring fixedHealthy survived every routing test).
func TestLoadedTableKeepsTheFilesHealth(t *testing.T) {
	s := store{
		"pools/north":       `{"host":"north.example.net","residency":"eu","health_check":true}`,
		"pools/south":       `{"host":"south.example.net","residency":"eu","health_check":true}`,
		"routes/PL":         `{"targets":[{"pool":"north","weight":100}],"fallback":["eu-general"]}`,
		"routes/eu-general": `{"targets":[{"pool":"south","weight":100}]}`,
		"routes/_default":   `{"targets":[{"pool":"south","weight":100}]}`,
		"health/north/h1":   `{"addr":"10.0.0.1:443"}`,
	}
	// south has no key, and the grace from the start is long over.
	tbl := Compile(5, s.kvs(nil), nil, CompileOptions{Now: t0, Start: t0.Add(-time.Hour), Grace: 5 * time.Second})
	if !tbl.Healthy("north", t0) || tbl.Healthy("south", t0) {
		t.Fatalf("compiled: north healthy %v, south %v; want true, false", tbl.Healthy("north", t0), tbl.Healthy("south", t0))
	}
	b, err := tbl.JSON(t0)
	if err != nil {
		t.Fatal(err)
	}
	loaded, _, err := LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{t0, t0.Add(time.Hour)} {
		if !loaded.Healthy("north", at) || loaded.Healthy("south", at) {
			t.Errorf("loaded, at %v: north healthy %v, south %v; want the file's true, false", at, loaded.Healthy("north", at), loaded.Healthy("south", at))
		}
		d, err := loaded.Resolve("PL", "viewer-1", at)
		if err != nil || d.Pool != "north" || d.Route != "PL" || !slices.Equal(d.Degraded, []string{"stale-table"}) {
			t.Errorf("PL from the loaded table at %v: %+v, %v; want north on PL, degraded [stale-table]", at, d, err)
		}
		d, err = loaded.Resolve("DE", "viewer-1", at)
		if err != ErrNoRoute || !slices.Equal(d.Degraded, []string{"no-route:DE", "pool-unhealthy:south", "stale-table"}) {
			t.Errorf("DE from the loaded table at %v: %+v, %v; want NoRoute [no-route:DE pool-unhealthy:south stale-table]", at, d, err)
		}
	}
}

// TestWhatIfDownOfADrainingPoolIsPoolDown: a draining pool named in a
// what-if's down list (regionctl resolve --down, WithDown: the status
// page) is reported pool-down, the reason tested first
// (docs/resolution.md: pool-down "or down in a what-if", before
// pool-draining), in degraded and in Explain, as for an active pool
// (mutation review: testing draining first, or WithDown skipping a pool
// that is not active, survived).
func TestWhatIfDownOfADrainingPoolIsPoolDown(t *testing.T) {
	// reasonStore: FR is ams (draining), then eu-general (fra).
	base := Compile(3, reasonStore.kvs(nil), nil, CompileOptions{Now: t0})
	if d, _ := base.Resolve("FR", "k", t0); !slices.Equal(d.Degraded, []string{"pool-draining:ams"}) {
		t.Fatalf("FR without a what-if: degraded %q; want [pool-draining:ams]", d.Degraded)
	}
	for name, tbl := range map[string]*Table{
		"CompileOptions.Down": Compile(3, reasonStore.kvs(nil), nil, CompileOptions{Now: t0, Down: []string{"ams"}}),
		"WithDown":            base.WithDown([]string{"ams"}, t0),
	} {
		d, err := tbl.Resolve("FR", "k", t0)
		if err != nil || d.Pool != "fra" || d.Route != "eu-general" || !slices.Equal(d.Degraded, []string{"pool-down:ams"}) {
			t.Errorf("%s ams: FR %+v, %v; want fra on eu-general, degraded [pool-down:ams]", name, d, err)
		}
		ex := tbl.Explain("FR", "k", t0)
		if len(ex.Routes) == 0 || len(ex.Routes[0].Pools) != 1 || ex.Routes[0].Pools[0].Reason != "pool-down:ams" {
			t.Errorf("%s ams: FR explained %+v; want ams passed over as pool-down:ams", name, ex.Routes)
		}
	}
}
