package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// baseConfig is a small valid fleet the refusal cases start from: an EU
// pool, a US pool, PL and US routes, _default on the EU pool.
const baseConfig = `
policy:
  residency: {classes: {eu: [PL, DE]}, unknown_country_class: eu}
pools:
  eu-central: {host: edge-fra-1.example.net:443, region: eu-central, residency: eu, status: active}
  us-east: {host: edge-iad-1.example.net, residency: us}
routes:
  _default: {targets: [{pool: eu-central, weight: 100}]}
  PL: {targets: [{pool: eu-central, weight: 100}], fallback: [_default]}
  US: {targets: [{pool: us-east, weight: 100}]}
`

// chain returns n lower-case groups each falling back to the next.
func chain(n int) string {
	var b strings.Builder
	for i := range n {
		next := "_default"
		if i < n-1 {
			next = fmt.Sprintf("g%d", i+1)
		}
		fmt.Fprintf(&b, "  g%d: {targets: [{pool: eu-central, weight: 100}], fallback: [%s]}\n", i, next)
	}
	return b.String()
}

// invalidConfigs are crafted configs, each with fragments its refusal
// must carry (the key, then what is wrong). pruneOnly cases remove
// something, which only a pruning apply (or validate) sees.
var invalidConfigs = []struct {
	name, yaml string
	want       []string
	pruneOnly  bool
}{
	{name: "residency direct", yaml: strings.Replace(baseConfig, "PL: {targets: [{pool: eu-central", "PL: {targets: [{pool: us-east", 1),
		want: []string{"REFUSED routes/PL: ", "us-east", "residency us", "not allowed", "class eu"}},
	{name: "residency via _default", yaml: strings.Replace(baseConfig, "_default: {targets: [{pool: eu-central", "_default: {targets: [{pool: us-east", 1),
		want: []string{"REFUSED routes/_default: ", "can reach no allowed pool"}},
	{name: "dangling pool", yaml: strings.Replace(baseConfig, "US: {targets: [{pool: us-east", "US: {targets: [{pool: us-nowhere", 1),
		want: []string{"REFUSED routes/US: ", "us-nowhere", "does not exist"}},
	{name: "weights sum 90", yaml: strings.Replace(baseConfig, "PL: {targets: [{pool: eu-central, weight: 100}]", "PL: {targets: [{pool: eu-central, weight: 90}]", 1),
		want: []string{"REFUSED routes/PL: ", "sum to 100, got 90"}},
	{name: "weight over 100", yaml: strings.Replace(baseConfig, "US: {targets: [{pool: us-east, weight: 100}]", "US: {targets: [{pool: us-east, weight: 130}, {pool: eu-central, weight: -30}]", 1),
		want: []string{"REFUSED routes/US: targets[0].weight: ", "0..100, got 130"}},
	{name: "fallback cycle", yaml: baseConfig + "  ring-a: {targets: [{pool: eu-central, weight: 100}], fallback: [ring-b]}\n  ring-b: {targets: [{pool: eu-central, weight: 100}], fallback: [ring-a]}\n",
		want: []string{"REFUSED routes/ring-a", "cycle", "ring-a → ring-b → ring-a"}},
	{name: "fallback deeper than 8", yaml: baseConfig + chain(10), want: []string{"REFUSED routes/g0", "deep", "8"}},
	{name: "missing _default", pruneOnly: true,
		yaml: strings.Replace(strings.Replace(baseConfig, "  _default: {targets: [{pool: eu-central, weight: 100}]}\n", "", 1), "fallback: [_default]", "fallback: []", 1),
		want: []string{"REFUSED routes/_default: ", "missing"}},
	{name: "bad country code", yaml: baseConfig + "  ZZ: {targets: [{pool: eu-central, weight: 100}]}\n", want: []string{"REFUSED ", "ZZ", "route name"}},
	{name: "bad status enum", yaml: strings.Replace(baseConfig, "status: active", "status: paused", 1),
		want: []string{"REFUSED pools/eu-central: status: ", "active, draining or down", "paused"}},
	{name: "bad affinity enum", yaml: strings.Replace(baseConfig, "fallback: [_default]}", "fallback: [_default], affinity: sometimes}", 1),
		want: []string{"REFUSED routes/PL: affinity: ", "sticky or random", "sometimes"}},
	{name: "oversize value", yaml: baseConfig + "  DE: {targets: [{pool: eu-central, weight: 100}], attrs: {blob: " + strings.Repeat("x", 70000) + "}}\n",
		want: []string{"REFUSED routes/DE: ", "65536-byte limit"}},
	{name: "malformed YAML", yaml: "pools: {eu-central: [unclosed\n", want: []string{"REFUSED ", "yaml"}},
	{name: "unknown field", yaml: strings.Replace(baseConfig, "region: eu-central", "regoin: eu-central", 1),
		want: []string{"REFUSED pools/eu-central: regoin: ", "unknown field"}},
	{name: "empty host", yaml: strings.Replace(baseConfig, "host: edge-iad-1.example.net", "host: \"\"", 1),
		want: []string{"REFUSED pools/us-east: host: ", "empty"}},
	{name: "bad port", yaml: strings.Replace(baseConfig, "edge-fra-1.example.net:443", "edge-fra-1.example.net:99999", 1),
		want: []string{"REFUSED pools/eu-central: host: ", "port"}},
	{name: "upper-case residency", yaml: strings.Replace(baseConfig, "residency: us}", "residency: US}", 1),
		want: []string{"REFUSED pools/us-east: residency: ", "lower-case"}},
	{name: "fallback to missing route", yaml: strings.Replace(baseConfig, "fallback: [_default]", "fallback: [eu-general]", 1),
		want: []string{"REFUSED routes/PL: fallback", "eu-general", "does not exist"}},
	{name: "pool listed twice", yaml: strings.Replace(baseConfig, "PL: {targets: [{pool: eu-central, weight: 100}]", "PL: {targets: [{pool: eu-central, weight: 50}, {pool: eu-central, weight: 50}]", 1),
		want: []string{"REFUSED routes/PL: targets[1].pool: ", "twice"}},
	{name: "bad pool id", yaml: baseConfig + "  DE: {targets: [{pool: Bad_Pool, weight: 100}]}\n", want: []string{"REFUSED routes/DE: ", "Bad_Pool"}},
	{name: "bad country in policy", yaml: strings.Replace(baseConfig, "eu: [PL, DE]", "eu: [PL, DE, XX]", 1),
		want: []string{"REFUSED policy/residency: classes.eu[2]: ", "XX", "ISO 3166-1"}},
	{name: "country in two classes", yaml: strings.Replace(baseConfig, "eu: [PL, DE]", "eu: [PL, DE], us: [US, PL]", 1),
		want: []string{"REFUSED policy/residency: ", "PL", "already in class"}},
	{name: "unknown section", yaml: baseConfig + "poolz: {}\n", want: []string{"REFUSED ", "poolz", "unknown top-level section"}},
	{name: "falls back to itself", yaml: strings.Replace(baseConfig, "fallback: [_default]", "fallback: [PL]", 1),
		want: []string{"REFUSED routes/PL: fallback[0]: ", "itself"}},
	{name: "weight not a number", yaml: strings.Replace(baseConfig, "weight: 100}], fallback", "weight: seventy}], fallback", 1),
		want: []string{"REFUSED routes/PL: ", "weight", "integer"}},
	{name: "empty file", yaml: "\n", want: []string{"REFUSED ", "empty"}},
	{name: "unknown country class invalid", yaml: strings.Replace(baseConfig, "unknown_country_class: eu", "unknown_country_class: EU", 1),
		want: []string{"REFUSED policy/residency: unknown_country_class: ", "lower-case"}},
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestRefusedConfigs applies each crafted invalid config (and validates
// it offline): exit 1, the right message, and etcd untouched.
func TestRefusedConfigs(t *testing.T) {
	t.Parallel()
	if len(invalidConfigs) < 20 {
		t.Fatalf("only %d crafted configs", len(invalidConfigs))
	}
	e := newEnv(t)
	base := writeFile(t, "base.yaml", baseConfig)
	e.must(ExitOK, "apply", "-f", base, "--reason", "base", "--allow-residency-change") // class eu narrower than the built-in one
	for _, tc := range invalidConfigs {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "bad.yaml", tc.yaml)
			rev, n := e.fingerprint()
			runs := [][]string{{"apply", "-f", path, "--prune", "--reason", "bad"}, {"validate", "-f", path}}
			if !tc.pruneOnly {
				runs = append(runs, []string{"apply", "-f", path})
			}
			for _, args := range runs {
				r := e.run(args...)
				if r.code != ExitRefused || !containsAll(r.stderr, tc.want) {
					t.Errorf("regionctl %s: want exit 1 and %q, got %s", strings.Join(args, " "), tc.want, r)
				}
				// A write says nothing was written; validate, a read, does not.
				if wrote := strings.Contains(r.stderr, "; nothing was written\n"); wrote != (args[0] == "apply") {
					t.Errorf("regionctl %s: 'nothing was written' said: %v; want it from apply alone: %s", strings.Join(args, " "), wrote, r)
				}
			}
			if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
				t.Fatalf("etcd changed: newest revision %d → %d, keys %d → %d", rev, rev2, n, n2)
			}
		})
	}
	if got := e.get(e.ks.Epoch()); got != "1" {
		t.Fatalf("epoch = %s after refusals, want 1", got)
	}
}

