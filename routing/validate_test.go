package routing

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// baseConfig is a small valid config: two EU pools, one US pool, an EU
// group, a country route for PL and US, and a residency-safe _default.
func baseConfig() *Config {
	return &Config{
		Policy: PolicySection{Residency: &Residency{Classes: map[string][]string{"eu": EEA()}, UnknownCountryClass: "eu"}},
		Pools: map[string]Pool{
			"eu-central": {Host: "edge-fra-1.example.net:443", Residency: "eu", Status: StatusActive},
			"eu-west":    {Host: "edge-ams-1.example.net:443", Residency: "eu", Status: StatusActive},
			"us-east":    {Host: "10.0.0.7:8443", Residency: "us", Status: StatusActive},
		},
		Routes: map[string]Route{
			DefaultRoute: {Targets: tg("eu-central", 50, "us-east", 50)},
			"eu-general": {Targets: tg("eu-central", 60, "eu-west", 40), Fallback: []string{DefaultRoute}},
			"PL":         {Targets: tg("eu-central", 70, "eu-west", 30), Fallback: []string{"eu-general"}},
			"US":         {Targets: tg("us-east", 100)},
		},
	}
}

func setRoute(name string, r Route) func(*Config) {
	return func(c *Config) { c.Routes[name] = r }
}

func setPool(id string, p Pool) func(*Config) {
	return func(c *Config) { c.Pools[id] = p }
}

func errStrings(es Errors) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Error()
	}
	return out
}

