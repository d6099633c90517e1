package cli

// Gap tests from a mutation review of the read verbs and the pool and
// boost verbs (get.go, pool.go, boost.go): each kills a mutant the
// package's tests let live. They share the package's one etcd, each under
// its own prefix, and wait for no lease to end.

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// tableRow returns the fields of the first line of a table whose first
// field is first (nil when there is none).
func tableRow(out, first string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

// TestGetGapEpochRevisionPolicyAndFallbacks: get's first line is "epoch E
// at revision R", the epoch key's value and the revision read (not the
// other way round), as -o json's epoch and revision are; the policy table
// has the "(unknown country)" row with its class; a route's table row
// names every fallback of its chain, in order.
func TestGetGapEpochRevisionPolicyAndFallbacks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed() // epoch 1; epoch 2:
	e.must(ExitOK, "route", "set", "PL", "--fallback", "eu-general", "--fallback", "apac-general", "--reason", "two fallbacks")
	resp, err := testClient.Get(context.Background(), e.ks.Epoch())
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("epoch key after two writes: %q, want 2", resp.Kvs[0].Value)
	}
	// The etcd is shared: get reads its current revision, the epoch key's
	// mod revision or later.
	rev := resp.Kvs[0].ModRevision
	var js struct {
		Revision int64 `json:"revision"`
		Epoch    int64 `json:"epoch"`
	}
	mustJSON(t, e.must(ExitOK, "get", "-o", "json").stdout, &js)
	if js.Epoch != 2 || js.Revision < rev {
		t.Errorf("get -o json: epoch %d revision %d, want epoch 2 and revision %d or later", js.Epoch, js.Revision, rev)
	}
	out := e.must(ExitOK, "get").stdout
	first := strings.SplitN(out, "\n", 2)[0]
	m := regexp.MustCompile(`^epoch 2 at revision (\d+)$`).FindStringSubmatch(first)
	if m == nil {
		t.Errorf("get's first line %q, want \"epoch 2 at revision R\"", first)
	} else if n, _ := strconv.ParseInt(m[1], 10, 64); n < rev {
		t.Errorf("get's first line %q, want \"epoch 2 at revision R\", R %d or later", first, rev)
	}
	if f := tableRow(out, "PL"); !strings.Contains(strings.Join(f, " "), " eu-general,apac-general sticky ") {
		t.Errorf("get's row of PL %q; want FALLBACK eu-general,apac-general", f)
	}
	if !regexp.MustCompile(`(?m)^\(unknown country\)\s+eu\s*$`).MatchString(out) {
		t.Errorf("get's policy table has no \"(unknown country)  eu\" row:\n%s", out)
	}
}

// TestGetGapPoolsCountEveryHealthKey: get pools' HEALTH is the pool's own
// count of live health keys, every key whatever its value (as the agents
// count them): a key whose value does not decode counts too, and the
// keys of another pool do not. And get boosts alone warns on stderr of a
// boost key whose value does not decode (it has no SKIPPED part: the key
// must not read as absent), as get pools and get routes do of theirs.
func TestGetGapPoolsCountEveryHealthKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "eu-central", "--health-check", "--force")
	e.must(ExitOK, "pool", "set", "eu-west", "--health-check", "--force")
	ctx := context.Background()
	for key, value := range map[string]string{
		routing.HealthKey("eu-central", "a-1"): `{"addr":"10.0.0.1:443"}`,
		routing.HealthKey("eu-central", "b-2"): "garbage", // the agents count it live
		routing.HealthKey("eu-west", "c-3"):    `{"addr":"10.0.0.3:443"}`,
		routing.OverrideKey("bad-boost"):       "garbage",
	} {
		if _, err := testClient.Put(ctx, e.ks.RoutingKey(key), value); err != nil {
			t.Fatal(err)
		}
	}
	r := e.must(ExitOK, "get", "pools")
	if f := tableRow(r.stdout, "eu-central"); !strings.Contains(strings.Join(f, " "), " 2 live") {
		t.Errorf("get pools, eu-central with 2 health keys (one not decoding): row %q, want HEALTH \"2 live\"", f)
	}
	if f := tableRow(r.stdout, "eu-west"); !strings.Contains(strings.Join(f, " "), " 1 live") {
		t.Errorf("get pools, eu-west with 1 health key: row %q, want HEALTH \"1 live\"", f)
	}
	r = e.must(ExitOK, "get", "boosts")
	if !strings.Contains(r.stderr, "1 stored value(s) of boosts are invalid, so not shown") || !strings.Contains(r.stderr, "overrides/bad-boost") {
		t.Errorf("get boosts with a boost key that does not decode: %s; want a warning naming overrides/bad-boost", r)
	}
}