// TestRefusedVerbs checks refusals of the single-object verbs.
func TestRefusedVerbs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"route", "set", "PL", "--target", "us-east=100"}, []string{"REFUSED routes/PL: ", "us-east", "residency us", "class eu"}},
		{[]string{"route", "set", "PL", "--target", "eu-central=70", "--target", "eu-west=20"}, []string{"REFUSED routes/PL: ", "sum to 100, got 90"}},
		{[]string{"pool", "rm", "kr-music"}, []string{"REFUSED routes/KR: ", "kr-music", "does not exist"}},
		{[]string{"pool", "set", "eu-west", "--status", "paused"}, []string{"REFUSED pools/eu-west: status: ", "paused"}},
		{[]string{"route", "rm", "eu-general"}, []string{"REFUSED routes/PL: fallback", "eu-general", "does not exist"}},
		{[]string{"route", "rm", "_default"}, []string{"REFUSED routes/_default: ", "missing"}},
		{[]string{"pool", "drain", "nope"}, []string{"REFUSED pools/nope: pool does not exist (pools: apac-singapore, "}},
		{[]string{"pool", "drain", "eu-centrl"}, []string{"REFUSED pools/eu-centrl: pool does not exist; did you mean eu-central?"}},
		{[]string{"boost", "eu-generl", "--target", "eu-west=100", "--ttl", "1h"}, []string{"route: route eu-generl does not exist; did you mean eu-general?"}},
		{[]string{"route", "set", "PL", "--fallback", "eu-genral"}, []string{"REFUSED routes/PL: fallback[0]: route eu-genral does not exist; did you mean eu-general?"}},
		{[]string{"route", "set", "DE", "--target", "eu-centrl=100"}, []string{"REFUSED routes/DE: targets[0].pool: pool eu-centrl does not exist; did you mean eu-central?"}},
		{[]string{"boost", "PL", "--target", "eu-west=50,eu-centrl=50", "--ttl", "1h"}, []string{"targets[1].pool: pool eu-centrl does not exist; did you mean eu-central?"}},
		// A flag value of the right form the rules refuse is refused (1),
		// as in a file; one of the wrong form is a usage error (2).
		{[]string{"route", "set", "PL", "--target", "eu-central=130"}, []string{"REFUSED routes/PL: targets[0].weight: must be 0..100, got 130"}},
		{[]string{"pool", "set", "eu-west", "--status", "drained"}, []string{`REFUSED pools/eu-west: status: must be active, draining or down, got "drained"; did you mean draining?`}},
		{[]string{"boost", "kr", "--target", "kr-music=100", "--ttl", "1h"}, []string{"route kr does not exist (country codes are upper case: KR)"}},
		{[]string{"boost", "PL", "--target", "us-east=100", "--ttl", "1h"}, []string{"REFUSED overrides/", "us-east", "residency us", "class eu"}},
		{[]string{"boost", "XY", "--target", "eu-west=100", "--ttl", "1h"}, []string{"REFUSED overrides/", "XY"}},
		{[]string{"pool", "drain", "eu-central"}, []string{"REFUSED effect: ", "no eligible pool", "pool-draining:eu-central", "--force"}},
		{[]string{"boost", "cancel", "nope"}, []string{"REFUSED overrides/nope: ", "no such live boost"}},
		// A route's name: its live boosts are named.
		{[]string{"boost", "cancel", "KR"}, []string{"REFUSED overrides/KR: no such live boost: KR is a route, and cancel takes a boost id; its live boost(s): kr-week (regionctl boost cancel ID)"}},
		{[]string{"boost", "extend", "KR", "--ttl", "2h"}, []string{"REFUSED overrides/KR: no such live boost: KR is a route, and extend takes a boost id; its live boost(s): kr-week (regionctl boost extend ID)"}},
	}
	// With eu-west drained, draining eu-central too would leave EEA countries
	// without a route of their own, and unknown viewers, with no pool.
	e.must(ExitOK, "pool", "drain", "eu-west", "--reason", "first of two")
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--id", "kr-week")
	rev, n := e.fingerprint()
	for _, tc := range cases {
		r := e.run(tc.args...)
		if r.code != ExitRefused || !containsAll(r.stderr, tc.want) {
			t.Errorf("regionctl %s: want exit 1 and %q, got %s", strings.Join(tc.args, " "), tc.want, r)
		}
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatalf("etcd changed: newest revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}
	// A refused write still shows what it proposed, on stderr, with -o
	// json too: stdout holds only what was written.
	for _, extra := range [][]string{{"--dry-run"}, {"--reason=x"}, {"-o", "json"}} {
		r := e.must(ExitRefused, append([]string{"pool", "drain", "eu-central"}, extra...)...)
		if r.stdout != "" || !strings.HasPrefix(r.stderr, "PROPOSED pool eu-central: status active→draining\nREFUSED ") {
			t.Fatalf("refused drain (%s): %s; want the proposal on stderr, before the refusal, and nothing on stdout", extra, r)
		}
	}
	// --force lets an operator drain the last EU pool on purpose, and
	// still says, on stderr, what it does: in the dry run an operator
	// checks before forcing, from REGIONCTL_FORCE too (a variable left
	// set in a shell), and in the write.
	forcedWarning := []string{"regionctl: warning: forced (--force): ", "no eligible pool", "pool-draining:eu-central"}
	r := e.must(ExitOK, "pool", "drain", "eu-central", "--force", "--dry-run")
	if !containsAll(r.stderr, forcedWarning) || !strings.Contains(r.stdout, "dry run") {
		t.Fatalf("forced dry run: %s; want the countries left with no pool named", r)
	}
	e.env = map[string]string{"REGIONCTL_FORCE": "true"}
	r = e.must(ExitOK, "pool", "drain", "eu-central", "--dry-run")
	if !strings.Contains(r.stderr, "regionctl: warning: forced (REGIONCTL_FORCE set in the environment): ") || !strings.Contains(r.stderr, "no eligible pool") {
		t.Fatalf("dry run forced by REGIONCTL_FORCE: %s; want the warning naming the variable", r)
	}
	e.env = nil
	r = e.must(ExitOK, "pool", "drain", "eu-central", "--force", "--reason", "maintenance, EU degraded knowingly", "-o", "json")
	var out struct{ Forced string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !strings.Contains(out.Forced, "pool-draining:eu-central") ||
		!containsAll(r.stderr, forcedWarning) {
		t.Fatalf("forced drain: %s (%v); want the effect in stderr and in the JSON's forced", r, err)
	}
	if !strings.Contains(e.must(ExitOK, "get", "pools").stdout, "draining") {
		t.Fatal("the forced drain is not in etcd")
	}
	// A forced write that leaves every country a pool says nothing.
	r = e.must(ExitOK, "pool", "undrain", "eu-west", "--force", "--reason", "back")
	if len(otherWarnings(r.stderr)) > 0 {
		t.Fatalf("a forced undrain warned: %s", r)
	}
}

// TestCountriesWithoutAPoolAlreadyDoNotRefuse: a write is refused for the
// countries it leaves without an eligible pool, not for those that had
// none before it (a forced drain of every EU pool): an unrelated write
// then goes through without --force (the mutation review: no test held
// it).
func TestCountriesWithoutAPoolAlreadyDoNotRefuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	for _, p := range []string{"eu-central", "eu-west", "eu-north"} {
		e.must(ExitOK, "pool", "drain", p, "--force", "--reason", "EU edges down")
	}
	if r := e.must(ExitRefused, "pool", "drain", "us-east", "--dry-run"); !strings.Contains(r.stderr, "no eligible pool") {
		t.Fatalf("drain of us-east: %s; want refused, naming the countries it leaves without a pool (the set-up's check)", r)
	}
	if r := e.must(ExitOK, "pool", "set", "us-east", "--host", "edge-iad-2.example.net:443", "--residency", "us", "--reason", "new host"); strings.Contains(r.stderr, "no eligible pool") {
		t.Errorf("a write that leaves no country without a pool, beside EU countries that had none before: %s", r)
	}
}
