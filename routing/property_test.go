package routing

import (
	"fmt"
	"maps"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/quick"
	"time"
)

// world is a random routing prefix as an agent may see it: not validated
// (dangling pools, missing fallbacks, cycles, country routes with pools of
// the wrong residency, missing _default), with random pool states (status,
// health checks with and without live instances) and overrides.
type world struct {
	s     store
	revs  map[string]int64
	start time.Time
}

var (
	worldResidencies = []string{"eu", "eu", "eu", "us", "apac", "uk", "global"}
	worldStatuses    = []string{StatusActive, StatusActive, StatusActive, StatusDraining, StatusDown}
	worldClasses     = []string{"eu", "eu", "uk", "global", "apac"}
)

// Generate implements quick.Generator.
func (world) Generate(r *rand.Rand, size int) reflect.Value {
	w := world{s: store{}, revs: map[string]int64{}, start: t0.Add(-time.Duration(r.Intn(20)) * time.Second)}
	nPools := 1 + r.Intn(10)
	pools := []string{"ghost"} // never defined: a dangling target
	for i := 0; i < nPools; i++ {
		id := fmt.Sprintf("p%d", i)
		pools = append(pools, id)
		hc := r.Intn(3) == 0
		w.s[PoolKey(id)] = fmt.Sprintf(`{"host":"edge-%d.example.net:443","residency":%q,"status":%q,"health_check":%v,"attrs":{"shard":%q}}`,
			i, worldResidencies[r.Intn(len(worldResidencies))], worldStatuses[r.Intn(len(worldStatuses))], hc, id)
		if hc && r.Intn(2) == 0 {
			w.s[HealthKey(id, "i-1")] = `{"addr":"10.0.0.1:443"}`
		}
	}
	if r.Intn(5) > 0 {
		classes := map[string][]string{"eu": EEA()}
		if r.Intn(2) == 0 {
			classes["uk"] = []string{"GB"}
			classes["apac"] = []string{"JP", "KR", "SG"}
		}
		w.s[PolicyKey] = fmt.Sprintf(`{"classes":%s,"unknown_country_class":%q}`, mustJSON(classes), worldClasses[r.Intn(len(worldClasses))])
	}
	groups := []string{"g0", "g1", "g2", "eu-general", "missing-group", DefaultRoute, "PL", "US"}
	names := []string{DefaultRoute, "g0", "g1", "g2", "eu-general"}
	for i := 0; i < 3+r.Intn(25); i++ {
		names = append(names, Countries()[r.Intn(len(Countries()))])
	}
	names = append(names, EEA()[r.Intn(len(EEA()))], "GB", "US", "PL")
	for _, name := range names {
		if r.Intn(10) == 0 {
			continue // routes/_default, a group, a country may be missing
		}
		w.s[RouteKey(name)] = randomRoute(r, name, pools, groups)
	}
	for i := 0; i < r.Intn(3); i++ {
		id := fmt.Sprintf("o%d", i)
		w.s[OverrideKey(id)] = fmt.Sprintf(`{"route":%q,"targets":%s,"attrs":{"boost":%q}}`, names[r.Intn(len(names))], randomTargets(r, pools), id)
		w.revs[OverrideKey(id)] = int64(2 + r.Intn(10))
	}
	return reflect.ValueOf(w)
}

func randomRoute(r *rand.Rand, name string, pools, groups []string) string {
	var fb []string
	for i := 0; i < r.Intn(3); i++ {
		if f := groups[r.Intn(len(groups))]; f != name && !slices.Contains(fb, f) {
			fb = append(fb, f)
		}
	}
	aff := AffinitySticky
	if r.Intn(4) == 0 {
		aff = AffinityRandom
	}
	targets := "[]"
	if r.Intn(6) > 0 {
		targets = randomTargets(r, pools)
	}
	return fmt.Sprintf(`{"targets":%s,"fallback":%s,"affinity":%q,"attrs":{"route":%q}}`, targets, mustJSON(fb), aff, name)
}

// randomTargets returns 1..4 distinct pools with weights summing to 100,
// some of them 0.
func randomTargets(r *rand.Rand, pools []string) string {
	n := 1 + r.Intn(min(4, len(pools)))
	perm := r.Perm(len(pools))[:n]
	ws := make([]int, n)
	left := 100
	for i := 0; i < n-1; i++ {
		ws[i] = r.Intn(left + 1)
		if r.Intn(5) == 0 {
			ws[i] = 0
		}
		left -= ws[i]
	}
	ws[n-1] = left
	var ts []Target
	for i, p := range perm {
		ts = append(ts, Target{Pool: pools[p], Weight: ws[i]})
	}
	return mustJSON(ts)
}

