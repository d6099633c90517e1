package routing

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

func TestNormalizeCountry(t *testing.T) {
	cases := []struct{ in, want string }{
		{"PL", "PL"}, {"pl", "PL"}, {" PL ", "PL"}, {"\tpL\r\n", "PL"}, {"NO", "NO"}, {"no", "NO"},
		{"", Unknown}, {"  ", Unknown}, {"XX", Unknown}, {"T1", Unknown}, {"EU", Unknown}, {"UK", Unknown},
		{"XK", Unknown}, {"P", Unknown}, {"POL", Unknown}, {"P L", Unknown}, {"Pł", Unknown}, {"_unknown", Unknown},
		{"ＰＬ", Unknown}, {"\x00PL", Unknown},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%q", tc.in), func(t *testing.T) {
			if got := NormalizeCountry(tc.in); got != tc.want {
				t.Errorf("NormalizeCountry(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() { NormalizeCountry(" pl ") }); n != 0 {
		t.Errorf("NormalizeCountry allocates %v times", n)
	}
}

func TestCountries(t *testing.T) {
	ccs := Countries()
	if len(ccs) != 249 {
		t.Errorf("%d ISO 3166-1 alpha-2 codes, want 249", len(ccs))
	}
	if !slices.IsSorted(ccs) {
		t.Errorf("Countries() not sorted")
	}
	for _, cc := range ccs {
		if !IsCountry(cc) || NormalizeCountry(strings.ToLower(cc)) != cc {
			t.Errorf("%s does not round-trip", cc)
		}
	}
	eea := EEA()
	if len(eea) != 37 {
		t.Errorf("the built-in eu class has %d members, want 37 (EU27 + IS, LI, NO + AX, GF, GP, MF, MQ, RE, YT)", len(eea))
	}
	for terr, state := range euTerritories {
		if !slices.Contains(eea, terr) || !slices.Contains(eea, state) {
			t.Errorf("the built-in eu class lacks %s or its member state %s", terr, state)
		}
	}
	for _, cc := range eea {
		if !IsCountry(cc) {
			t.Errorf("EEA member %s is not a country", cc)
		}
	}
	for _, cc := range []string{"HU", "NO", "IS", "LI", "HR", "CY"} {
		if !slices.Contains(eea, cc) {
			t.Errorf("EEA lacks %s", cc)
		}
	}
	for _, cc := range []string{"GB", "CH", "XX", "EU", "UK", "XK"} {
		if slices.Contains(eea, cc) || (IsCountry(cc) != (cc == "GB" || cc == "CH")) {
			t.Errorf("%s misclassified", cc)
		}
	}
}

// reasonStore is the routing prefix of the reason-code cases: every pool
// state in one place. It is compiled without validation, as an agent would.
var reasonStore = store{
	"policy/residency":  `{"classes":{"eu":["PL","DE","FR","IT","ES","SE"]},"unknown_country_class":"eu"}`,
	"pools/fra":         `{"host":"edge-fra-1.example.net","residency":"eu","attrs":{"shard":"eu-1"}}`,
	"pools/ams":         `{"host":"edge-ams-1.example.net","residency":"eu","status":"draining"}`,
	"pools/mad":         `{"host":"edge-mad-1.example.net","residency":"eu","status":"down"}`,
	"pools/mil":         `{"host":"edge-mil-1.example.net","residency":"eu","health_check":true}`,
	"pools/iad":         `{"host":"edge-iad-1.example.net","residency":"us"}`,
	"pools/dfw":         `{"host":"edge-dfw-1.example.net","residency":"us","status":"down"}`,
	"routes/_default":   `{"targets":[{"pool":"iad","weight":100}]}`,
	"routes/PL":         `{"targets":[{"pool":"fra","weight":100}]}`,
	"routes/DE":         `{"targets":[{"pool":"gone","weight":50},{"pool":"fra","weight":50}]}`,
	"routes/FR":         `{"targets":[{"pool":"ams","weight":100}],"fallback":["eu-general"]}`,
	"routes/ES":         `{"targets":[{"pool":"mad","weight":100}],"fallback":["eu-missing","eu-general"]}`,
	"routes/IT":         `{"targets":[{"pool":"mil","weight":100}]}`,
	"routes/CH":         `{"targets":[{"pool":"mad","weight":60},{"pool":"ams","weight":40}]}`,
	"routes/eu-general": `{"targets":[{"pool":"fra","weight":100}]}`,
	"routes/US":         `{"targets":[{"pool":"iad","weight":100}]}`,
	"routes/SE":         `{"targets":[{"pool":"dfw","weight":50},{"pool":"fra","weight":50}]}`,
}

func TestResolveReasons(t *testing.T) {
	// mil has a health check and no health key: unhealthy from the start.
	tbl := Compile(3, reasonStore.kvs(nil), nil, CompileOptions{Now: t0, Start: t0.Add(-time.Hour), Grace: 5 * time.Second})
	cases := []struct {
		name    string
		country string
		route   string
		pool    string
		depth   int
		reasons []string
	}{
		{name: "healthy own route", country: "PL", route: "PL", pool: "fra"},
		{name: "no class may use any pool", country: "US", route: "US", pool: "iad"},
		{name: "dangling pool", country: "DE", route: "DE", pool: "fra", reasons: []string{"dangling-pool:gone"}},
		{name: "draining pool falls back", country: "FR", route: "eu-general", pool: "fra", depth: 1, reasons: []string{"pool-draining:ams"}},
		{name: "down pool and missing fallback", country: "ES", route: "eu-general", pool: "fra", depth: 2,
			reasons: []string{"pool-down:mad", "no-route:eu-missing"}},
		{name: "unhealthy pool, residency-blocked default", country: "IT",
			reasons: []string{"pool-unhealthy:mil", "residency-blocked:iad"}},
		{name: "country in no class without a route", country: "NL", route: "_default", pool: "iad", depth: 1},
		{name: "class-less country passes down and draining pools", country: "CH", route: "_default", pool: "iad", depth: 1,
			reasons: []string{"pool-down:mad", "pool-draining:ams"}},
		{name: "country without a route uses _default", country: "BR", route: "_default", pool: "iad", depth: 1},
		{name: "unknown country is EU and blocked", country: "XX",
			reasons: []string{"residency-blocked:iad"}},
		{name: "padded lower-case country", country: "pl ", route: "PL", pool: "fra"},
		// Residency is tested first: a down pool of another class is
		// blocked, whatever its state (resolution.md's order).
		{name: "down pool of another class is residency-blocked", country: "SE", route: "SE", pool: "fra",
			reasons: []string{"residency-blocked:dfw"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := tbl.Resolve(tc.country, "viewer-1", t0)
			if tc.pool == "" {
				if err != ErrNoRoute {
					t.Fatalf("want NoRoute, got %+v, %v", d, err)
				}
			} else if err != nil {
				t.Fatalf("Resolve: %v (%+v)", err, d)
			}
			if d.Route != tc.route || d.Pool != tc.pool || d.FallbackDepth != tc.depth {
				t.Errorf("got route %q pool %q depth %d, want %q %q %d", d.Route, d.Pool, d.FallbackDepth, tc.route, tc.pool, tc.depth)
			}
			if want := tc.reasons; !slices.Equal(d.Degraded, want) && !(len(want) == 0 && len(d.Degraded) == 0) {
				t.Errorf("degraded %q, want %q", d.Degraded, want)
			}
			if d.Revision != 3 || d.Country != NormalizeCountry(tc.country) {
				t.Errorf("revision %d country %q", d.Revision, d.Country)
			}
		})
	}
}

// TestResolveNoRouteReasons: NoRoute names the viewer's missing route
// (no-route:<CC>) and every pool passed over.
func TestResolveNoRouteReasons(t *testing.T) {
	s := reasonStore.with("policy/residency", `{"classes":{"eu":["PL","DE","FR","IT","ES","NL"]}}`)
	tbl := Compile(3, s.kvs(nil), nil, CompileOptions{Now: t0})
	d, err := tbl.Resolve("NL", "", t0)
	if err != ErrNoRoute || !slices.Equal(d.Degraded, []string{"no-route:NL", "residency-blocked:iad"}) || d.Pool != "" {
		t.Errorf("NL: %+v, %v", d, err)
	}
	// All of _default down: a class-less country without a route too.
	s = s.with("pools/iad", `{"host":"edge-iad-1.example.net","residency":"us","status":"down"}`)
	tbl = Compile(3, s.kvs(nil), nil, CompileOptions{Now: t0})
	d, err = tbl.Resolve("BR", "", t0)
	if err != ErrNoRoute || !slices.Equal(d.Degraded, []string{"no-route:BR", "pool-down:iad"}) {
		t.Errorf("BR: %+v, %v", d, err)
	}
	d, err = tbl.Resolve("AR", "", t0)
	if err != ErrNoRoute || !slices.Equal(d.Degraded, []string{"no-route:AR", "pool-down:iad"}) {
		t.Errorf("AR: %+v, %v", d, err)
	}
}

func TestResolveStaleTable(t *testing.T) {
	tbl := Compile(3, reasonStore.kvs(nil), nil, CompileOptions{Now: t0})
	b, err := tbl.JSON(t0)
	if err != nil {
		t.Fatal(err)
	}
	stale, _, err := LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	d, err := stale.Resolve("PL", "k", t0)
	if err != nil || !slices.Equal(d.Degraded, []string{"stale-table"}) {
		t.Errorf("PL from a snapshot: %+v, %v", d, err)
	}
	d, _ = stale.Resolve("FR", "k", t0)
	if !slices.Equal(d.Degraded, []string{"pool-draining:ams", "stale-table"}) {
		t.Errorf("FR from a snapshot: %v", d.Degraded)
	}
}

// TestResolveWeightZero: a weight-0 target is listed but gets no traffic;
// a route whose only eligible targets have weight 0 is passed over.
func TestResolveWeightZero(t *testing.T) {
	s := reasonStore.
		with("routes/PL", `{"targets":[{"pool":"fra","weight":100},{"pool":"ams2","weight":0}],"fallback":["eu-general"]}`).
		with("pools/ams2", `{"host":"edge-ams-2.example.net","residency":"eu"}`).
		with("routes/DE", `{"targets":[{"pool":"ams2","weight":0},{"pool":"ams","weight":100}],"fallback":["eu-general"]}`)
	tbl := Compile(1, s.kvs(nil), nil, CompileOptions{Now: t0})
	for i := 0; i < 1000; i++ {
		if d, _ := tbl.Resolve("PL", fmt.Sprint(i), t0); d.Pool != "fra" {
			t.Fatalf("weight-0 pool got viewer %d", i)
		}
		if d, _ := tbl.Resolve("PL", "", t0); d.Pool != "fra" {
			t.Fatalf("weight-0 pool got a random viewer")
		}
	}
	d, err := tbl.Resolve("DE", "k", t0)
	if err != nil || d.Route != "eu-general" || d.FallbackDepth != 1 {
		t.Errorf("DE: %+v, %v", d, err)
	}
}

// TestResolveAttrsMergeOrder: attrs are the pool's, overlaid by each route
// from the winner back to the viewer's own route, which wins.
func TestResolveAttrsMergeOrder(t *testing.T) {
	s := store{
		"pools/fra":       `{"host":"h1","residency":"eu","status":"down","attrs":{"shard":"eu-1"}}`,
		"pools/ams":       `{"host":"h2","residency":"eu","attrs":{"shard":"eu-2","cdn":"cdn-eu","lang":"pool","tokenizer":"pool","layer":"pool"}}`,
		"routes/_default": `{"targets":[{"pool":"ams","weight":100}],"attrs":{"lang":"en","tokenizer":"unicode61","cron_minutes":"30","layer":"default"}}`,
		"routes/eu-general": `{"targets":[{"pool":"fra","weight":100}],"fallback":["_default"],` +
			`"attrs":{"tokenizer":"porter","cron_minutes":"20","layer":"group"}}`,
		"routes/PL": `{"targets":[{"pool":"fra","weight":100}],"fallback":["eu-general"],"attrs":{"lang":"pl","layer":"own"}}`,
	}
	tbl := Compile(1, s.kvs(nil), nil, CompileOptions{Now: t0})
	d, err := tbl.Resolve("PL", "k", t0)
	if err != nil || d.Route != DefaultRoute || d.FallbackDepth != 2 {
		t.Fatalf("PL: %+v, %v", d, err)
	}
	want := map[string]string{
		"shard": "eu-2", "cdn": "cdn-eu", // pool only
		"lang": "pl", "layer": "own", // own route over everything
		"tokenizer":    "porter", // group over _default and pool
		"cron_minutes": "20",     // group over _default
	}
	if !reflect.DeepEqual(d.Attrs, want) {
		t.Errorf("attrs %v\nwant  %v", d.Attrs, want)
	}
	if e := tbl.Effective("PL"); !reflect.DeepEqual(e.Attrs, map[string]string{"lang": "pl", "layer": "own", "tokenizer": "porter", "cron_minutes": "20"}) {
		t.Errorf("effective attrs (routes only) %v", e.Attrs)
	}
	// The example fleet: a KR viewer served by apac-general keeps KR's lang
	// and tokenizer.
	cfg := exampleConfig(t)
	ex := compileCfg(t, cfg, CompileOptions{Down: []string{"kr-music", "apac-tokyo"}})
	d, err = ex.Resolve("KR", "viewer-9", t0)
	if err != nil || d.Route != "apac-general" || d.Attrs["lang"] != "ko" || d.Attrs["tokenizer"] != "icu" || d.Attrs["cdn"] != "cdn-apac.example.net" {
		t.Errorf("KR: %+v, %v", d, err)
	}
}

// TestResolveExampleFleet pins a few decisions of examples/routing.yaml.
func TestResolveExampleFleet(t *testing.T) {
	tbl := compileCfg(t, exampleConfig(t), CompileOptions{})
	cases := []struct {
		country string
		route   string
		pools   []string
		depth   int
	}{
		{"PL", "PL", []string{"eu-central", "eu-west"}, 0},
		{"NO", "NO", []string{"eu-north"}, 0},
		{"HU", "_default", []string{"eu-central", "eu-west"}, 1},
		{"XX", "_default", []string{"eu-central", "eu-west"}, 0},
		{"", "_default", []string{"eu-central", "eu-west"}, 0},
		{"BR", "BR", []string{"latam-sao"}, 0},
		{"ZA", "_default", []string{"eu-central", "eu-west", "us-east"}, 1},
		{"GB", "GB", []string{"uk-london"}, 0},
	}
	for _, tc := range cases {
		e := tbl.Effective(NormalizeCountry(tc.country))
		var pools []string
		for _, c := range e.Candidates {
			pools = append(pools, c.Pool)
		}
		if e.Route != tc.route || !slices.Equal(pools, tc.pools) || e.FallbackDepth != tc.depth {
			t.Errorf("%q: route %s pools %v depth %d, want %s %v %d", tc.country, e.Route, pools, e.FallbackDepth, tc.route, tc.pools, tc.depth)
		}
	}
}

func TestExplain(t *testing.T) {
	tbl := Compile(3, reasonStore.with("overrides/o1", `{"route":"ES","attrs":{"x":"y"}}`).kvs(nil), nil,
		CompileOptions{Now: t0, Start: t0.Add(-time.Hour)})
	ex := tbl.Explain("es", "viewer-1", t0)
	got, _ := json.Marshal(ex)
	want := `{"country":"ES","class":"eu","decision":{"country":"ES","route":"eu-general","pool":"fra","host":"edge-fra-1.example.net",` +
		`"attrs":{"shard":"eu-1","x":"y"},"revision":3,"epoch":0,"fallback_depth":2,"degraded":["pool-down:mad","no-route:eu-missing"]},` +
		`"routes":[{"route":"ES","depth":0,"exists":true,"overrides":["o1"],"chosen":false,"pools":[{"pool":"mad","weight":100,"eligible":false,"reason":"pool-down:mad"}]},` +
		`{"route":"eu-missing","depth":1,"exists":false,"chosen":false,"pools":[]},` +
		`{"route":"eu-general","depth":2,"exists":true,"chosen":true,"pools":[{"pool":"fra","weight":100,"eligible":true}]}],` +
		`"pick":{"affinity":"sticky","method":"only"}}`
	if string(got) != want {
		t.Errorf("Explain:\n got  %s\n want %s", got, want)
	}
	ex = tbl.Explain("IT", "", t0)
	got, _ = json.Marshal(ex)
	want = `{"country":"IT","class":"eu","no_route":true,"reasons":["pool-unhealthy:mil","residency-blocked:iad"],` +
		`"routes":[{"route":"IT","depth":0,"exists":true,"chosen":false,"pools":[{"pool":"mil","weight":100,"eligible":false,"reason":"pool-unhealthy:mil"}]},` +
		`{"route":"_default","depth":1,"exists":true,"chosen":false,"pools":[{"pool":"iad","weight":100,"eligible":false,"reason":"residency-blocked:iad"}]}]}`
	if string(got) != want {
		t.Errorf("Explain NoRoute:\n got  %s\n want %s", got, want)
	}
	ex = tbl.Explain("T1", "", t0)
	if ex.Country != Unknown || ex.Class != "eu" || !ex.NoRoute || len(ex.Routes) != 1 || ex.Routes[0].Route != DefaultRoute {
		t.Errorf("Explain unknown: %+v", ex)
	}
}

// TestTableJSONRoundTrip: a table loaded from its own JSON resolves every
// country and key as the original did, marked stale.
func TestTableJSONRoundTrip(t *testing.T) {
	cfg := exampleConfig(t)
	p := cfg.Pools["eu-west"]
	p.Status = StatusDraining
	cfg.Pools["eu-west"] = p
	p = cfg.Pools["apac-tokyo"]
	p.HealthCheck = true
	p.Extra = Extra{"future": json.RawMessage(`{"x":1}`)}
	cfg.Pools["apac-tokyo"] = p
	tbl, err := CompileConfig(cfg, map[string]StoredOverride{"kr-week": {Override: Override{Route: "KR", Targets: tg("kr-music", 100), Attrs: map[string]string{"banner": "on"}}, ModRevision: 1}},
		CompileOptions{Now: t0, Start: t0.Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := tbl.JSON(t0)
	if err != nil {
		t.Fatal(err)
	}
	loaded, writtenAt, err := LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if !writtenAt.Equal(t0) || !loaded.Stale() || loaded.Revision() != tbl.Revision() || loaded.Epoch() != tbl.Epoch() {
		t.Errorf("loaded: written %v stale %v revision %d", writtenAt, loaded.Stale(), loaded.Revision())
	}
	if pt, _ := loaded.Pool("apac-tokyo"); string(pt.Extra["future"]) != `{"x":1}` {
		t.Errorf("unknown pool field lost: %v", pt.Extra)
	}
	keys := []string{"", "a", "viewer-1", "viewer-2", strings.Repeat("long", 50)}
	later := t0.Add(time.Hour) // the loaded table keeps health as written
	for _, cc := range append(slices.Clone(Countries()), "XX", "") {
		for _, k := range keys {
			d1, err1 := tbl.Resolve(cc, k, t0)
			d2, err2 := loaded.Resolve(cc, k, later)
			if k == "" && len(tbl.Effective(NormalizeCountry(cc)).Candidates) > 1 {
				d1.Pool, d1.Host, d1.Attrs, d2.Pool, d2.Host, d2.Attrs = "", "", nil, "", "", nil // random pick
			}
			want := append(slices.Clone(d1.Degraded), "stale-table")
			if err1 != err2 || d1.Route != d2.Route || d1.Pool != d2.Pool || d1.Host != d2.Host ||
				d1.FallbackDepth != d2.FallbackDepth || !reflect.DeepEqual(d1.Attrs, d2.Attrs) || !slices.Equal(d2.Degraded, want) {
				t.Fatalf("%q/%q:\n orig   %+v %v\n loaded %+v %v", cc, k, d1, err1, d2, err2)
			}
		}
	}
	// The JSON of the loaded table has the same effective entries.
	b2, err := loaded.JSON(t0)
	if err != nil {
		t.Fatal(err)
	}
	var j1, j2 struct {
		Effective map[string]*Effective `json:"effective"`
		Pools     map[string]json.RawMessage
		Routes    map[string]json.RawMessage
	}
	json.Unmarshal(b, &j1)
	json.Unmarshal(b2, &j2)
	if len(j1.Effective) != 250 || len(j2.Effective) != 250 {
		t.Errorf("effective entries %d %d, want every ISO code and _unknown", len(j1.Effective), len(j2.Effective))
	}
	if !reflect.DeepEqual(j1.Pools, j2.Pools) || !reflect.DeepEqual(j1.Routes, j2.Routes) {
		t.Errorf("pools or routes changed in the round trip")
	}
	for cc, e := range j1.Effective {
		e2 := j2.Effective[cc]
		if e.Route != e2.Route || !reflect.DeepEqual(e.Candidates, e2.Candidates) || !reflect.DeepEqual(e.Attrs, e2.Attrs) {
			t.Errorf("%s: %+v vs %+v", cc, e, e2)
		}
	}
}

func TestLoadTableJSONErrors(t *testing.T) {
	tbl := Compile(3, reasonStore.kvs(nil), nil, CompileOptions{Now: t0})
	good, _ := tbl.JSON(t0)
	cases := []struct{ name, from, to, want string }{
		{"bad status", `"status":"draining"`, `"status":"paused"`, `decode table: pools/ams: status: must be active, draining or down, got "paused"`},
		{"bad written_at", `"written_at":"2026`, `"written_at":"x2026`, "decode table: written_at:"},
		{"null route", `"PL":{"targets"`, `"PL":null,"x":{"targets"`, "decode table: route PL is null"},
		{"bad weights", `"PL":{"targets":[{"pool":"fra","weight":100}]`, `"PL":{"targets":[{"pool":"fra","weight":10}]`, "decode table: routes/PL: targets: weights must sum to 100, got 10"},
		{"missing healthy", `"healthy":true`, `"healthz":true`, "pool has no healthy field"},
		{"not JSON", `{`, `[`, "decode table: invalid character"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := strings.Replace(string(good), tc.from, tc.to, 1)
			if b == string(good) {
				t.Fatalf("test does not change the JSON")
			}
			if _, _, err := LoadTableJSON([]byte(b)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestStickyHashVectors pins the sticky hash of docs/resolution.md, step 5 to vectors
// computed independently with PHP 8.1+ (hash('xxh64', …)), so that any
// reader can check its implementation:
//
//	$hex = hash('xxh64', $key . "\0" . $pool);
//	$x = hexdec(substr($hex, 0, 14)) >> 3;      // h >> 11
//	$u = ($x + 0.5) / 2**53;  $score = -log($u) / $weight;
func TestStickyHashVectors(t *testing.T) {
	cases := []struct {
		key, pool string
		hex       string
		score70   float64
	}{
		{"abc", "eu-central", "51da5d8729db9a25", 0.016289323081256819},
		{"abc", "eu-west", "4433040801592665", 0.018896334757491935},
		{"abc", "us-east", "62900f2a53c72322", 0.013635489028030134},
		{"viewer-42", "eu-central", "32a5c8b0169cdbbf", 0.023146938959774252},
		{"viewer-42", "eu-west", "a77705ba38e011af", 0.0060629068777312018},
		{"viewer-42", "us-east", "58b97ac67ba40688", 0.015137729244877326},
		{"", "eu-central", "46578cc2724676a8", 0.018454407205025652},
		{"", "eu-west", "00781ce068b8e417", 0.090027479918169881},
		{"", "us-east", "05728357c697843e", 0.0550007759704687},
	}
	for _, tc := range cases {
		t.Run(tc.key+"/"+tc.pool, func(t *testing.T) {
			h := xxhash.Sum64String(tc.key + "\x00" + tc.pool)
			if got := fmt.Sprintf("%016x", h); got != tc.hex {
				t.Fatalf("xxh64 = %s, want %s", got, tc.hex)
			}
			var sk stickyKey
			sk.init(tc.key)
			if got := sk.sum(tc.pool); got != h {
				t.Errorf("stickyKey.sum = %016x, want %016x", got, h)
			}
			u := (float64(h>>11) + 0.5) / (1 << 53)
			want := -math.Log(u) / 70
			if got := StickyScore(tc.key, tc.pool, 70); got != want {
				t.Errorf("StickyScore = %.17g, want the formula's %.17g", got, want)
			}
			if got := StickyScore(tc.key, tc.pool, 70); math.Abs(got-tc.score70) > 1e-15*tc.score70 {
				t.Errorf("StickyScore = %.17g, PHP says %.17g", got, tc.score70)
			}
		})
	}
	// With weights 70/30 "abc" goes to the lower score.
	cs := []Candidate{{Pool: "eu-central", Weight: 70}, {Pool: "eu-west", Weight: 30}}
	s0, s1 := StickyScore("abc", "eu-central", 70), StickyScore("abc", "eu-west", 30)
	want := 0
	if s1 < s0 {
		want = 1
	}
	if got := PickSticky(cs, "abc"); got != want {
		t.Errorf("PickSticky = %d, want %d (scores %v %v)", got, want, s0, s1)
	}
}

// TestStickyKeySum checks the unrolled xxh64 of key + "\x00" + pool
// against the library over every length combination around its word and
// stripe boundaries.
func TestStickyKeySum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	randBytes := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return string(b)
	}
	n := 0
	for kl := 0; kl <= 140; kl++ {
		for pl := 0; pl <= 70; pl++ {
			key, pool := randBytes(kl), randBytes(pl)
			var s stickyKey
			s.init(key)
			want := xxhash.Sum64String(key + "\x00" + pool)
			if got := s.sum(pool); got != want {
				t.Fatalf("len %d+%d: %q %q: %x, want %x", kl, pl, key, pool, got, want)
			}
			if p := newPoolPad(pool); p != nil {
				if got := s.sumPadded(pool, p); got != want {
					t.Fatalf("padded, len %d+%d: %q %q: %x, want %x", kl, pl, key, pool, got, want)
				}
			}
			n++
		}
	}
}

// TestPickStickyExact: PickSticky (bounds first, logarithms only when
// needed) always picks the argmin of StickyScore, ties to the smaller pool.
func TestPickStickyExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	iters := 300000
	if testing.Short() {
		iters = 30000
	}
	for it := 0; it < iters; it++ {
		n := 1 + r.IntN(12)
		cs := make([]Candidate, n)
		for i := range cs {
			cs[i] = Candidate{Pool: fmt.Sprintf("p%02d", i), Weight: r.IntN(101)}
		}
		if it%3 == 0 { // equal weights make near ties more likely
			for i := range cs {
				cs[i].Weight = 10
			}
		}
		key := fmt.Sprintf("k%d", it)
		if it%50 == 0 {
			key = strings.Repeat("x", r.IntN(200)) + key
		}
		best, bestScore := -1, 0.0
		for i, c := range cs {
			if c.Weight <= 0 {
				continue
			}
			s := StickyScore(key, c.Pool, c.Weight)
			if best < 0 || s < bestScore || (s == bestScore && c.Pool < cs[best].Pool) {
				best, bestScore = i, s
			}
		}
		if best < 0 {
			best = 0
		}
		if got := PickSticky(cs, key); got != best {
			t.Fatalf("key %q, candidates %v: PickSticky %d, argmin %d", key, cs, got, best)
		}
	}
}

func TestPickStickyTies(t *testing.T) {
	// The same pool id twice has equal scores: the first (not smaller) one
	// is kept; distinct ids never tie in practice, so check the rule on the
	// exact path with identical ids and weights.
	cs := []Candidate{{Pool: "b", Weight: 50}, {Pool: "a", Weight: 0}, {Pool: "b", Weight: 50}}
	if got := PickSticky(cs, "k"); got != 0 && got != 2 {
		t.Errorf("PickSticky = %d", got)
	}
	if got := PickSticky([]Candidate{{Pool: "a", Weight: 0}, {Pool: "b", Weight: 0}}, "k"); got != 0 {
		t.Errorf("all weight 0: %d", got)
	}
	if got := negLogUpper(1); got != 0 || negLogLower(1) != 0 {
		t.Errorf("bounds at u=1: %v", got)
	}
	for _, u := range []float64{1e-16, 1e-9, 0.01, 0.3, 0.5, 0.7, 0.99, 1 - 1e-12} {
		l, h, x := negLogLower(u), negLogUpper(u), -math.Log(u)
		if l > x*(1+1e-15) || h < x*(1-1e-15) {
			t.Errorf("u=%v: bounds [%v, %v] miss -ln(u)=%v", u, l, h, x)
		}
	}
}

// TestResolveAllocs: Resolve allocates nothing, for sticky and random
// picks, long keys, unknown countries and NoRoute.
func TestResolveAllocs(t *testing.T) {
	tbl := compileCfg(t, bigConfig(50), CompileOptions{})
	noRoute := Compile(3, reasonStore.kvs(nil), nil, CompileOptions{Now: t0, Start: t0.Add(-time.Hour)})
	long := strings.Repeat("session-", 40)
	cases := []struct {
		name         string
		tbl          *Table
		country, key string
		wantErr      bool
	}{
		{"sticky", tbl, "PL", "viewer-123456", false},
		{"sticky uuid", tbl, "de", "0d6c3b2e-8f0a-4a8e-9d5e-2b1f7c9a4e61", false},
		{"sticky long key", tbl, "US", long, false},
		{"random", tbl, "JP", "", false},
		{"unknown country", tbl, "T1", "k", false},
		{"no route", noRoute, "IT", "k", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := testing.AllocsPerRun(1000, func() { _, err = tc.tbl.Resolve(tc.country, tc.key, t0) })
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v", err)
			}
			if n != 0 {
				t.Errorf("Resolve allocates %v times per call", n)
			}
		})
	}
}

// TestResolveRandomAffinity: random routes ignore the key, and weighted
// random follows the weights.
func TestResolveRandomAffinity(t *testing.T) {
	cfg := baseConfig()
	cfg.Routes["US"] = Route{Targets: tg("us-east", 100)}
	cfg.Routes["PL"] = Route{Targets: tg("eu-central", 80, "eu-west", 20), Affinity: AffinityRandom}
	tbl := compileCfg(t, cfg, CompileOptions{})
	const n = 200000
	count := map[string]int{}
	for i := 0; i < n; i++ {
		d, err := tbl.Resolve("PL", "same-key", t0)
		if err != nil {
			t.Fatal(err)
		}
		count[d.Pool]++
	}
	if share := float64(count["eu-west"]) / n; math.Abs(share-0.2) > 0.01 {
		t.Errorf("eu-west got %.3f of random viewers, want 0.20", share)
	}
}

// TestResolveConcurrent: a table is used by many goroutines at once, also
// past ValidUntil when Resolve computes entries on the fly (run with -race).
// Those entries keep the residency invariant: PL, DE and the unknown
// country are of class eu, and with fra unhealthy DE's chain ends at
// _default's iad (us): NoRoute, never iad.
func TestResolveConcurrent(t *testing.T) {
	prev := Compile(1, smallStore.kvs(nil), nil, CompileOptions{Now: t0})
	tbl := Compile(2, smallStore.with("health/fra/i-1", "").kvs(nil), prev, CompileOptions{Now: t0})
	past := tbl.ValidUntil().Add(time.Second)
	viewers := append(slices.Clone(Countries()), "XX")
	done := make(chan error)
	for g := 0; g < 4; g++ {
		go func(g int) {
			for i := 0; i < 500; i++ {
				cc := viewers[(g*500+i)%len(viewers)]
				d, err := tbl.Resolve(cc, fmt.Sprint(i), past)
				if err == nil && d.Pool == "fra" {
					done <- fmt.Errorf("%s went to the unhealthy pool fra", cc)
					return
				}
				if v := residencyViolation(tbl, cc, d, err); v != "" {
					done <- fmt.Errorf("between rebuilds: %s", v)
					return
				}
				tbl.Explain(cc, "", past)
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if d, err := tbl.Resolve("DE", "k", past); err == nil {
		t.Errorf("DE between rebuilds resolves to %+v, want NoRoute (fra unhealthy, iad not eu)", d)
	}
}

// TestExplainShowsThePick: the explanation says how its decision's pool
// was chosen: by the key's sticky scores (the decision's pool has the
// lowest), at random without a key, or as the only candidate.
func TestExplainShowsThePick(t *testing.T) {
	tbl := compileCfg(t, exampleConfig(t), CompileOptions{Now: t0})
	for _, key := range []string{"viewer-1", "viewer-2", "abc", "ąę"} {
		ex := tbl.Explain("PL", key, t0)
		p := ex.Pick
		if p == nil || p.Method != PickMethodSticky || p.Affinity != AffinitySticky || len(p.Scores) < 2 {
			t.Fatalf("PL %q: pick %+v, want sticky scores of its candidates", key, p)
		}
		best := ""
		for pool, s := range p.Scores {
			if best == "" || s < p.Scores[best] {
				best = pool
			}
		}
		if best != ex.Decision.Pool {
			t.Errorf("PL %q: lowest score %s (%v), decision %s", key, best, p.Scores, ex.Decision.Pool)
		}
	}
	if p := tbl.Explain("PL", "", t0).Pick; p == nil || p.Method != PickMethodRandom || p.Scores != nil {
		t.Errorf("PL without a key: pick %+v, want random", p)
	}
	if p := tbl.Explain("DE", "k", t0).Pick; p == nil || p.Method != PickMethodOnly {
		t.Errorf("DE (one target): pick %+v, want only", p)
	}
	down := compileCfg(t, exampleConfig(t), CompileOptions{Now: t0, Down: []string{"eu-central", "eu-west", "eu-north"}})
	if ex := down.Explain("DE", "k", t0); !ex.NoRoute || ex.Pick != nil {
		t.Errorf("DE with no route: %+v, want no pick", ex)
	}
}
