package routing

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// store is a routing prefix at one revision: relative key -> raw value.
type store map[string]string

// with returns a copy of s with key set to raw ("" deletes it).
func (s store) with(key, raw string) store {
	out := maps.Clone(s)
	if raw == "" {
		delete(out, key)
	} else {
		out[key] = raw
	}
	return out
}

// kvs returns the key/values with ModRevision 1, or the revision given in
// revs.
func (s store) kvs(revs map[string]int64) []KV {
	var out []KV
	for _, k := range sortedKeys(s) {
		rev := int64(1)
		if r, ok := revs[k]; ok {
			rev = r
		}
		out = append(out, KV{Key: k, Value: []byte(s[k]), ModRevision: rev})
	}
	return out
}

// smallStore: two EU pools (fra with a health check), a US pool, PL and
// _default.
var smallStore = store{
	"policy/residency":  `{"classes":{"eu":["PL","DE"]},"unknown_country_class":"eu"}`,
	"pools/fra":         `{"host":"edge-fra-1.example.net","residency":"eu","health_check":true,"attrs":{"shard":"eu-1","cdn":"cdn-eu"}}`,
	"pools/ams":         `{"host":"edge-ams-1.example.net","residency":"eu","attrs":{"shard":"eu-2","cdn":"cdn-eu"}}`,
	"pools/iad":         `{"host":"edge-iad-1.example.net","residency":"us","attrs":{"shard":"us-1"}}`,
	"routes/_default":   `{"targets":[{"pool":"fra","weight":50},{"pool":"iad","weight":50}],"attrs":{"lang":"en"}}`,
	"routes/PL":         `{"targets":[{"pool":"fra","weight":70},{"pool":"ams","weight":30}],"attrs":{"lang":"pl"}}`,
	"health/fra/i-1":    `{"addr":"10.0.0.1:443"}`,
	"epoch":             `7`,
	"routes/eu-general": `{"targets":[{"pool":"ams","weight":100}],"fallback":["_default"]}`,
}

func TestCompile(t *testing.T) {
	tbl := Compile(10, smallStore.kvs(nil), nil, CompileOptions{Now: t0})
	if tbl.Revision() != 10 || tbl.Epoch() != 7 || tbl.Stale() {
		t.Errorf("revision %d epoch %d stale %v", tbl.Revision(), tbl.Epoch(), tbl.Stale())
	}
	if got := tbl.PoolIDs(); !slices.Equal(got, []string{"ams", "fra", "iad"}) {
		t.Errorf("pools %v", got)
	}
	if got := tbl.RouteNames(); !slices.Equal(got, []string{"PL", "_default", "eu-general"}) {
		t.Errorf("routes %v", got)
	}
	if p, _ := tbl.Pool("fra"); p.Instances != 1 || p.Status != StatusActive {
		t.Errorf("fra: %+v", p)
	}
	if got := tbl.Policy().Classes["eu"]; !slices.Equal(got, []string{"PL", "DE"}) {
		t.Errorf("policy %v", got)
	}
	if tbl.ClassOf("DE") != "eu" || tbl.ClassOf("FR") != "" || tbl.ClassOf(Unknown) != "eu" {
		t.Errorf("classes DE=%q FR=%q unknown=%q", tbl.ClassOf("DE"), tbl.ClassOf("FR"), tbl.ClassOf(Unknown))
	}
	if len(tbl.Skipped()) != 0 || !tbl.ValidUntil().IsZero() || !tbl.VerifyChecksum() {
		t.Errorf("skipped %v, valid until %v", tbl.Skipped(), tbl.ValidUntil())
	}
}

func TestCompileWithoutPolicyUsesEEA(t *testing.T) {
	tbl := Compile(1, smallStore.with("policy/residency", "").kvs(nil), nil, CompileOptions{Now: t0})
	for _, cc := range []string{"HU", "NO", "IS", "LI", "DE", "PL"} {
		if tbl.ClassOf(cc) != "eu" {
			t.Errorf("%s: class %q", cc, tbl.ClassOf(cc))
		}
	}
	if tbl.ClassOf("GB") != "" || tbl.ClassOf("CH") != "" {
		t.Errorf("GB, CH are not in the EEA")
	}
}