func TestValidate(t *testing.T) {
	chain := func(c *Config) {
		// g0 -> g1 -> ... -> g9: nine hops from g0.
		for i := 0; i < 10; i++ {
			r := Route{Targets: tg("eu-central", 100)}
			if i < 9 {
				r.Fallback = []string{fmt.Sprintf("g%d", i+1)}
			}
			c.Routes[fmt.Sprintf("g%d", i)] = r
		}
	}
	cases := []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{name: "valid", change: func(*Config) {}},
		{name: "valid without policy uses the EEA default", change: func(c *Config) { c.Policy.Residency = nil }},
		{name: "valid fallback chain of exactly 8 hops", change: func(c *Config) { chain(c); delete(c.Routes, "g0") }},
		{name: "valid weight 0 target", change: setRoute("PL", Route{Targets: tg("eu-central", 100, "eu-west", 0)})},
		{name: "valid route without targets falls through", change: setRoute("DE", Route{Fallback: []string{"eu-general"}, Attrs: map[string]string{"lang": "de"}})},

		// Invariant 1: targets and weights.
		{name: "dangling target pool", change: setRoute("PL", Route{Targets: tg("eu-central", 70, "eu-centrl", 30)}),
			want: []string{"routes/PL: targets[1].pool: pool eu-centrl does not exist"}},
		{name: "weight over 100", change: setRoute("PL", Route{Targets: tg("eu-central", -30, "eu-west", 130)}),
			want: []string{"routes/PL: targets[0].weight: must be 0..100, got -30", "routes/PL: targets[1].weight: must be 0..100, got 130"}},
		{name: "weights not summing to 100", change: setRoute("PL", Route{Targets: tg("eu-central", 70, "eu-west", 20)}),
			want: []string{"routes/PL: targets: weights must sum to 100, got 90"}},
		{name: "pool listed twice", change: setRoute("PL", Route{Targets: tg("eu-central", 50, "eu-central", 50)}),
			want: []string{"routes/PL: targets[1].pool: pool eu-central listed twice"}},
		{name: "invalid target pool id", change: setRoute("PL", Route{Targets: tg("EU Central", 100)}),
			want: []string{`routes/PL: targets[0].pool: invalid pool id "EU Central"`}},

		// Invariant 2: _default and fallbacks.
		{name: "missing _default", change: func(c *Config) { delete(c.Routes, DefaultRoute) },
			want: []string{
				"routes/_default: missing: every config needs a _default route",
				"routes/_default: residency: countries AD, AE, AF, AG, AI, AL, AM, AO and 203 more (class (none)) can reach no allowed pool along _default",
				"routes/_default: residency: countries AT, AX, BE, BG, CY, CZ, DE, DK and 29 more (class eu) can reach no allowed pool along _default",
				"routes/eu-general: fallback[0]: route _default does not exist",
			}},
		{name: "fallback to missing route", change: setRoute("PL", Route{Targets: tg("eu-central", 100), Fallback: []string{"eu-genral"}}),
			want: []string{"routes/PL: fallback[0]: route eu-genral does not exist"}},
		{name: "fallback cycle", change: setRoute("eu-general", Route{Targets: tg("eu-central", 100), Fallback: []string{"PL"}}),
			want: []string{"routes/PL: fallback: cycle: PL → eu-general → PL"}},
		{name: "fallback to itself", change: setRoute("PL", Route{Targets: tg("eu-central", 100), Fallback: []string{"PL"}}),
			want: []string{"routes/PL: fallback: cycle: PL → PL", "routes/PL: fallback[0]: route falls back to itself"}},
		{name: "fallback listed twice", change: setRoute("PL", Route{Targets: tg("eu-central", 100), Fallback: []string{"eu-general", "eu-general"}}),
			want: []string{"routes/PL: fallback[1]: eu-general listed twice"}},
		{name: "fallback depth over 8", change: chain,
			want: []string{"routes/g0: fallback: chain is 9 hops deep, more than 8"}},
		{name: "fallback to invalid name", change: setRoute("PL", Route{Targets: tg("eu-central", 100), Fallback: []string{"EU General"}}),
			want: []string{`routes/PL: fallback[0]: invalid route name "EU General"`}},

		// Invariant 3: residency.
		{name: "residency violation on a country route", change: setRoute("PL", Route{Targets: tg("eu-central", 50, "us-east", 50)}),
			want: []string{"routes/PL: targets[1].pool: pool us-east has residency us, not allowed for PL (class eu: its pools are eu-central, eu-west)"}},
		{name: "residency violation even at weight 0", change: setRoute("PL", Route{Targets: tg("eu-central", 100, "us-east", 0)}),
			want: []string{"routes/PL: targets[1].pool: pool us-east has residency us, not allowed for PL (class eu: its pools are eu-central, eu-west)"}},
		{name: "groups may mix residencies", change: setRoute("eu-general", Route{Targets: tg("eu-central", 50, "us-east", 50), Fallback: []string{DefaultRoute}})},
		{name: "countries in no class may use any pool", change: setRoute("US", Route{Targets: tg("us-east", 50, "eu-west", 50)})},
		{name: "_default with only us pools strands EU and unknown viewers", change: setRoute(DefaultRoute, Route{Targets: tg("us-east", 100)}),
			want: []string{
				"routes/_default: residency: countries AT, AX, BE, BG, CY, CZ, DE, DK and 29 more (class eu) can reach no allowed pool along _default",
			}},
		{name: "country whose chain only reaches weight-0 allowed pools", change: func(c *Config) {
			c.Policy.Residency.Classes["ch"] = []string{"CH"}
			c.Pools["ch-zurich"] = Pool{Host: "edge-zrh-1.example.net", Residency: "ch", Status: StatusActive}
			c.Routes["alps"] = Route{Targets: tg("ch-zurich", 0, "eu-central", 100), Fallback: []string{DefaultRoute}}
			c.Routes["CH"] = Route{Fallback: []string{"alps"}}
		}, want: []string{
			"routes/CH: residency: country CH (class ch) can reach no allowed pool along CH → alps → _default",
		}},
		{name: "unknown country class with no pool", change: func(c *Config) { c.Policy.Residency.UnknownCountryClass = "global" },
			want: []string{"routes/_default: residency: country _unknown (class global) can reach no allowed pool along _default"}},
		{name: "policy country in two classes", change: func(c *Config) { c.Policy.Residency.Classes["nordic"] = []string{"NO", "SE"} },
			want: []string{"policy/residency: classes.nordic[0]: NO is already in class eu", "policy/residency: classes.nordic[1]: SE is already in class eu"}},
		{name: "policy bad country codes", change: func(c *Config) { c.Policy.Residency.Classes["eu"] = []string{"PL", "pl", "XX", "EU", "Poland"} },
			want: []string{
				`policy/residency: classes.eu[1]: "pl" is not an ISO 3166-1 alpha-2 code in upper case (did you mean PL? codes are upper case)`,
				`policy/residency: classes.eu[2]: "XX" is not an ISO 3166-1 alpha-2 code in upper case`,
				`policy/residency: classes.eu[3]: "EU" is not an ISO 3166-1 alpha-2 code in upper case (EU is not a country: list the member states, or leave policy/residency out for the built-in class eu)`,
				`policy/residency: classes.eu[4]: "Poland" is not an ISO 3166-1 alpha-2 code in upper case`,
			}},
		{name: "policy bad class names", change: func(c *Config) {
			c.Policy.Residency.Classes["EU"] = []string{"CH"}
			c.Policy.Residency.UnknownCountryClass = "Fail Closed"
		}, want: []string{
			`policy/residency: classes: class name "EU" must be a lower-case label`,
			`policy/residency: unknown_country_class: must be a lower-case label, got "Fail Closed"`,
		}},

		// Invariant 4: pools.
		{name: "pool empty host", change: setPool("eu-north", Pool{Residency: "eu", Status: StatusActive}),
			want: []string{"pools/eu-north: host: must not be empty"}},
		{name: "pool bad host", change: setPool("eu-north", Pool{Host: "https://edge-sto-1.example.net/", Residency: "eu"}),
			want: []string{`pools/eu-north: host: "https://edge-sto-1.example.net/" is a URL; want a host name or IP address (with an optional :port)`}},
		{name: "pool host with space", change: setPool("eu-north", Pool{Host: "edge sto", Residency: "eu"}),
			want: []string{`pools/eu-north: host: "edge sto" is not a host name or IP address (with an optional :port)`}},
		{name: "pool bad port", change: setPool("eu-north", Pool{Host: "edge-sto-1.example.net:99999", Residency: "eu"}),
			want: []string{`pools/eu-north: host: "edge-sto-1.example.net:99999": port must be 1..65535`}},
		{name: "pool ip host with port 0", change: setPool("eu-north", Pool{Host: "10.0.0.1:0", Residency: "eu"}),
			want: []string{`pools/eu-north: host: "10.0.0.1:0": port must be 1..65535`}},
		{name: "pool ipv6 host with port", change: setPool("eu-north", Pool{Host: "[2001:db8::1]:443", Residency: "eu"})},
		{name: "pool bad status", change: setPool("eu-north", Pool{Host: "h", Residency: "eu", Status: "paused"}),
			want: []string{`pools/eu-north: status: must be active, draining or down, got "paused"`}},
		{name: "pool empty residency", change: setPool("eu-north", Pool{Host: "h"}),
			want: []string{`pools/eu-north: residency: must be a non-empty lower-case label (eu, us, apac, global…), got ""`}},
		{name: "pool upper-case residency", change: setPool("eu-north", Pool{Host: "h", Residency: "EU"}),
			want: []string{`pools/eu-north: residency: must be a non-empty lower-case label (eu, us, apac, global…), got "EU"`}},
		{name: "pool bad region", change: setPool("eu-north", Pool{Host: "h", Residency: "eu", Region: "EU North"}),
			want: []string{`pools/eu-north: region: must be a lower-case label, got "EU North"`}},
		{name: "pool bad id", change: setPool("EU_North", Pool{Host: "h", Residency: "eu"}),
			want: []string{"pools/EU_North: invalid pool id (want lower-case letters, digits, '.', '_', '-')"}},
		{name: "pool empty attr name", change: setPool("eu-north", Pool{Host: "h", Residency: "eu", Attrs: map[string]string{"": "x"}}),
			want: []string{`pools/eu-north: attrs: attribute names must be 1..128 characters, got ""`}},

		// Invariant 5: names and sizes.
		{name: "route name not a country", change: setRoute("XX", Route{Targets: tg("eu-central", 100)}),
			want: []string{"routes/XX: invalid route name (want an ISO 3166-1 alpha-2 code in upper case, _default, or a lower-case group name)"}},
		{name: "route name mixed case", change: setRoute("Apac-General", Route{Targets: tg("eu-central", 100)}),
			want: []string{"routes/Apac-General: invalid route name (want an ISO 3166-1 alpha-2 code in upper case, _default, or a lower-case group name)"}},
		{name: "route name lower-case country", change: setRoute("de", Route{Targets: tg("eu-central", 100)}),
			want: []string{`routes/de: group name "de" spells the country DE: country routes are upper case (routes/DE)`}},
		{name: "route bad affinity", change: setRoute("US", Route{Targets: tg("us-east", 100), Affinity: "round-robin"}),
			want: []string{`routes/US: affinity: must be sticky or random, got "round-robin"`}},
		// Measured as Values writes the route: as given, without the
		// affinity normalize fills in.
		{name: "oversize value", change: setRoute("US", Route{Targets: tg("us-east", 100), Attrs: map[string]string{"blob": strings.Repeat("x", MaxValueSize)}}),
			want: []string{"routes/US: value is 65601 bytes, larger than the 65536-byte limit"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			tc.change(cfg)
			got := errStrings(Validate(cfg))
			if !slices.Equal(got, tc.want) {
				t.Errorf("Validate:\n got  %q\n want %q", got, tc.want)
			}
		})
	}
}