// TestBoostLsGapEveryLeaseAndNoEarlyExpiry: boost ls reads the lease of
// every boost (ttl_seconds of each, not of the first alone), and marks no
// live boost "(expired)", one with 30s left included.
func TestBoostLsGapEveryLeaseAndNoEarlyExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "30s", "--id", "a-kr")
	e.must(ExitOK, "boost", "JP", "--attr", "lang=ko", "--ttl", "1h", "--id", "b-jp")
	var bs []boostInfo
	mustJSON(t, e.must(ExitOK, "boost", "ls", "-o", "json").stdout, &bs)
	if len(bs) != 2 {
		t.Fatalf("boost ls -o json of 2 boosts: %+v", bs)
	}
	for _, b := range bs {
		if b.TTLSeconds == nil || *b.TTLSeconds <= 0 || b.Expired {
			t.Errorf("boost ls -o json, boost %s just written: ttl_seconds %v, expired %v; want its lease's life, not expired", b.ID, b.TTLSeconds, b.Expired)
		}
	}
	r := e.must(ExitOK, "boost", "ls")
	if strings.Contains(r.stdout, "(expired)") {
		t.Errorf("boost ls of boosts with 30s and 1h left: %s; want none marked (expired)", r)
	}
	for _, id := range []string{"a-kr", "b-jp"} {
		hasTTL := false
		for _, c := range tableRow(r.stdout, id) {
			if d, err := time.ParseDuration(c); err == nil && d > 0 {
				hasTTL = true
			}
		}
		if !hasTTL {
			t.Errorf("boost ls, row of %s %q; want its lease's TTL", id, tableRow(r.stdout, id))
		}
	}
}

// TestBoostLsGapHealthGraceIsOver: boost ls judges the boosts as the
// agents' table does once their health grace windows are over: a boost
// whose only target is a health-checked pool with no live health key
// serves no viewer (serves_no_viewer, and a warning).
func TestBoostLsGapHealthGraceIsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "kr-music", "--health-check", "--force")
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--id", "kr-hc", "--force")
	r := e.must(ExitOK, "boost", "ls", "-o", "json")
	var bs []boostInfo
	mustJSON(t, r.stdout, &bs)
	if len(bs) != 1 || !bs[0].ServesNoViewer || !strings.Contains(r.stderr, "boost kr-hc serves no viewer") {
		t.Errorf("boost ls, boost of a health-checked pool with no live key: %s; want serves_no_viewer and a warning", r)
	}
}

// TestBoostExtendGapKeepsTheBoost: boost extend gives a boost a new life
// and nothing else: its route, targets, attrs, reason and author are
// kept.
func TestBoostExtendGapKeepsTheBoost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--attr", "lang=ko", "--ttl", "1h", "--id", "kr-ext", "--reason", "comeback week")
	key := e.ks.RoutingKey(routing.OverrideKey("kr-ext"))
	var before, after routing.Override
	mustJSON(t, e.get(key), &before)
	e.must(ExitOK, "boost", "extend", "kr-ext", "--ttl", "2h", "--reason", "trend continues")
	mustJSON(t, e.get(key), &after)
	if after.Reason != "comeback week" || after.Author != before.Author || after.Author == "" || after.Route != "KR" ||
		targetList(after.Targets) != targetList(before.Targets) || kvList(after.Attrs) != kvList(before.Attrs) {
		t.Errorf("boost extend: %+v, was %+v; want all but expires_at kept", after, before)
	}
}

// TestPoolSetGapClearsWhatIsGiven: pool set writes each flag given, an
// empty or false one too: --health-check=false turns health_check off,
// --region ” drops the region, --unset-attr removes the attr; the rest
// is kept.
func TestPoolSetGapClearsWhatIsGiven(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "eu-central", "--health-check", "--force")
	key := e.ks.RoutingKey(routing.PoolKey("eu-central"))
	var before, after routing.Pool
	mustJSON(t, e.get(key), &before)
	if !before.HealthCheck || before.Region == "" || before.Attrs["max_rps"] == "" {
		t.Fatalf("eu-central before: %+v; want health_check, a region and max_rps", before)
	}
	e.must(ExitOK, "pool", "set", "eu-central", "--health-check=false", "--region", "", "--unset-attr", "max_rps")
	mustJSON(t, e.get(key), &after)
	if after.HealthCheck || after.Region != "" || after.Attrs["max_rps"] != "" {
		t.Errorf("pool set --health-check=false --region '' --unset-attr max_rps: %+v; want all three cleared", after)
	}
	if after.Host != before.Host || after.Residency != before.Residency || after.Status != before.Status || len(after.Attrs) != len(before.Attrs)-1 {
		t.Errorf("pool set changed what was not given: %+v, was %+v", after, before)
	}
}

// TestPoolDrainGapNamesLiveBoostsOnly: pool drain warns of the live boosts
// that target the pool, not of one past its expires_at (a key an
// election's lease renewal or a hand edit keeps): the agents no longer
// apply it. get boosts shows that stored key all the same, marked
// (expired), and has it in -o json.
func TestPoolDrainGapNamesLiveBoostsOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.putExpiredBoost("kr-old")
	r := e.must(ExitOK, "pool", "drain", "kr-music", "--force")
	if strings.Contains(r.stderr, "kr-old") {
		t.Errorf("pool drain of a pool only an expired boost targets: %s; want it not named", r)
	}
	r = e.must(ExitOK, "get", "boosts")
	if f := tableRow(r.stdout, "kr-old"); !strings.Contains(strings.Join(f, " "), "(expired)") {
		t.Errorf("get boosts with an expired boost kept: %s; want its row marked (expired)", r)
	}
	var js struct {
		Boosts map[string]json.RawMessage `json:"boosts"`
	}
	if mustJSON(t, e.must(ExitOK, "get", "boosts", "-o", "json").stdout, &js); js.Boosts["kr-old"] == nil {
		t.Errorf("get boosts -o json with an expired boost kept: %v; want it there", js.Boosts)
	}
}