// TestCompileLastGood: a value that does not decode is listed in Skipped
// and the previous table's good value of that key keeps serving; without a
// previous good value the key is absent; a deleted key is gone.
func TestCompileLastGood(t *testing.T) {
	prev := Compile(10, smallStore.kvs(nil), nil, CompileOptions{Now: t0})
	bad := smallStore.
		with("routes/PL", `{"targets":[{"pool":"fra","weight":130}]}`).
		with("pools/ams", `{"host":"edge-ams-1.example.net","residency":"eu","status":"paused"}`).
		with("routes/DE", `{"targets":"fra"}`).
		with("routes/eu-general", "").
		with("epoch", "eight")
	tbl := Compile(11, bad.kvs(nil), prev, CompileOptions{Now: t0.Add(time.Second)})

	var keys []string
	for _, s := range tbl.Skipped() {
		keys = append(keys, s.Key)
	}
	if want := []string{"epoch", "pools/ams", "routes/DE", "routes/PL"}; !slices.Equal(keys, want) {
		t.Errorf("skipped %v, want %v", keys, want)
	}
	for _, s := range tbl.Skipped() {
		if !strings.HasPrefix(s.Error, s.Key+": ") {
			t.Errorf("skipped error %q does not name its key", s.Error)
		}
	}
	if s := tbl.Skipped()[3].Error; s != "routes/PL: targets[0].weight: must be 0..100, got 130\nroutes/PL: targets: weights must sum to 100, got 130" {
		t.Errorf("PL error %q", s)
	}
	if r, _ := tbl.Route("PL"); !reflect.DeepEqual(r.Targets, tg("fra", 70, "ams", 30)) {
		t.Errorf("PL kept %v, want the last good targets", r.Targets)
	}
	if p, _ := tbl.Pool("ams"); p.Status != StatusActive {
		t.Errorf("ams kept %+v", p)
	}
	if _, ok := tbl.Route("DE"); ok {
		t.Errorf("DE never had a good value but is in the table")
	}
	if _, ok := tbl.Route("eu-general"); ok {
		t.Errorf("deleted eu-general is still in the table")
	}
	if tbl.Epoch() != 7 {
		t.Errorf("epoch %d, want the last good 7", tbl.Epoch())
	}
	d, err := tbl.Resolve("PL", "viewer-1", t0)
	if err != nil || d.Route != "PL" {
		t.Errorf("PL resolves to %+v, %v", d, err)
	}

	// The bad values stay bad in the next revision: still skipped, still
	// the last good value. Fixing one clears it.
	next := Compile(12, bad.with("routes/PL", `{"targets":[{"pool":"ams","weight":100}]}`).kvs(nil), tbl, CompileOptions{Now: t0.Add(2 * time.Second)})
	if r, _ := next.Route("PL"); !reflect.DeepEqual(r.Targets, tg("ams", 100)) {
		t.Errorf("fixed PL is %v", r.Targets)
	}
	if p, _ := next.Pool("ams"); p.Status != StatusActive {
		t.Errorf("ams lost its last good value after two bad revisions: %+v", p)
	}
	if got := len(next.Skipped()); got != 3 {
		t.Errorf("skipped %v", next.Skipped())
	}
	// A key deleted while bad is gone with its last good value.
	gone := Compile(13, bad.with("pools/ams", "").kvs(nil), next, CompileOptions{Now: t0.Add(3 * time.Second)})
	if _, ok := gone.Pool("ams"); ok {
		t.Errorf("deleted pool ams kept")
	}
}

func TestCompileKeysOutsideTheGrammar(t *testing.T) {
	tbl := Compile(1, smallStore.with("routes/Poland", `{}`).with("junk", `x`).kvs(nil), nil, CompileOptions{Now: t0})
	var keys []string
	for _, s := range tbl.Skipped() {
		keys = append(keys, s.Key)
	}
	if !slices.Equal(keys, []string{"junk", "routes/Poland"}) {
		t.Errorf("skipped %v", tbl.Skipped())
	}
}