func TestValidateExampleFleet(t *testing.T) {
	if errs := Validate(exampleConfig(t)); len(errs) > 0 {
		t.Fatalf("examples/routing.yaml is refused:\n%v", errs)
	}
}

// TestValidateListsEveryError breaks one rule in each of several values
// and expects every problem back, sorted by key, not just the first.
func TestValidateListsEveryError(t *testing.T) {
	cfg := baseConfig()
	cfg.Pools["eu-west"] = Pool{Host: "", Residency: "EU", Status: "paused"}
	cfg.Routes["PL"] = Route{Targets: tg("eu-central", 70, "us-east", 20, "nowhere", 130), Fallback: []string{"eu-genral"}}
	cfg.Routes["US"] = Route{Targets: tg("us-east", 100), Affinity: "round-robin"}
	got := errStrings(Validate(cfg))
	want := []string{
		"pools/eu-west: host: must not be empty",
		`pools/eu-west: residency: must be a non-empty lower-case label (eu, us, apac, global…), got "EU"`,
		`pools/eu-west: status: must be active, draining or down, got "paused"`,
		"routes/PL: fallback[0]: route eu-genral does not exist",
		"routes/PL: targets: weights must sum to 100, got 220",
		"routes/PL: targets[1].pool: pool us-east has residency us, not allowed for PL (class eu: its pool is eu-central)",
		"routes/PL: targets[2].pool: pool nowhere does not exist",
		"routes/PL: targets[2].weight: must be 0..100, got 130",
		`routes/US: affinity: must be sticky or random, got "round-robin"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("Validate:\n got  %q\n want %q", got, want)
	}
}

func TestValidateDoesNotChangeTheConfig(t *testing.T) {
	cfg := baseConfig()
	cfg.Routes["US"] = Route{Targets: tg("us-east", 100)} // no affinity: normalize would fill it
	before, _ := cfg.Values()
	Validate(cfg)
	after, _ := cfg.Values()
	for k := range before {
		if string(before[k]) != string(after[k]) {
			t.Errorf("%s changed: %s -> %s", k, before[k], after[k])
		}
	}
}

// TestValidateMeasuresWrittenBytes: a config file's value is measured by
// the bytes regionctl writes for it, not by the file's JSON: 12,000 "&"
// (6 bytes each as written, \u0026) are refused saying why, while
// ValidateExceptSize, for a caller measuring bytes itself, passes them.
func TestValidateMeasuresWrittenBytes(t *testing.T) {
	cfg := baseConfig()
	p := cfg.Pools["eu-central"]
	p.Attrs = map[string]string{"x": strings.Repeat("&", 12000)}
	cfg.Pools["eu-central"] = p
	y, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	file, err := ParseConfig(y)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	vals, err := file.Values()
	if err != nil {
		t.Fatal(err)
	}
	n := len(vals[PoolKey("eu-central")])
	want := []string{fmt.Sprintf(`pools/eu-central: value is %d bytes (as regionctl writes it: each "&", "<" and ">" as \u0026, \u003c and \u003e, 6 bytes), larger than the 65536-byte limit`, n)}
	if got := errStrings(Validate(file)); n <= MaxValueSize || !slices.Equal(got, want) {
		t.Errorf("Validate of a %d-byte value:\n got  %q\n want %q", n, got, want)
	}
	if errs := ValidateExceptSize(file); len(errs) != 0 {
		t.Errorf("ValidateExceptSize: %v", errs)
	}
}

func TestValidateOverride(t *testing.T) {
	cfg := baseConfig()
	cases := []struct {
		name string
		id   string
		o    Override
		want []string
	}{
		{name: "valid boost", id: "kr-week", o: Override{Route: "PL", Targets: tg("eu-west", 100), Reason: "drain fra"}},
		{name: "valid attrs only", id: "x1", o: Override{Route: "eu-general", Attrs: map[string]string{"banner": "on"}}},
		{name: "missing route", id: "x1", o: Override{Route: "KR", Targets: tg("eu-west", 100)},
			want: []string{"overrides/x1: route: route KR does not exist"}},
		{name: "lower-case country", id: "x1", o: Override{Route: "pl", Targets: tg("eu-west", 100)},
			want: []string{"overrides/x1: route: route pl does not exist (country codes are upper case: PL)"}},
		{name: "dangling pool", id: "x1", o: Override{Route: "PL", Targets: tg("eu-wes", 100)},
			want: []string{"overrides/x1: targets[0].pool: pool eu-wes does not exist"}},
		{name: "residency", id: "x1", o: Override{Route: "PL", Targets: tg("us-east", 100)},
			want: []string{"overrides/x1: targets[0].pool: pool us-east has residency us, not allowed for PL (class eu: its pools are eu-central, eu-west)"}},
		{name: "empty", id: "x1", o: Override{Route: "PL"},
			want: []string{"overrides/x1: an override must set targets or attrs"}},
		{name: "bad weights", id: "x1", o: Override{Route: "PL", Targets: tg("eu-west", 101)},
			want: []string{"overrides/x1: targets: weights must sum to 100, got 101", "overrides/x1: targets[0].weight: must be 0..100, got 101"}},
		{name: "bad id", id: "bad id", o: Override{Route: "PL", Targets: tg("eu-west", 100)},
			want: []string{"overrides/bad id: invalid override id"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := errStrings(ValidateOverride(cfg, tc.id, tc.o))
			if !slices.Equal(got, tc.want) {
				t.Errorf("ValidateOverride:\n got  %q\n want %q", got, tc.want)
			}
		})
	}
	// A policy built in Go without a class list (no decoder normalized
	// it) is the built-in one: PL stays in class eu (the mutation review).
	bare := baseConfig()
	bare.Policy.Residency = &Residency{UnknownCountryClass: "eu"}
	if got := errStrings(ValidateOverride(bare, "x1", Override{Route: "PL", Targets: tg("us-east", 100)})); len(got) != 1 || !strings.Contains(got[0], "not allowed for PL (class eu:") {
		t.Errorf("ValidateOverride of a boost of PL to us-east under a policy without classes: %q; want the residency error", got)
	}
}

// TestResidencyGaps: a class that holds a member state but not its parts
// with codes of their own (RE for FR, AX for FI) is named, one line each;
// the built-in default and a class holding them are not.
func TestResidencyGaps(t *testing.T) {
	if g := ResidencyGaps(DefaultResidency()); g != nil {
		t.Errorf("built-in default: %v", g)
	}
	old := Residency{Classes: map[string][]string{"eu": strings.Fields("AT BE BG HR CY CZ DK EE FI FR DE GR HU IE IT LV LT LU MT NL PL PT RO SK SI ES SE IS LI NO")}}
	g := ResidencyGaps(old)
	if len(g) != 7 || !strings.HasPrefix(g[0], "AX (part of FI) is in no class while FI is in class eu") ||
		!strings.HasPrefix(g[5], "RE (part of FR) is in no class while FR is in class eu: its viewers may be sent to any pool; add RE to class eu") {
		t.Errorf("the EEA without its territories: %q", g)
	}
	if g := ResidencyGaps(Residency{Classes: map[string][]string{"apac": {"KR", "JP"}}}); g != nil {
		t.Errorf("no EEA country in a class: %v", g)
	}
	all := strings.Fields("AT BE BG HR CY CZ DK EE FI FR DE GR HU IE IT LV LT LU MT NL PL PT RO SK SI ES SE IS LI NO AX GF GP MF MQ RE YT")
	if g := ResidencyGaps(Residency{Classes: map[string][]string{"eu": append(slices.Clone(all[:9]), "AX"), "fr": {"FR", "RE", "GP", "MQ", "GF", "YT", "MF"}, "rest": all[10:30]}}); g != nil {
		t.Errorf("the EEA across classes, territories with their state: %v", g)
	}
	// A class copied short (the docs' "eu: [AT, BE, …]" without the
	// "…"), a member state dropped from the full class: one line naming
	// the states left out and the class holding the others.
	for _, tc := range []struct {
		classes map[string][]string
		want    string
	}{
		{map[string][]string{"eu": {"AT", "BE"}, "apac": {"KR"}},
			"28 of the 30 EEA member states are in no class (BG, CY, CZ, DE, DK, EE, ES, FI, FR, GR, HR, HU, IE, IS, IT, LI, LT, LU, LV, MT, NL, NO, PL, PT, RO, SE, SI, SK) while class eu holds the others: their viewers may be sent to pools of any residency"},
		{map[string][]string{"eu": slices.DeleteFunc(slices.Clone(all), func(cc string) bool { return cc == "SE" })},
			"1 of the 30 EEA member states are in no class (SE) while class eu holds the others"},
		{map[string][]string{"eu": all[:15], "eea-north": all[15:26]},
			"4 of the 30 EEA member states are in no class (IS, LI, NO, SE) while classes eea-north, eu hold the others"},
	} {
		g := ResidencyGaps(Residency{Classes: tc.classes})
		if len(g) == 0 || !strings.HasPrefix(g[0], tc.want) {
			t.Errorf("%v: %q, want a first line %q", tc.classes, g, tc.want)
		}
	}
}

// TestCountryHints: a refused country code says which code was meant.
func TestCountryHints(t *testing.T) {
	for in, want := range map[string]string{
		"at": " (did you mean AT? codes are upper case)",
		"UK": " (the United Kingdom's code is GB)",
		"uk": " (the United Kingdom's code is GB)",
		"EL": " (Greece's code is GR; EL is the EU's abbreviation)",
		"XX": "",
		"DE": "",
	} {
		if got := CountryHint(in); got != want {
			t.Errorf("CountryHint(%q) = %q, want %q", in, got, want)
		}
	}
	_, err := ParseKey("routes/UK")
	if err == nil || !strings.HasSuffix(err.Error(), "(the United Kingdom's code is GB)") {
		t.Errorf("routes/UK: %v", err)
	}
}

// TestWarningsNameFallbacksNeverServing: a fallback of a country's chain
// with no pool of the country's class is named (residency passes over all
// of it); _default, countries in no class and fallbacks with such a pool
// are not.
func TestWarningsNameFallbacksNeverServing(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
pools:
  eu-fra: {host: fra.example.net, residency: eu, status: active}
  us-iad: {host: iad.example.net, residency: us, status: active}
routes:
  _default: {targets: [{pool: us-iad, weight: 100}]}
  americas: {targets: [{pool: us-iad, weight: 100}], fallback: [mixed]}
  mixed: {targets: [{pool: us-iad, weight: 50}, {pool: eu-fra, weight: 50}]}
  PL: {targets: [{pool: eu-fra, weight: 100}], fallback: [americas, _default]}
  US: {targets: [{pool: us-iad, weight: 100}], fallback: [americas]}
`))
	if err != nil {
		t.Fatal(err)
	}
	dup, err := ParseConfig([]byte(`
policy:
  residency:
    classes:
      eu: [AT, BE, BG, HR, CY, CZ, DK, EE, FI, FR, DE, GR, HU, IE, IT, LV, LT, LU, MT, NL, PL, PT, RO, SK, SI, ES, SE, IS, LI, NO, AX, GF, GP, MF, MQ, RE, YT, DE]
    unknown_country_class: eu
pools:
  eu-fra: {host: fra.example.net, residency: eu, status: active}
routes:
  _default: {targets: [{pool: eu-fra, weight: 100}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Warnings(dup), []string{"policy/residency: DE is listed twice in class eu"}; !slices.Equal(got, want) {
		t.Errorf("Warnings of a class listing DE twice: %q, want %q", got, want)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"routes/PL: fallback americas can never serve PL (class eu): none of its pools (us-iad) is of class eu"}
	if got := Warnings(cfg); !slices.Equal(got, want) {
		t.Errorf("Warnings: %q, want %q", got, want)
	}
	if got := Warnings(exampleConfig(t)); len(got) != 0 {
		t.Errorf("the example fleet: %q", got)
	}
}

// TestWarningsNameAPolicyHoldingNoOne: a class that lists no countries (an
// empty list, a YAML null from a template that rendered nothing) and a
// policy that puts no EEA member state in a class while pools have
// residency eu are named (the residency review: validate said "valid"
// with residency off for the whole EEA); a policy without eu pools that
// puts no EEA state in a class says nothing of it.
func TestWarningsNameAPolicyHoldingNoOne(t *testing.T) {
	const empty = "policy/residency: class eu lists no countries"
	const noEEA = "policy/residency: no EEA member state is in a class while pools have residency eu (eu-fra)"
	const euPool = "  eu-fra: {host: fra.example.net, residency: eu, status: active}\n"
	for _, tc := range []struct {
		name, classes, pools string
		want                 []string
	}{
		{"an empty list", "{eu: [], us: [US]}", euPool, []string{empty, noEEA}},
		{"a null", "{eu: null, us: [US]}", euPool, []string{empty, noEEA}},
		{"no class", "{}", euPool, []string{noEEA}},
		{"the EEA in class eu", "{eu: [DE], us: [US]}", euPool, nil},
		{"no eu pool", "{us: [US]}", "", nil},
	} {
		cfg, err := ParseConfig([]byte("policy:\n  residency:\n    classes: " + tc.classes + "\npools:\n" + tc.pools +
			"  us-iad: {host: iad.example.net, residency: us, status: active}\nroutes:\n  _default: {targets: [{pool: us-iad, weight: 100}]}\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, w := range Warnings(cfg) {
			for _, prefix := range []string{empty, noEEA} {
				if strings.HasPrefix(w, prefix) {
					got = append(got, prefix)
				}
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: warnings %q, want the ones beginning %q", tc.name, Warnings(cfg), tc.want)
		}
	}
}

// TestResidencyErrorNamesAllowedPools: a route's target refused for its
// country's class names the pools the route may use instead: the first
// three by id and how many more, or that there is none.
func TestResidencyErrorNamesAllowedPools(t *testing.T) {
	cfg := baseConfig()
	for _, id := range []string{"eu-z", "eu-a", "eu-m", "eu-b"} {
		cfg.Pools[id] = Pool{Host: id + ".example", Residency: "eu", Status: "active"}
	}
	cfg.Routes["PL"] = Route{Targets: tg("us-east", 100)}
	want := "routes/PL: targets[0].pool: pool us-east has residency us, not allowed for PL (class eu: its pools are eu-a, eu-b, eu-central and 3 more)"
	if got := errStrings(Validate(cfg)); !slices.Contains(got, want) {
		t.Errorf("Validate with 6 eu pools:\n got  %q\n want %q among them", got, want)
	}
	for id, p := range cfg.Pools {
		if p.Residency == "eu" {
			p.Residency = "global"
			cfg.Pools[id] = p
		}
	}
	want = "routes/PL: targets[0].pool: pool us-east has residency us, not allowed for PL (class eu: no pool has residency eu)"
	if got := errStrings(Validate(cfg)); !slices.Contains(got, want) {
		t.Errorf("Validate with no eu pool:\n got  %q\n want %q among them", got, want)
	}
}
