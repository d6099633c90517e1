package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// provenanceLines returns the lines of get's output that say where a
// pool's status came from, by pool id.
func provenanceLines(stdout string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(stdout, "\n") {
		if id, _, ok := strings.Cut(l, " "); ok && strings.Contains(l, " since ") {
			out[id] = l
		}
	}
	return out
}

// auditWhen matches how get shows an audit record's time and author.
const auditWhen = `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, [^ ]+@[^ ]+`

// TestGetPoolsProvenance: get names, under the pools, for each pool that
// is not active, the write that set its status: the epoch, when, who and
// why from its audit record, also after later writes of the key that
// left the status alone (a regionctl set, a hand edit); a pool whose
// status was set around regionctl (etcdctl) says so, also once a later
// commit has moved the epoch; an active pool has no line. -o json has it
// beside the pools (pool_provenance), whose values stay the stored ones.
func TestGetPoolsProvenance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()                                                                           // 1
	e.must(ExitOK, "pool", "drain", "eu-west", "--reason", "disk failure")             // 2
	e.must(ExitOK, "pool", "set", "eu-west", "--attr", "max_rps=500", "--reason", "x") // 3: the status left alone
	e.must(ExitOK, "pool", "set", "eu-north", "--status", "down")                      // 4: no --reason
	// A hand edit of eu-west's attrs, status kept, and one that takes
	// uk-london down; a commit after them (the epoch moves past both).
	stored := e.get(e.ks.RoutingKey("pools/eu-west"))
	e.putHandEdit("pools/eu-west", strings.Replace(stored, `"max_rps":"500"`, `"max_rps":"400"`, 1))
	e.putHandEdit("pools/uk-london", `{"host":"edge-lhr-1.example.net:443","region":"uk","residency":"uk","status":"down"}`)
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=100", "--reason", "y") // 5

	r := e.must(ExitOK, "get", "pools")
	lines := provenanceLines(r.stdout)
	for id, want := range map[string]string{
		"eu-west":   `^eu-west draining since epoch 2 \(` + auditWhen + `: "disk failure"\)$`,
		"eu-north":  `^eu-north down since epoch 4 \(` + auditWhen + `, no --reason: pool set eu-north --status down\)$`,
		"uk-london": `^uk-london down since revision \d+ \(written around regionctl, by etcdctl or a script: no audit record says who, when or why\)$`,
	} {
		if !regexp.MustCompile(want).MatchString(lines[id]) {
			t.Errorf("get pools: %s's line %q, want %s\n%s", id, lines[id], want, r.stdout)
		}
	}
	if len(lines) != 3 || strings.Contains(r.stderr, "not shown") {
		t.Errorf("get pools: want provenance lines for the 3 pools not active, no warning:\n%s", r)
	}
	// get (every section) shows them too; another section alone does not.
	if r := e.must(ExitOK, "get"); len(provenanceLines(r.stdout)) != 3 {
		t.Errorf("get: want the 3 provenance lines:\n%s", r.stdout)
	}
	if r := e.must(ExitOK, "get", "routes"); len(provenanceLines(r.stdout)) != 0 {
		t.Errorf("get routes: want no provenance lines:\n%s", r.stdout)
	}

	var out struct {
		Pools          map[string]json.RawMessage
		PoolProvenance map[string]poolProvenance `json:"pool_provenance"`
	}
	mustJSON(t, e.must(ExitOK, "get", "pools", "-o", "json").stdout, &out)
	if got := out.Pools["eu-west"]; !jsonEqual(t, got, e.get(e.ks.RoutingKey("pools/eu-west"))) {
		t.Errorf("get -o json: pools.eu-west %s, want the stored value", got)
	}
	west, north, london := out.PoolProvenance["eu-west"], out.PoolProvenance["eu-north"], out.PoolProvenance["uk-london"]
	if len(out.PoolProvenance) != 3 || west.Epoch != 2 || west.Status != "draining" || west.Reason != "disk failure" || west.User == "" ||
		west.Command != "pool drain eu-west --reason 'disk failure'" || west.WrittenAround || west.OrEarlier ||
		north.Epoch != 4 || north.Status != "down" || !london.WrittenAround || london.Epoch != 0 || london.Revision == 0 {
		t.Errorf("get -o json: pool_provenance %+v", out.PoolProvenance)
	}
	var routes map[string]json.RawMessage
	mustJSON(t, e.must(ExitOK, "get", "routes", "-o", "json").stdout, &routes)
	if _, ok := routes["pool_provenance"]; ok {
		t.Errorf("get routes -o json has pool_provenance")
	}

	// Undrained: active, no line; every pool active: {} in JSON.
	e.must(ExitOK, "pool", "undrain", "eu-west")
	e.must(ExitOK, "pool", "set", "eu-north", "--status", "active")
	e.must(ExitOK, "pool", "set", "uk-london", "--host", "edge-lhr-1.example.net:443", "--region", "uk", "--residency", "uk", "--status", "active")
	if r := e.must(ExitOK, "get", "pools"); len(provenanceLines(r.stdout)) != 0 {
		t.Errorf("get pools with every pool active: want no provenance line:\n%s", r.stdout)
	}
	var all map[string]json.RawMessage
	mustJSON(t, e.must(ExitOK, "get", "-o", "json").stdout, &all)
	if string(all["pool_provenance"]) != "{}" {
		t.Errorf("get -o json with every pool active: pool_provenance %s, want {}", all["pool_provenance"])
	}
}