func mustJSON(v any) string {
	b, err := EncodeValue(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (w world) String() string {
	var b strings.Builder
	for _, k := range sortedKeys(w.s) {
		fmt.Fprintf(&b, "%s = %s\n", k, w.s[k])
	}
	return b.String()
}

func (w world) compile() *Table {
	return Compile(1, w.s.kvs(w.revs), nil, CompileOptions{Now: t0, Start: w.start, Grace: 10 * time.Second})
}

// unknownHeaders are raw country headers that normalize to the unknown
// country; the properties check them besides every ISO code.
var unknownHeaders = []string{"", "XX", "T1", "eu", "Poland"}

// checkViewer checks one viewer of one table against the invariants and a
// reference resolver; it returns a description of the first violation.
func checkViewer(tbl *Table, header string, keys []string) string {
	cc := NormalizeCountry(header)
	class := tbl.ClassOf(cc)
	e := tbl.Effective(cc)
	for _, c := range e.Candidates {
		p, ok := tbl.Pool(c.Pool)
		switch {
		case !ok:
			return fmt.Sprintf("%s: candidate %s does not exist", cc, c.Pool)
		case class != "" && p.Residency != class:
			return fmt.Sprintf("RESIDENCY: %s (class %s) has candidate %s (residency %s)", cc, class, c.Pool, p.Residency)
		case p.Status != StatusActive || !tbl.Healthy(c.Pool, t0) || c.Weight <= 0:
			return fmt.Sprintf("%s: candidate %s is not eligible (%s, healthy %v, weight %d)", cc, c.Pool, p.Status, tbl.Healthy(c.Pool, t0), c.Weight)
		}
	}
	route, depth, cands := referenceResolve(tbl, cc, class)
	var got []string
	for _, c := range e.Candidates {
		got = append(got, c.Pool)
	}
	if e.Route != route || (route != "" && e.FallbackDepth != depth) || !slices.Equal(got, cands) {
		return fmt.Sprintf("%s: route %q depth %d candidates %v; reference says %q %d %v", cc, e.Route, e.FallbackDepth, got, route, depth, cands)
	}
	for _, key := range keys {
		d, err := tbl.Resolve(header, key, t0)
		if err != nil {
			if len(cands) > 0 {
				return fmt.Sprintf("%s/%q: NoRoute with candidates %v", cc, key, cands)
			}
			continue
		}
		p, _ := tbl.Pool(d.Pool)
		if class != "" && p.Residency != class {
			return fmt.Sprintf("RESIDENCY: %s/%q (class %s) sent to %s (residency %s)", cc, key, class, d.Pool, p.Residency)
		}
		if !slices.Contains(cands, d.Pool) || d.Route != route {
			return fmt.Sprintf("%s/%q: decision %s/%s not among %s/%v", cc, key, d.Route, d.Pool, route, cands)
		}
	}
	return ""
}

// referenceResolve is docs/resolution.md (steps 3 and 4) written out plainly: the route chain
// (own route, its fallbacks depth-first, _default; each name once) and the
// candidates of the first route that has any.
func referenceResolve(tbl *Table, cc, class string) (string, int, []string) {
	var chain []string
	var visit func(string)
	visit = func(name string) {
		if slices.Contains(chain, name) {
			return
		}
		chain = append(chain, name)
		if r, ok := tbl.Route(name); ok {
			for _, f := range r.Fallback {
				visit(f)
			}
		}
	}
	if cc != Unknown {
		visit(cc)
	}
	if !slices.Contains(chain, DefaultRoute) {
		chain = append(chain, DefaultRoute)
	}
	for depth, name := range chain {
		r, ok := tbl.Route(name)
		if !ok {
			continue
		}
		var cands []string
		for _, t := range r.Targets {
			p, ok := tbl.Pool(t.Pool)
			if ok && t.Weight > 0 && (class == "" || p.Residency == class) && p.Status == StatusActive && tbl.Healthy(t.Pool, t0) {
				cands = append(cands, t.Pool)
			}
		}
		if len(cands) > 0 {
			slices.Sort(cands)
			return name, depth, cands
		}
	}
	return "", 0, nil
}

// TestPropertyResidency (property a): over random unvalidated configs and
// pool states, no viewer of any country is ever given a pool outside its
// residency class, NoRoute happens only when no eligible pool exists, and
// every decision matches the reference resolver. At least 100,000
// (config, pool states, country) triples are checked.
func TestPropertyResidency(t *testing.T) {
	worlds := 1200
	if testing.Short() {
		worlds = 400 // 400 × 254 viewers: still over 100,000
	}
	viewers := 0
	check := func(w world) bool {
		tbl := w.compile()
		for _, cc := range append(slices.Clone(Countries()), unknownHeaders...) {
			if msg := checkViewer(tbl, cc, []string{"", "viewer-1", cc + "-key"}); msg != "" {
				t.Log(msg)
				return false
			}
			viewers++
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: worlds, Rand: rand.New(rand.NewSource(1))}); err != nil {
		t.Fatal(err)
	}
	if viewers < 100000 {
		t.Fatalf("only %d viewers checked", viewers)
	}
	t.Logf("%d worlds, %d (config, pool states, country) triples", worlds, viewers)
}

// TestPropertyNonEUPoolsDoNotAffectEU (property a, second half): adding
// non-EU pools, and targets to them on the routes of non-EU countries,
// never changes any decision of an EU-class viewer.
func TestPropertyNonEUPoolsDoNotAffectEU(t *testing.T) {
	worlds := 600
	if testing.Short() {
		worlds = 200
	}
	keys := []string{"viewer-1", "viewer-2", "0d6c3b2e-8f0a-4a8e-9d5e-2b1f7c9a4e61"}
	check := func(w world, seed int64) bool {
		before := w.compile()
		after := w.withNonEUPools(rand.New(rand.NewSource(seed)), before)
		tblAfter := after.compile()
		for _, cc := range append(slices.Clone(Countries()), unknownHeaders...) {
			n := NormalizeCountry(cc)
			if before.ClassOf(n) != "eu" {
				continue
			}
			e1, e2 := before.Effective(n), tblAfter.Effective(n)
			if !reflect.DeepEqual(e1, e2) {
				t.Logf("%s: effective changed:\n%+v\n%+v\nadded:\n%v", n, e1, e2, after)
				return false
			}
			for _, k := range keys {
				d1, err1 := before.Resolve(cc, k, t0)
				d2, err2 := tblAfter.Resolve(cc, k, t0)
				if e1.Affinity == AffinityRandom && len(e1.Candidates) > 1 {
					d1.Pool, d1.Host, d1.Attrs, d2.Pool, d2.Host, d2.Attrs = "", "", nil, "", "", nil
				}
				if err1 != err2 || !reflect.DeepEqual(d1, d2) {
					t.Logf("%s/%s: %+v %v -> %+v %v", n, k, d1, err1, d2, err2)
					return false
				}
			}
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: worlds, Rand: rand.New(rand.NewSource(2))}); err != nil {
		t.Fatal(err)
	}
}

// withNonEUPools returns w plus 1..5 pools of non-EU residency and, for
// some countries outside the eu class that no route falls back to, a route
// (new or replaced) using them.
func (w world) withNonEUPools(r *rand.Rand, tbl *Table) world {
	out := world{s: maps.Clone(w.s), revs: w.revs, start: w.start}
	var added []string
	for i := 0; i < 1+r.Intn(5); i++ {
		id := fmt.Sprintf("new-%d", i)
		res := []string{"us", "apac", "uk", "global"}[r.Intn(4)]
		out.s[PoolKey(id)] = fmt.Sprintf(`{"host":"new-%d.example.net","residency":%q}`, i, res)
		added = append(added, id)
	}
	referenced := map[string]bool{}
	for _, name := range tbl.RouteNames() {
		rt, _ := tbl.Route(name)
		for _, f := range rt.Fallback {
			referenced[f] = true
		}
	}
	for _, o := range tbl.Overrides() {
		referenced[o.Route] = true
	}
	for i := 0; i < 10; i++ {
		cc := Countries()[r.Intn(len(Countries()))]
		if tbl.ClassOf(cc) == "eu" || referenced[cc] {
			continue
		}
		out.s[RouteKey(cc)] = fmt.Sprintf(`{"targets":%s,"fallback":["g0"]}`, randomTargets(r, added))
	}
	return out
}

// stickyTable compiles a sticky route PL (and the same _default) over one
// EU pool per weight, the pool at index draining draining (-1: none), for
// properties (b) and (c).
func stickyTable(t *testing.T, weights []int, draining int) *Table {
	t.Helper()
	cfg := &Config{Pools: map[string]Pool{}, Routes: map[string]Route{}}
	var ts []Target
	for i, w := range weights {
		id := fmt.Sprintf("pool-%02d", i)
		p := Pool{Host: id + ".example.net", Residency: "eu", Status: StatusActive}
		if i == draining {
			p.Status = StatusDraining
		}
		cfg.Pools[id] = p
		ts = append(ts, Target{Pool: id, Weight: w})
	}
	cfg.Routes["PL"] = Route{Targets: ts, Affinity: AffinitySticky}
	cfg.Routes[DefaultRoute] = Route{Targets: ts, Affinity: AffinitySticky}
	if errs := Validate(cfg); len(errs) > 0 {
		t.Fatal(errs)
	}
	return compileCfg(t, cfg, CompileOptions{})
}

// randomWeights returns n >= 2 positive weights summing to 100.
func randomWeights(r *rand.Rand, n int) []int {
	cuts := r.Perm(99)[:n-1] // distinct cut points 0..98 -> parts >= 1
	slices.Sort(cuts)
	ws := make([]int, n)
	prev := 0
	for i, c := range cuts {
		ws[i] = c + 1 - prev
		prev = c + 1
	}
	ws[n-1] = 100 - prev
	return ws
}

// TestPropertyDrainMovesOnlyItsKeys (property b): draining one of N pools
// moves exactly the sticky keys that were on it (no other key moves), and
// the moved fraction equals its weight share within ±1 point over 100,000
// keys.
func TestPropertyDrainMovesOnlyItsKeys(t *testing.T) {
	const nKeys = 100000
	r := rand.New(rand.NewSource(3))
	trials := 8
	if testing.Short() {
		trials = 3
	}
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("viewer-%d-%d", i, r.Int63())
	}
	for trial := 0; trial < trials; trial++ {
		ws := randomWeights(r, 2+r.Intn(9))
		drain := r.Intn(len(ws))
		name := fmt.Sprintf("weights %v drain pool-%02d", ws, drain)
		before, after := stickyTable(t, ws, -1), stickyTable(t, ws, drain)
		drained := fmt.Sprintf("pool-%02d", drain)
		moved := 0
		for _, k := range keys {
			d1, err1 := before.Resolve("PL", k, t0)
			d2, err2 := after.Resolve("PL", k, t0)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: %v %v", name, err1, err2)
			}
			switch {
			case d1.Pool == drained:
				moved++
				if d2.Pool == drained {
					t.Fatalf("%s: key %q still on the drained pool", name, k)
				}
			case d1.Pool != d2.Pool:
				t.Fatalf("%s: key %q moved from %s to %s though its pool was not drained", name, k, d1.Pool, d2.Pool)
			}
		}
		share, want := float64(moved)/nKeys, float64(ws[drain])/100
		if math.Abs(share-want) > 0.01 {
			t.Errorf("%s: moved %.4f of keys, want its weight share %.2f ± 0.01", name, share, want)
		}
	}
}

// TestPropertyWeightsHonoured (property c): over 1,000,000 sticky keys
// every pool's share equals its weight within ±1 point.
func TestPropertyWeightsHonoured(t *testing.T) {
	nKeys := 1000000
	if testing.Short() {
		nKeys = 200000
	}
	r := rand.New(rand.NewSource(4))
	for _, ws := range [][]int{{70, 30}, {1, 99}, {50, 30, 20}, randomWeights(r, 7), {10, 10, 10, 10, 10, 10, 10, 10, 10, 10}} {
		tbl := stickyTable(t, ws, -1)
		count := map[string]int{}
		for i := 0; i < nKeys; i++ {
			d, err := tbl.Resolve("PL", "k"+itoa(i), t0)
			if err != nil {
				t.Fatal(err)
			}
			count[d.Pool]++
		}
		for i, w := range ws {
			share := float64(count[fmt.Sprintf("pool-%02d", i)]) / float64(nKeys)
			if math.Abs(share-float64(w)/100) > 0.01 {
				t.Errorf("weights %v: pool-%02d got %.4f of %d keys, want %.2f ± 0.01", ws, i, share, nKeys, float64(w)/100)
			}
		}
	}
}

func itoa(i int) string { return fmt.Sprint(i) }