// TestCompileOverrides: overrides replace targets and merge attrs; the
// newest (highest ModRevision) wins where they disagree, whatever their
// ids; an override of a missing route is not applied.
func TestCompileOverrides(t *testing.T) {
	s := smallStore.
		with("overrides/b-older", `{"route":"PL","targets":[{"pool":"fra","weight":100}],"attrs":{"banner":"old","promo":"spring"}}`).
		with("overrides/a-newer", `{"route":"PL","targets":[{"pool":"ams","weight":100}],"attrs":{"banner":"new"}}`).
		with("overrides/attrs-only", `{"route":"_default","attrs":{"lang":"en-GB"}}`).
		with("overrides/orphan", `{"route":"KR","targets":[{"pool":"iad","weight":100}]}`)
	tbl := Compile(20, s.kvs(map[string]int64{"overrides/b-older": 15, "overrides/a-newer": 18, "overrides/attrs-only": 3, "overrides/orphan": 4}), nil, CompileOptions{Now: t0})

	pl, _ := tbl.Route("PL")
	if !reflect.DeepEqual(pl.Targets, tg("ams", 100)) {
		t.Errorf("PL targets %v, want the newest override's", pl.Targets)
	}
	if want := map[string]string{"lang": "pl", "banner": "new", "promo": "spring"}; !reflect.DeepEqual(pl.Attrs, want) {
		t.Errorf("PL attrs %v, want %v", pl.Attrs, want)
	}
	def, _ := tbl.Route(DefaultRoute)
	if !reflect.DeepEqual(def.Targets, tg("fra", 50, "iad", 50)) || def.Attrs["lang"] != "en-GB" {
		t.Errorf("_default %+v", def)
	}
	if _, ok := tbl.Route("KR"); ok {
		t.Errorf("an override created route KR")
	}
	if len(tbl.Skipped()) != 1 || tbl.Skipped()[0].Key != "overrides/orphan" ||
		tbl.Skipped()[0].Error != "overrides/orphan: route: route KR does not exist; the override is not applied" {
		t.Errorf("skipped %v", tbl.Skipped())
	}
	if len(tbl.Overrides()) != 4 {
		t.Errorf("overrides %v", tbl.Overrides())
	}
	d, err := tbl.Resolve("pl", "v", t0)
	if err != nil || d.Pool != "ams" || d.Attrs["banner"] != "new" || d.Attrs["promo"] != "spring" || d.Attrs["shard"] != "eu-2" {
		t.Errorf("PL resolves to %+v, %v", d, err)
	}
	if ex := tbl.Explain("PL", "v", t0); !slices.Equal(ex.Routes[0].Overrides, []string{"b-older", "a-newer"}) {
		t.Errorf("explain overrides %v", ex.Routes[0].Overrides)
	}
	// The stored route is untouched: the table without the overrides is the
	// original again.
	base := Compile(21, smallStore.kvs(nil), tbl, CompileOptions{Now: t0})
	if r, _ := base.Route("PL"); !reflect.DeepEqual(r.Targets, tg("fra", 70, "ams", 30)) || r.Attrs["banner"] != "" {
		t.Errorf("PL after the overrides ended: %+v", r)
	}
}

