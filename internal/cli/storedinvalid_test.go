package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/regiond/regiond/routing"
)

// putHandEdit writes a value under <prefix>/routing/ around regionctl (a hand
// edit with etcdctl).
func (e *tenv) putHandEdit(rel, value string) {
	e.t.Helper()
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey(rel), value); err != nil {
		e.t.Fatal(err)
	}
}

// currentEpoch reads the current epoch.
func (e *tenv) currentEpoch() int64 {
	e.t.Helper()
	n, err := strconv.ParseInt(e.get(e.ks.Epoch()), 10, 64)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestRefusedWriteDiffIsNotARemoval: the diff a refused write prints on
// stdout shows the proposed value as invalid, with why, never as "removed"
// (a refusal must not read as a deletion) nor, for a boost, as a bare
// "put".
func TestRefusedWriteDiffIsNotARemoval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	rev, n := e.fingerprint()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"route", "set", "PL", "--target", "eu-central=50"}, "PL: invalid value: targets"},
		{[]string{"route", "set", "PL", "--affinity", "stickyy"}, "PL: invalid value: affinity: "},
		{[]string{"pool", "set", "eu-central", "--status", "bogus"}, "pool eu-central: invalid value: status: "},
		{[]string{"route", "set", "SK", "--target", "eu-central=50"}, "SK: invalid value: targets"},
		{[]string{"boost", "PL", "--id", "pl-1", "--target", "eu-central=50", "--ttl", "1h"}, "boost pl-1: invalid value: targets"},
	}
	for _, tc := range cases {
		for _, extra := range [][]string{nil, {"--dry-run"}} {
			args := append(append([]string{}, tc.args...), extra...)
			r := e.run(args...)
			line, _, _ := strings.Cut(r.stderr, "\nREFUSED ")
			line, ok := strings.CutPrefix(line, "PROPOSED ")
			if r.code != ExitRefused || r.stdout != "" || !ok || !strings.HasPrefix(line, tc.want) || strings.Contains(line, "\n") ||
				strings.Contains(line, "removed") || strings.Contains(line, "added") || strings.HasSuffix(line, ": put") {
				t.Errorf("regionctl %s: want exit 1 and the one diff line %q…, got %s", strings.Join(args, " "), tc.want, r)
			}
		}
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatalf("etcd changed: newest revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}
}

// TestInvalidStoredPool: a pool key whose stored value is invalid (a hand
// edit the agents skip) is not reported as absent: drain and a partial set
// are refused saying the value is invalid, why, and how to fix it (the
// fields still to give, or pool rm), without writing; a set giving every
// field replaces it, keeping what it held, and the diff and the audit trail
// call that a replaced invalid value, not an addition; rm deletes such a
// key, and that key alone, through the guarded write with its audit record.
func TestInvalidStoredPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	// eu-north is named by routes: with its value invalid regionctl's view
	// of the config is broken until it is repaired. junk is named by none.
	e.putHandEdit("pools/eu-north", `{"host":"edge-sto-1.example.net:443","region":"eu-north","residency":"eu","status":"maintenance",`+
		`"attrs":{"shard":"eu-3","cdn":"cdn-eu.example.net","max_rps":"300"}}`)
	e.putHandEdit("pools/junk", `{"host":"","residency":"eu","status":"active"}`)
	e.putHandEdit("pools/garbage", `not json`)
	rev, n := e.fingerprint()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"pool", "drain", "junk"}, []string{"REFUSED pools/junk: the stored value is invalid (host: ", "pool set junk giving --host, --residency, --status",
			"regionctl pool rm junk", `stored value: {"host":"","residency":"eu","status":"active"}`}},
		{[]string{"pool", "undrain", "eu-north"}, []string{"REFUSED pools/eu-north: the stored value is invalid (status: ", "maintenance", "regionctl pool rm eu-north"}},
		{[]string{"pool", "set", "eu-north", "--status", "active"}, []string{"REFUSED pools/eu-north: the stored value is invalid (status: ", "maintenance",
			"give also --host, --residency, --region, --attr cdn=cdn-eu.example.net, --attr max_rps=300, --attr shard=eu-3", "regionctl pool rm eu-north"}},
		// The repair that dropped region and attrs is refused.
		{[]string{"pool", "set", "eu-north", "--status", "active", "--host", "edge-sto-1.example.net:443", "--residency", "eu", "--unset-attr", "max_rps"},
			[]string{"REFUSED pools/eu-north: ", "give also --region, --attr cdn=cdn-eu.example.net, --attr shard=eu-3 to replace it whole"}},
		{[]string{"pool", "drain", "garbage"}, []string{"REFUSED pools/garbage: the stored value is invalid (", "giving --host, --residency,", "stored value: not json"}},
	} {
		r := e.run(tc.args...)
		if r.code != ExitRefused || !containsAll(r.stderr, tc.want) || strings.Contains(r.stderr, "does not exist") {
			t.Errorf("regionctl %s: want exit 1 and %q, got %s", strings.Join(tc.args, " "), tc.want, r)
		}
	}
	// A write of another pool: the routes naming eu-north read as naming
	// a pool that does not exist, and the invalid value is named beside
	// them, not junk's, which no route names (the drills: a forced drain was refused with the route
	// problems alone).
	r := e.run("pool", "drain", "eu-west", "--force", "--reason", "incident")
	if r.code != ExitRefused || !containsAll(r.stderr, []string{"pool eu-north does not exist",
		"REFUSED pools/eu-north: the stored value is invalid (status: ", "regionctl pool set eu-north with every field", "pool rm eu-north"}) ||
		strings.Contains(r.stderr, "REFUSED pools/junk") {
		t.Errorf("a drain of another pool with eu-north invalid: want exit 1 naming eu-north's stored value, got %s", r)
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatalf("etcd changed: newest revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}

	// Every field given: the value is replaced, the unset attr dropped on
	// purpose, the rest kept.
	r = e.must(ExitOK, "pool", "set", "eu-north", "--status", "active", "--host", "edge-sto-1.example.net:443", "--residency", "eu",
		"--region", "eu-north", "--attr", "shard=eu-3", "--attr", "cdn=cdn-eu.example.net", "--unset-attr", "max_rps", "--reason", "repair")
	wantLine := "pool eu-north: invalid value replaced (was: status: "
	if first := strings.SplitN(r.stdout, "\n", 2)[0]; !strings.HasPrefix(first, wantLine) || !strings.Contains(first, "now host edge-sto-1.example.net:443; residency eu; status active; region eu-north") {
		t.Errorf("repair diff %q, want %q…", first, wantLine)
	}
	var p routing.Pool
	mustJSON(t, e.get(e.ks.RoutingKey("pools/eu-north")), &p)
	if p.Region != "eu-north" || p.Status != "active" || p.Attrs["shard"] != "eu-3" || p.Attrs["cdn"] != "cdn-eu.example.net" || len(p.Attrs) != 2 {
		t.Errorf("repaired eu-north = %+v", p)
	}
	r = e.must(ExitOK, "history", strconv.FormatInt(e.currentEpoch(), 10))
	if !strings.Contains(r.stdout, wantLine) || strings.Contains(r.stdout, "added") {
		t.Errorf("history of the repair: want %q, got %s", wantLine, r)
	}

	// rm deletes the invalid key, and only it.
	before := e.currentEpoch()
	r = e.must(ExitOK, "pool", "rm", "junk", "--reason", "hand edit")
	if first := strings.SplitN(r.stdout, "\n", 2)[0]; !strings.HasPrefix(first, "pool junk: removed (the stored value was invalid: host: ") {
		t.Errorf("rm diff %q", first)
	}
	if v := e.get(e.ks.RoutingKey("pools/junk")); v != "" {
		t.Fatalf("pool rm junk left %s", v)
	}
	if v := e.get(e.ks.RoutingKey("pools/garbage")); v != "not json" {
		t.Fatalf("pool rm junk changed pools/garbage: %q", v)
	}
	if got := e.currentEpoch(); got != before+1 {
		t.Fatalf("epoch %d → %d, want one write", before, got)
	}
	rec := e.audit(before + 1)
	if len(rec.Changes) != 1 || rec.Changes[0].Key != "pools/junk" || rec.Changes[0].Op != "delete" ||
		!strings.Contains(string(rec.Changes[0].Before), `"host":""`) || string(rec.Changes[0].After) != "null" {
		t.Fatalf("audit record of pool rm junk: %+v", rec.Changes)
	}
	r = e.must(ExitOK, "pool", "rm", "garbage", "--dry-run")
	if first := strings.SplitN(r.stdout, "\n", 2)[0]; !strings.HasPrefix(first, "pool garbage: removed (the stored value was invalid: ") {
		t.Errorf("rm diff %q", first)
	}
	e.must(ExitOK, "pool", "rm", "garbage")
	if v := e.get(e.ks.RoutingKey("pools/garbage")); v != "" {
		t.Fatalf("pool rm garbage left %s", v)
	}
	e.must(ExitRefused, "pool", "rm", "garbage")

	// A key outside the grammar (an upper-case pool id): no id regionctl
	// can write, so the refusal says how to remove it.
	e.putHandEdit("pools/BAD", `{"host":"edge.example.net:443"}`)
	r = e.must(ExitRefused, "pool", "rm", "BAD")
	if want := "pool does not exist, but a key by this name is stored outside the key grammar"; !strings.Contains(r.stderr, want) ||
		!strings.Contains(r.stderr, "remove it with etcdctl del "+e.ks.RoutingKey("pools/BAD")+" (regionctl get skipped lists it)") {
		t.Errorf("pool rm of a key outside the grammar: %s", r)
	}

	// A key too long to print is named as the agents name it.
	long := "health/eu-west/" + strings.Repeat("k", 4000)
	e.putHandEdit(long, `{}`)
	r = e.must(ExitOK, "get", "skipped")
	if name := routing.ShortKey([]byte(long)); !strings.Contains(r.stdout, name) || len(r.stdout) > 2000 {
		t.Errorf("get skipped with a key of %d bytes: want it named %q\n%s", len(long), name, r)
	}
}

// TestInvalidStoredRoute: route set and route rm on a route key whose
// stored value is invalid, as for pools.
func TestInvalidStoredRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.putHandEdit("routes/nordics", `{"targets":[{"pool":"eu-north","weight":50}],"fallback":["eu-general"],"attrs":{"lang":"sv"}}`)
	e.putHandEdit("routes/junk-group", `{"targets":[{"pool":"eu-north","weight":100}],"affinity":"stickyy"}`)
	rev, n := e.fingerprint()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"route", "set", "nordics", "--attr", "lang=fi"}, []string{"REFUSED routes/nordics: the stored value is invalid (targets", "give also --target, --fallback (or --no-fallback) to replace it whole",
			"regionctl route rm nordics"}},
		{[]string{"route", "set", "nordics", "--target", "eu-north=100"}, []string{"REFUSED routes/nordics: ", "give also --fallback (or --no-fallback), --attr lang=sv "}},
	} {
		r := e.run(tc.args...)
		if r.code != ExitRefused || !containsAll(r.stderr, tc.want) || strings.Contains(r.stderr, "does not exist") {
			t.Errorf("regionctl %s: want exit 1 and %q, got %s", strings.Join(tc.args, " "), tc.want, r)
		}
	}
	// export leaves them out and says what apply --prune of its output
	// would do with them.
	x := e.must(ExitOK, "export")
	for _, k := range []string{"routes/nordics", "routes/junk-group"} {
		if !strings.Contains(x.stderr, "regionctl: warning: "+k+": the stored value does not decode, so it is not exported: apply --prune of this output deletes it") {
			t.Errorf("export: want a warning naming %s\n%s", k, x)
		}
	}
	if strings.Contains(x.stdout, "nordics") || strings.Contains(x.stdout, "junk-group") {
		t.Errorf("export holds an invalid value:\n%s", x.stdout)
	}
	// get routes alone (no SKIPPED part) says they are there but invalid,
	// with -o json too (on stderr); get pools has none to name.
	for _, out := range []string{"table", "json"} {
		g := e.must(ExitOK, "get", "routes", "-o", out)
		if !strings.Contains(g.stderr, "regionctl: warning: 2 stored value(s) of routes are invalid, so not shown") ||
			!strings.Contains(g.stderr, "routes/nordics (") || !strings.Contains(g.stderr, "routes/junk-group (") || strings.Contains(g.stdout, "nordics") {
			t.Errorf("get routes -o %s: want the invalid routes named on stderr, not shown\n%s", out, g)
		}
	}
	if g := e.must(ExitOK, "get", "pools"); strings.Contains(g.stderr, "invalid") {
		t.Errorf("get pools with only invalid routes: %s", g)
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatalf("etcd changed: newest revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}
	r := e.must(ExitOK, "route", "set", "nordics", "--target", "eu-north=100", "--no-fallback", "--attr", "lang=sv")
	if first := strings.SplitN(r.stdout, "\n", 2)[0]; !strings.HasPrefix(first, "nordics: invalid value replaced (was: targets") {
		t.Errorf("repair diff %q", first)
	}
	before := e.currentEpoch()
	r = e.must(ExitOK, "route", "rm", "junk-group")
	if first := strings.SplitN(r.stdout, "\n", 2)[0]; !strings.HasPrefix(first, "junk-group: removed (the stored value was invalid: affinity: ") {
		t.Errorf("rm diff %q", first)
	}
	if v := e.get(e.ks.RoutingKey("routes/junk-group")); v != "" {
		t.Fatalf("route rm left %s", v)
	}
	if rec := e.audit(before + 1); len(rec.Changes) != 1 || rec.Changes[0].Key != "routes/junk-group" || rec.Changes[0].Op != "delete" {
		t.Fatalf("audit record of route rm: %+v", rec.Changes)
	}
	var rt routing.Route
	mustJSON(t, e.get(e.ks.RoutingKey("routes/nordics")), &rt)
	if b, _ := json.Marshal(rt); string(b) != `{"targets":[{"pool":"eu-north","weight":100}],"attrs":{"lang":"sv"}}` {
		t.Errorf("routes/nordics = %s", b)
	}
}

// TestFallbackAndNoFallback: --fallback and --no-fallback together are a
// usage error naming both, and nothing is written.
func TestFallbackAndNoFallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	rev, n := e.fingerprint()
	for _, args := range [][]string{
		{"route", "set", "PL", "--no-fallback", "--fallback", "eu-general"},
		{"route", "set", "PL", "--fallback", "eu-general", "--no-fallback", "--dry-run"},
	} {
		r := e.run(args...)
		if r.code != ExitUsage || !containsAll(r.stderr, []string{"regionctl: ", "--fallback", "--no-fallback"}) {
			t.Errorf("regionctl %s: want exit 2 naming both flags, got %s", strings.Join(args, " "), r)
		}
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatalf("etcd changed: newest revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}
}

// TestRefusedPolicyKeepsItsLastGoodValue: a residency policy the agents
// refuse (a hand edit adding a lower-case code) leaves its last good value
// in force at the agents, and regionctl decides as they do (the residency
// review: it decided by the built-in policy, which has no class uk, so
// resolve and export kv sent GB's viewers to eu pools, and a drain of
// GB's last uk pool passed without --force): resolve and export kv keep GB
// in class uk, naming the value used; get policy does not show the
// built-in policy; a write is refused, naming the policy, until the policy
// is replaced (here by a rollback to the current epoch).
func TestRefusedPolicyKeepsItsLastGoodValue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	example, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	withUK := strings.Replace(string(example), "    unknown_country_class: eu", "      uk: [GB]\n    unknown_country_class: eu", 1)
	e.must(0, "apply", "-f", writeFile(t, "fleet.yaml", withUK), "--reason", "seed")
	epoch := e.currentEpoch()
	if r := e.run("pool", "drain", "uk-london", "--dry-run"); r.code != ExitRefused || !strings.Contains(r.stderr, "GB") {
		t.Fatalf("drain of GB's last uk pool, policy valid: want refused naming GB, got %s", r)
	}
	good := e.get(e.ks.RoutingKey(routing.PolicyKey))
	e.putHandEdit(routing.PolicyKey, strings.Replace(good, `"YT"]`, `"YT","ch"]`, 1))

	r := e.run("pool", "drain", "uk-london")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "policy/residency: the stored residency policy is refused by the agents") ||
		!strings.Contains(r.stderr, fmt.Sprintf("regionctl rollback %d", epoch)) {
		t.Fatalf("drain with the policy refused: want refused naming the policy and the rollback that replaces it, got %s", r)
	}
	r = e.must(0, "resolve", "GB", "--key", "a")
	if !strings.HasPrefix(r.stdout, "GB (class uk) → uk-london") || !strings.Contains(r.stderr, "policy/residency: refused (") ||
		!strings.Contains(r.stderr, "decided with its last good value, of revision") {
		t.Fatalf("resolve GB with the policy refused: want class uk and uk-london, the last good value named, got %s", r)
	}
	type candidate struct {
		Pool string `json:"pool"`
	}
	var kv map[string]struct {
		Entry struct {
			Route      string      `json:"route"`
			Candidates []candidate `json:"candidates"`
		} `json:"entry"`
	}
	e.putHandEdit("pools/BAD", `{}`) // outside the key grammar: skipped, with no value to decide with
	r = e.must(0, "export", "kv", "--format", "map")
	if err := json.Unmarshal([]byte(r.stdout), &kv); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.stderr, `msg="stored value skipped, as the agents skip it" key=pools/BAD`) ||
		strings.Contains(r.stderr, "skip it\" key=policy/residency") || !strings.Contains(r.stderr, "policy/residency: refused (") {
		t.Fatalf("export kv with a refused policy and a key outside the grammar: want the policy named with the value used and pools/BAD skipped, got %s", r.stderr)
	}
	if gb := kv["GB"].Entry; gb.Route != "GB" || len(gb.Candidates) == 0 || slices.ContainsFunc(gb.Candidates, func(c candidate) bool { return c.Pool != "uk-london" }) {
		t.Fatalf("export kv with the policy refused: GB's entry %+v, want route GB with uk-london alone (stderr %s)", gb, r.stderr)
	}
	if r = e.must(0, "get", "policy"); strings.Contains(r.stdout, "built-in default") || !strings.Contains(r.stderr, "policy/residency") {
		t.Fatalf("get policy with the policy refused: want no built-in policy shown and the refused key named, got %s", r)
	}

	e.must(0, "rollback", strconv.FormatInt(epoch, 10), "--reason", "undo the hand edit")
	if got := e.get(e.ks.RoutingKey(routing.PolicyKey)); got != good {
		t.Fatalf("after the rollback the policy is %s, want %s", got, good)
	}
	if r := e.run("pool", "drain", "uk-london", "--dry-run"); r.code != ExitRefused || strings.Contains(r.stderr, "policy/residency") || !strings.Contains(r.stderr, "GB") {
		t.Fatalf("drain after the policy was replaced: want refused for GB alone, got %s", r)
	}
}

// TestGroupRouteSpellingACountryIsSkipped: a hand-written routes/pl (meant
// for Poland, whose route is routes/PL) is outside the key grammar: it
// was served as a group no country resolves to, unreported, while every
// regionctl write was refused over it. Now `get skipped` names it with
// the route to use, and writes go on.
func TestGroupRouteSpellingACountryIsSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.putHandEdit("routes/pl", `{"targets":[{"pool":"eu-central","weight":100}]}`)
	r := e.must(ExitOK, "get", "skipped")
	if want := `group name "pl" spells the country PL: country routes are upper case (routes/PL)`; !strings.Contains(r.stdout, "routes/pl ") || !strings.Contains(r.stdout, want) {
		t.Errorf("get skipped with routes/pl stored: want %q\n%s", want, r)
	}
	before := e.currentEpoch()
	e.must(ExitOK, "pool", "set", "eu-central", "--attr", "z=2")
	if got := e.currentEpoch(); got != before+1 {
		t.Fatalf("pool set with routes/pl stored: epoch %d → %d, want one write", before, got)
	}
}