// TestGetPoolsProvenanceTracesBoundedly: the writes of a pool's key are
// followed back at most maxOriginWrites: past that, the oldest traced is
// named "or earlier", saying why.
func TestGetPoolsProvenanceTracesBoundedly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "drain", "eu-west", "--reason", "disk failure") // 2
	for i := range maxOriginWrites {                                       // 3 … 2+maxOriginWrites
		e.must(ExitOK, "pool", "set", "eu-west", "--attr", fmt.Sprintf("n=%d", i), "--reason", fmt.Sprint("tweak ", i))
	}
	oldest := 2 + 1 // the oldest of the newest maxOriginWrites writes
	r := e.must(ExitOK, "get", "pools")
	want := fmt.Sprintf(`^eu-west draining since epoch %d or earlier \(%s: "tweak 0"; it was draining before that write too; only the newest %d writes of pools/eu-west are traced\)$`,
		oldest, auditWhen, maxOriginWrites)
	if line := provenanceLines(r.stdout)["eu-west"]; !regexp.MustCompile(want).MatchString(line) {
		t.Errorf("get pools: %q, want %s", line, want)
	}
}

// TestGetPoolsProvenanceOfAnAuditRecordGoneOrRewritten: a status set by
// an epoch whose audit record is gone names the epoch and says so; one
// whose record was put again after its commit marks what it shows.
func TestGetPoolsProvenanceOfAnAuditRecordGoneOrRewritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "drain", "eu-west", "--reason", "disk failure") // 2
	e.must(ExitOK, "pool", "drain", "eu-north", "--reason", "kernel")      // 3
	if _, err := testClient.Delete(context.Background(), e.ks.Audit(2)); err != nil {
		t.Fatal(err)
	}
	rec := e.get(e.ks.Audit(3))
	if _, err := testClient.Put(context.Background(), e.ks.Audit(3), strings.Replace(rec, `"reason":"kernel"`, `"reason":"forged"`, 1)); err != nil {
		t.Fatal(err)
	}
	lines := provenanceLines(e.must(ExitOK, "get", "pools").stdout)
	if want := "eu-west draining since epoch 2 (the audit record of epoch 2 is no longer kept)"; lines["eu-west"] != want {
		t.Errorf("eu-west: %q, want %q", lines["eu-west"], want)
	}
	if want := regexp.MustCompile(`^eu-north draining since epoch 3 \(its audit record was put again after its commit and may not be its own: ` + auditWhen + `: "forged"\)$`); !want.MatchString(lines["eu-north"]) {
		t.Errorf("eu-north: %q, want %s", lines["eu-north"], want)
	}
}

// TestGetPoolsProvenanceAsViewer: with etcd's authentication on, the
// viewer's role (read on <root>/) shows where a pool's status came from;
// a user that may not read audit/ (an agent's role) gets the pools
// without it and one warning naming the permission, exit 0.
func TestGetPoolsProvenanceAsViewer(t *testing.T) {
	t.Parallel()
	e := newRBACEnv(t, false)
	if r := e.as(rbacOperator, "apply", "-f", exampleConfig, "--reason", "seed"); r.code != ExitOK {
		t.Fatalf("operator apply: %s", r)
	}
	if r := e.as(rbacOperator, "pool", "drain", "eu-west", "--reason", "disk failure"); r.code != ExitOK {
		t.Fatalf("operator drain: %s", r)
	}
	want := regexp.MustCompile(`^eu-west draining since epoch 2 \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, ` + rbacOperator + `@[^ ]+: "disk failure"\)$`)
	r := e.as(rbacViewer, "get", "pools")
	if r.code != ExitOK || !want.MatchString(provenanceLines(r.stdout)["eu-west"]) || r.stderr != "" {
		t.Fatalf("viewer get pools: %s; want eu-west's line %s", r, want)
	}
	r = e.as(rbacAgent, "get", "pools")
	if r.code != ExitOK || !strings.Contains(r.stdout, "eu-west ") || len(provenanceLines(r.stdout)) != 0 ||
		strings.Count(r.stderr, "warning") != 1 || !strings.Contains(r.stderr, "is not shown: permission denied for user "+rbacAgent) ||
		!strings.Contains(r.stderr, "needs read on "+rbacPrefix+"/audit/") {
		t.Fatalf("agent get pools: %s; want the pools, no provenance and one warning naming the permission", r)
	}
	// The viewer's history --touching, with its certificate's --key.
	r = e.as(rbacViewer, "history", "--touching", "eu-west", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("viewer history --touching eu-west: %s", r)
	}
	var recs []struct{ Epoch int64 }
	if mustJSON(t, r.stdout, &recs); fmt.Sprint(recs) != "[{2} {1}]" {
		t.Fatalf("viewer history --touching eu-west: %s; want epochs 2 and 1", r)
	}
	var out map[string]json.RawMessage
	r = e.as(rbacAgent, "get", "pools", "-o", "json")
	mustJSON(t, r.stdout, &out)
	if _, ok := out["pool_provenance"]; ok || out["pools"] == nil {
		t.Fatalf("agent get pools -o json: %s; want the pools and no pool_provenance", r)
	}
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t *testing.T, a json.RawMessage, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return false
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}