// TestCompileHealthGrace: a pool with health_check stays healthy for the
// grace window after losing its last health key, or after Start when it
// never had one; ValidUntil says when the table must be rebuilt, At
// rebuilds it, and Resolve is right even on a table not yet rebuilt.
func TestCompileHealthGrace(t *testing.T) {
	const grace = 5 * time.Second
	opts := func(now time.Time) CompileOptions { return CompileOptions{Now: now, Grace: grace} }
	live := Compile(1, smallStore.kvs(nil), nil, opts(t0))
	if !live.Healthy("fra", t0.Add(time.Hour)) || !live.ValidUntil().IsZero() {
		t.Fatalf("fra with a live health key: healthy %v, valid until %v", live.Healthy("fra", t0.Add(time.Hour)), live.ValidUntil())
	}

	// The last health key goes at t1.
	t1 := t0.Add(time.Minute)
	lost := Compile(2, smallStore.with("health/fra/i-1", "").kvs(nil), live, opts(t1))
	if got := lost.ValidUntil(); !got.Equal(t1.Add(grace)) {
		t.Errorf("ValidUntil %v, want %v", got, t1.Add(grace))
	}
	if !lost.Healthy("fra", t1.Add(grace-time.Nanosecond)) || lost.Healthy("fra", t1.Add(grace)) {
		t.Errorf("fra must be healthy for exactly the grace window after its last key")
	}
	if lost.At(t1.Add(time.Second)) != lost {
		t.Errorf("At before ValidUntil must return the table itself")
	}
	d, _ := lost.Resolve("PL", "k", t1.Add(time.Second))
	if len(d.Degraded) != 0 {
		t.Errorf("within grace: %+v", d)
	}
	for name, tbl := range map[string]*Table{"At": lost.At(t1.Add(grace)), "not rebuilt": lost} {
		for i := 0; i < 50; i++ {
			d, err := tbl.Resolve("PL", strings.Repeat("k", i), t1.Add(grace))
			if err != nil || d.Pool != "ams" || !slices.Equal(d.Degraded, []string{"pool-unhealthy:fra"}) {
				t.Fatalf("%s: after grace PL resolves to %+v, %v", name, d, err)
			}
		}
		// The residency invariant holds on both, for every viewer: DE
		// (eu, no route of its own) reaches only _default's fra
		// (unhealthy) and iad (us), so it gets NoRoute.
		for _, cc := range append(slices.Clone(Countries()), "XX") {
			for i := 0; i < 3; i++ {
				d, err := tbl.Resolve(cc, strings.Repeat("k", i), t1.Add(grace))
				if v := residencyViolation(tbl, cc, d, err); v != "" {
					t.Fatalf("%s: after grace %s", name, v)
				}
			}
		}
		if d, err := tbl.Resolve("DE", "k", t1.Add(grace)); err == nil {
			t.Fatalf("%s: after grace DE resolves to %+v, want NoRoute", name, d)
		}
	}
	after := lost.At(t1.Add(grace))
	if !after.ValidUntil().IsZero() {
		t.Errorf("rebuilt table still valid until %v", after.ValidUntil())
	}
	if e := after.Effective("PL"); len(e.Candidates) != 1 || e.Candidates[0].Pool != "ams" {
		t.Errorf("rebuilt effective PL %+v", e)
	}

	// Recompiling later (another key changed) keeps counting from t1, not
	// from the recompile.
	later := Compile(3, smallStore.with("health/fra/i-1", "").with("epoch", "8").kvs(nil), lost, opts(t1.Add(2*time.Second)))
	if !later.ValidUntil().Equal(t1.Add(grace)) || later.Healthy("fra", t1.Add(grace)) {
		t.Errorf("grace restarted on recompile: valid until %v", later.ValidUntil())
	}
	// A new health key makes it healthy at once.
	back := Compile(4, smallStore.with("health/fra/i-2", `{"addr":"10.0.0.2:443"}`).kvs(nil), later, opts(t1.Add(time.Hour)))
	if !back.Healthy("fra", t1.Add(time.Hour)) {
		t.Errorf("fra with a new health key is unhealthy")
	}
	// A health key whose value is garbage is still a live instance.
	garbage := Compile(5, smallStore.with("health/fra/i-1", `not json`).kvs(nil), nil, opts(t0))
	if p, _ := garbage.Pool("fra"); p.Instances != 1 || len(garbage.Skipped()) != 1 {
		t.Errorf("garbage health value: instances %d, skipped %v", p.Instances, garbage.Skipped())
	}
}

func TestCompileHealthNeverSeen(t *testing.T) {
	const grace = 5 * time.Second
	start := t0.Add(-2 * time.Second)
	tbl := Compile(1, smallStore.with("health/fra/i-1", "").kvs(nil), nil, CompileOptions{Now: t0, Start: start, Grace: grace})
	if !tbl.ValidUntil().Equal(start.Add(grace)) {
		t.Errorf("ValidUntil %v, want start+grace %v", tbl.ValidUntil(), start.Add(grace))
	}
	if !tbl.Healthy("fra", t0) || tbl.Healthy("fra", start.Add(grace)) {
		t.Errorf("never-seen pool must be healthy until start+grace")
	}
	// Start defaults to the previous table's start, then to Now.
	next := Compile(2, smallStore.with("health/fra/i-1", "").kvs(nil), tbl, CompileOptions{Now: t0.Add(time.Second), Grace: grace})
	if !next.ValidUntil().Equal(start.Add(grace)) {
		t.Errorf("next ValidUntil %v", next.ValidUntil())
	}
	fresh := Compile(1, smallStore.with("health/fra/i-1", "").kvs(nil), nil, CompileOptions{Now: t0})
	if !fresh.ValidUntil().Equal(t0.Add(DefaultHealthGrace)) {
		t.Errorf("default grace: valid until %v", fresh.ValidUntil())
	}
	// Long past the grace window, the pool is unhealthy from the start.
	old := Compile(1, smallStore.with("health/fra/i-1", "").kvs(nil), nil, CompileOptions{Now: t0, Start: t0.Add(-time.Hour), Grace: grace})
	if old.Healthy("fra", t0) || !old.ValidUntil().IsZero() {
		t.Errorf("pool without health keys for an hour is healthy")
	}
	// Pools without health_check never need a key.
	if !old.Healthy("ams", t0.Add(24*time.Hour)) {
		t.Errorf("ams has no health check")
	}
}

// TestCompileAfterSnapshot: the first compile after loading a snapshot
// counts never-seen pools from the agent's start, not from when the
// snapshot was written.
func TestCompileAfterSnapshot(t *testing.T) {
	snap := Compile(1, smallStore.kvs(nil), nil, CompileOptions{Now: t0.Add(-time.Hour)})
	b, err := snap.JSON(t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	loaded, _, err := LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	tbl := Compile(2, smallStore.with("health/fra/i-1", "").kvs(nil), loaded, CompileOptions{Now: t0})
	if !tbl.Healthy("fra", t0.Add(time.Second)) || !tbl.ValidUntil().Equal(t0.Add(DefaultHealthGrace)) {
		t.Errorf("fra after the snapshot: healthy %v, valid until %v", tbl.Healthy("fra", t0.Add(time.Second)), tbl.ValidUntil())
	}
	if tbl.Stale() {
		t.Errorf("a compiled table is not stale")
	}
}

func TestCompileDown(t *testing.T) {
	tbl := Compile(1, smallStore.kvs(nil), nil, CompileOptions{Now: t0, Down: []string{"fra", "nonexistent"}})
	d, err := tbl.Resolve("PL", "k", t0)
	if err != nil || d.Pool != "ams" || !slices.Equal(d.Degraded, []string{"pool-down:fra"}) {
		t.Errorf("PL with fra down: %+v, %v", d, err)
	}
	if p, _ := tbl.Pool("fra"); p.Status != StatusActive {
		t.Errorf("Down must not change the stored status")
	}
}

func TestWithRevision(t *testing.T) {
	tbl := Compile(5, smallStore.kvs(nil), nil, CompileOptions{Now: t0})
	next := tbl.WithRevision(9)
	if next.Revision() != 9 || tbl.Revision() != 5 {
		t.Errorf("revisions %d %d", next.Revision(), tbl.Revision())
	}
	b, _ := tbl.JSON(t0)
	stale, _, err := LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	fresh := stale.WithRevision(9)
	if fresh.Stale() || !stale.Stale() {
		t.Errorf("stale %v -> %v", stale.Stale(), fresh.Stale())
	}
	if d, _ := fresh.Resolve("PL", "k", t0); slices.Contains(d.Degraded, "stale-table") {
		t.Errorf("confirmed table still degraded: %v", d.Degraded)
	}
}
