package cli

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// resolvePool returns the pool regionctl resolve picks for a country and
// sticky key.
func (e *tenv) resolvePool(cc, key string) string {
	e.t.Helper()
	var ex routing.Explanation
	mustJSON(e.t, e.must(ExitOK, "resolve", cc, "--key", key, "-o", "json").stdout, &ex)
	if ex.Decision == nil {
		return ""
	}
	return ex.Decision.Pool
}

// TestBoostExpires: a boost with a 2s TTL changes resolution at once and
// reverts by itself when its lease ends, with no command run and no epoch.
func TestBoostExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	if got := e.resolvePool("JP", "viewer-1"); got != "apac-tokyo" {
		t.Fatalf("JP before the boost: %s", got)
	}
	r := e.must(ExitOK, "boost", "JP", "--target", "kr-music=100", "--attr", "lang=ko", "--ttl", "2s", "--id", "jp-kpop", "--reason", "kpop week")
	if !strings.Contains(r.stdout, "boost jp-kpop: added (on JP; targets kr-music 100; attrs lang=ko; until ") {
		t.Fatalf("boost output: %s", r)
	}
	start := time.Now()
	if got := e.resolvePool("JP", "viewer-1"); got != "kr-music" {
		t.Fatalf("JP during the boost: %s", got)
	}
	ls := e.must(ExitOK, "boost", "ls")
	if !strings.HasPrefix(ls.stdout, "BOOST") || !strings.Contains(ls.stdout, "jp-kpop") || !strings.Contains(ls.stdout, "kpop week") {
		t.Fatalf("boost ls: %s; want the table from its first line", ls)
	}
	epoch := e.get(e.ks.Epoch())
	deadline := start.Add(6 * time.Second) // 2×TTL plus lease-expiry granularity
	for e.resolvePool("JP", "viewer-1") != "apac-tokyo" {
		if time.Now().After(deadline) {
			t.Fatalf("boost still in force %s after it was written", time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("boost reverted by itself after %s", time.Since(start).Round(10*time.Millisecond))
	// Its expires_at ends it by the clock; its lease then deletes the key.
	for e.get(e.ks.RoutingKey("overrides/jp-kpop")) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("boost key still there %s after it was written", time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if e.get(e.ks.Epoch()) != epoch {
		t.Fatal("the boost's expiry bumped the epoch")
	}
}

// TestBoostCancelExtend: extend gives a boost a new lease; cancel ends it
// at once; both are audited writes.
func TestBoostCancelExtend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "2s", "--id", "kr")
	var first routing.Override
	mustJSON(t, e.get(e.ks.RoutingKey("overrides/kr")), &first)
	before := time.Now()
	if r := e.must(ExitOK, "boost", "extend", "kr", "--ttl", "1h"); !strings.Contains(r.stdout, "boost kr: expires_at "+first.ExpiresAt+"→") {
		t.Fatalf("extend: %s", r)
	}
	after := time.Now()
	var extended routing.Override
	mustJSON(t, e.get(e.ks.RoutingKey("overrides/kr")), &extended)
	// An hour from the write, rounded up to the second.
	if end := extended.Expiry(); end.Before(before.Add(time.Hour)) || !end.Before(after.Add(time.Hour+time.Second)) {
		t.Fatalf("extended boost expires_at %s; want an hour after the write (between %s and %s)", extended.ExpiresAt,
			before.Add(time.Hour).UTC().Format(time.RFC3339Nano), after.Add(time.Hour+time.Second).UTC().Format(time.RFC3339Nano))
	}
	time.Sleep(3 * time.Second) // past the first lease
	if e.get(e.ks.RoutingKey("overrides/kr")) == "" {
		t.Fatal("extended boost expired with its first lease")
	}
	if got := e.resolvePool("KR", "viewer-1"); got != "kr-music" {
		t.Fatalf("KR during the boost: %s", got)
	}
	if r := e.must(ExitOK, "boost", "cancel", "kr", "--reason", "done"); !strings.Contains(r.stdout, "boost kr: removed") {
		t.Fatalf("cancel: %s", r)
	}
	if e.get(e.ks.RoutingKey("overrides/kr")) != "" {
		t.Fatal("cancelled boost still stored")
	}
	if rec := e.audit(4); rec.Command != "boost cancel kr --reason done" || rec.Changes[0].Op != "delete" {
		t.Fatalf("audit of cancel: %+v", rec)
	}
	e.must(ExitRefused, "boost", "extend", "kr", "--ttl", "1h")
	e.must(ExitUsage, "boost", "KR", "--target", "kr-music=100")
	e.must(ExitUsage, "boost", "KR", "--ttl", "1h")
}

// TestBoostExtendShorterWarns: boost extend's --ttl is a new remaining
// life from now, so one shorter than the life left shortens the boost: a
// warning on stderr names the new and the old expires_at (in the dry run
// too), the exit code unchanged; one that lengthens it says nothing.
func TestBoostExtendShorterWarns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "20m", "--id", "kr")
	var first routing.Override
	mustJSON(t, e.get(e.ks.RoutingKey("overrides/kr")), &first)
	warn := "regionctl: warning: boost kr now ends earlier than it would have: expires_at "
	if r := e.must(ExitOK, "boost", "extend", "kr", "--ttl", "30s", "--dry-run"); !strings.Contains(r.stderr, warn) ||
		!strings.Contains(r.stderr, ", was "+first.ExpiresAt+" (") {
		t.Fatalf("dry run of a shortening extend: %s; want the warning naming both expires_at", r)
	}
	r := e.must(ExitOK, "boost", "extend", "kr", "--ttl", "30s", "--reason", "shorter")
	var now routing.Override
	mustJSON(t, e.get(e.ks.RoutingKey("overrides/kr")), &now)
	if !strings.Contains(r.stderr, warn+now.ExpiresAt+", was "+first.ExpiresAt+" (") || !strings.Contains(r.stderr, "--ttl 30s is its new remaining life from now") {
		t.Fatalf("a shortening extend: %s; want a warning naming expires_at %s and %s", r, now.ExpiresAt, first.ExpiresAt)
	}
	if r := e.must(ExitOK, "boost", "extend", "kr", "--ttl", "1h", "--reason", "longer"); strings.Contains(r.stderr, "ends earlier") {
		t.Fatalf("a lengthening extend warned: %s", r)
	}
}

// TestBoostEndsAtExpiresAtWhenItsLeaseLivesOn: etcd renews every lease to
// its full TTL when a member becomes leader (without lease checkpoints),
// so a boost's key can outlive its --ttl. The boost's value carries
// expires_at, now + TTL: a renewal of its lease past then (as an election
// makes) leaves the key in etcd, and resolve no longer applies it, while
// boost ls marks it expired, and it no longer protects its pool.
func TestBoostEndsAtExpiresAtWhenItsLeaseLivesOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "jp-extra", "--host", "edge-kix-1.example.net", "--residency", "apac")
	before := time.Now()
	e.must(ExitOK, "boost", "JP", "--target", "jp-extra=100", "--ttl", "5s", "--id", "jp")
	key := e.ks.RoutingKey("overrides/jp")
	resp, err := testClient.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("boost key: %v %v", resp, err)
	}
	// Renew the lease, as a new leader does, from now until the test ends.
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	ctx, stop := context.WithCancel(context.Background())
	renewed := make(chan error, 1)
	go func() {
		for {
			if _, err := testClient.KeepAliveOnce(ctx, lease); err != nil && ctx.Err() == nil {
				renewed <- err
				return
			}
			select {
			case <-ctx.Done():
				renewed <- nil
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	defer func() {
		stop()
		if err := <-renewed; err != nil {
			t.Errorf("renew the boost's lease: %v", err)
		}
		testClient.Revoke(context.Background(), lease)
	}()
	var ov routing.Override
	mustJSON(t, string(resp.Kvs[0].Value), &ov)
	end := ov.Expiry()
	if end.Before(before.Add(5*time.Second)) || end.After(time.Now().Add(6*time.Second)) {
		t.Fatalf("expires_at %q: want the write's time plus the 5s TTL", ov.ExpiresAt)
	}
	if got := e.resolvePool("JP", "viewer-1"); got != "jp-extra" {
		t.Fatalf("JP during the boost: %s", got)
	}
	// While the boost lives its pool is protected, and ls says it is not
	// expired: checked when the command ran wholly before expires_at (a
	// loaded machine may take the boost's life first).
	if r := e.run("pool", "rm", "jp-extra", "--dry-run"); time.Now().Before(end) && r.code != ExitRefused {
		t.Fatalf("pool rm of the live boost's pool: %s", r)
	}
	var b []boostInfo
	mustJSON(t, e.must(ExitOK, "boost", "ls", "-o", "json").stdout, &b)
	if len(b) != 1 || b[0].Expired && time.Now().Before(end) {
		t.Fatalf("boost ls -o json during the boost: %+v", b)
	}
	time.Sleep(time.Until(end.Add(300 * time.Millisecond)))
	if e.get(key) == "" {
		t.Fatal("the boost's key went although its lease was renewed")
	}
	if got := e.resolvePool("JP", "viewer-1"); got != "apac-tokyo" {
		t.Fatalf("JP past the boost's expires_at, its key still in etcd: %s, want apac-tokyo", got)
	}
	if ls := e.must(ExitOK, "boost", "ls"); !strings.Contains(ls.stdout, ov.ExpiresAt+" (expired)") {
		t.Fatalf("boost ls does not mark the boost expired:\n%s", ls.stdout)
	}
	mustJSON(t, e.must(ExitOK, "boost", "ls", "-o", "json").stdout, &b)
	if len(b) != 1 || !b[0].Expired {
		t.Fatalf("boost ls -o json past expires_at: %+v, want it marked expired", b)
	}
	e.must(ExitOK, "pool", "rm", "jp-extra")
}

// TestExtendOfAnExpiredBoostIsChecked: a boost past its expires_at (its
// lease renewed, as an election does) no longer protects its pool, so the
// pool may be drained; boost extend would then revive it and leave JP with
// no eligible pool, and is refused as a new boost would be. (The checks
// once saw the boost's old, past expires_at and let the extend through.)
func TestExtendOfAnExpiredBoostIsChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.must(ExitOK, "apply", "-f", writeFile(t, "jp.yaml", `
policy:
  residency:
    classes: {eu: [DE], apac: [JP]}
    unknown_country_class: eu
pools:
  eu-a: {host: eu-a.example.net, residency: eu}
  tokyo: {host: tokyo.example.net, residency: apac}
  extra: {host: extra.example.net, residency: apac}
routes:
  _default: {targets: [{pool: eu-a, weight: 100}]}
  JP: {targets: [{pool: tokyo, weight: 100}]}
`), "--allow-residency-change") // class eu narrower than the built-in one
	e.must(ExitOK, "boost", "JP", "--target", "extra=100", "--ttl", "3s", "--id", "jp")
	resp, err := testClient.Get(context.Background(), e.ks.RoutingKey("overrides/jp"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("boost key: %v %v", resp, err)
	}
	var ov routing.Override
	mustJSON(t, string(resp.Kvs[0].Value), &ov)
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	defer testClient.Revoke(context.Background(), lease)
	for time.Now().Before(ov.Expiry().Add(200 * time.Millisecond)) { // renewed past expires_at
		if _, err := testClient.KeepAliveOnce(context.Background(), lease); err != nil {
			t.Fatalf("renew the boost's lease: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if _, err := testClient.KeepAliveOnce(context.Background(), lease); err != nil {
		t.Fatalf("renew the boost's lease: %v", err)
	}
	e.must(ExitOK, "pool", "drain", "extra")
	r := e.must(ExitRefused, "boost", "extend", "jp", "--ttl", "1h")
	if !strings.Contains(r.stderr, "JP") || !strings.Contains(r.stderr, "no eligible pool") {
		t.Fatalf("extend of the expired boost onto a drained pool: %s", r)
	}
	var still routing.Override
	mustJSON(t, e.get(e.ks.RoutingKey("overrides/jp")), &still)
	if still.ExpiresAt != ov.ExpiresAt {
		t.Fatalf("the refused extend wrote expires_at %s (was %s)", still.ExpiresAt, ov.ExpiresAt)
	}
}

// TestBoostProtectsItsPool: a config change that would break a live boost
// is refused until the boost is cancelled.
func TestBoostProtectsItsPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "jp-extra", "--host", "edge-kix-1.example.net", "--residency", "apac")
	e.must(ExitOK, "boost", "JP", "--target", "jp-extra=100", "--ttl", "1h", "--id", "jp")
	r := e.must(ExitRefused, "pool", "rm", "jp-extra")
	if !containsAll(r.stderr, []string{"REFUSED overrides/jp: ", "jp-extra", "boost cancel jp"}) {
		t.Fatalf("pool rm under a live boost: %s", r)
	}
	e.must(ExitOK, "boost", "cancel", "jp")
	e.must(ExitOK, "pool", "rm", "jp-extra")
}

// TestBoostOverAValueThatDoesNotDecode: a boost key holding a value that
// does not decode (a hand edit) is refused by name, not reported as a
// conflict no re-run can clear: boost with its id and boost extend exit 1
// saying to cancel it; boost cancel deletes it; then the id is free.
func TestBoostOverAValueThatDoesNotDecode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	key := e.ks.RoutingKey(routing.OverrideKey("kr-1"))
	if _, err := testClient.Put(context.Background(), key, `{"route":"KR"}`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"boost", "KR", "--id", "kr-1", "--target", "kr-music=100", "--ttl", "1h", "--retry", "3"},
		{"boost", "extend", "kr-1", "--ttl", "1h"},
	} {
		r := e.run(args...)
		if r.code != ExitRefused || !strings.Contains(r.stderr, "does not decode") || !strings.Contains(r.stderr, "boost cancel kr-1") {
			t.Errorf("%v: exit %d, want %d naming the value that does not decode and how to cancel it\n%s", args, r.code, ExitRefused, r)
		}
	}
	e.must(ExitOK, "boost", "cancel", "kr-1", "--reason", "hand edit")
	if v := e.get(key); v != "" {
		t.Fatalf("boost cancel left %s", v)
	}
	e.must(ExitOK, "boost", "KR", "--id", "kr-1", "--target", "kr-music=100", "--ttl", "1h")
}

// TestBoostWithoutALease: a boost key put by hand without a lease shows
// "no lease" in boost ls, and ttl_seconds null in -o json, not a TTL of 0s
// that reads as about to end.
func TestBoostWithoutALease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	key := e.ks.RoutingKey(routing.OverrideKey("hand-1"))
	if _, err := testClient.Put(context.Background(), key, `{"route":"KR","targets":[{"pool":"kr-music","weight":100}]}`); err != nil {
		t.Fatal(err)
	}
	e.must(ExitOK, "boost", "KR", "--id", "kr-2", "--target", "kr-music=100", "--ttl", "1h")
	// boost ls, and get's boosts table alike.
	for _, args := range [][]string{{"boost", "ls"}, {"get", "boosts"}, {"get"}} {
		r := e.must(ExitOK, args...)
		var hand, leased string
		for _, l := range strings.Split(r.stdout, "\n") {
			switch {
			case strings.HasPrefix(l, "hand-1"):
				hand = l
			case strings.HasPrefix(l, "kr-2"):
				leased = l
			}
		}
		if !strings.Contains(hand, "no lease") || strings.Contains(hand, " 0s") || !regexp.MustCompile(` (59m[0-9.]+s|1h0m0s) `).MatchString(leased) {
			t.Fatalf("regionctl %s: want hand-1 with no lease and kr-2 with its TTL (under an hour):\n%s", strings.Join(args, " "), r.stdout)
		}
	}
	var boosts []map[string]any
	mustJSON(t, e.must(ExitOK, "boost", "ls", "-o", "json").stdout, &boosts)
	for _, b := range boosts {
		ttl, ok := b["ttl_seconds"]
		if !ok || (b["id"] == "hand-1") != (ttl == nil) {
			t.Errorf("boost ls -o json: %v has ttl_seconds %v (present %v); want null for hand-1 only", b["id"], ttl, ok)
		}
	}
	// lease_id is the lease in hex, exactly (a JSON number past 2^53 is
	// rounded by jq and JavaScript), as etcdctl's lease commands take it.
	resp, err := testClient.Get(context.Background(), e.ks.RoutingKey(routing.OverrideKey("kr-2")))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("kr-2's key: %v", err)
	}
	for _, b := range boosts {
		id, has := b["lease_id"]
		switch {
		case b["id"] == "hand-1" && has:
			t.Errorf("boost ls -o json: hand-1 (no lease) has lease_id %v", id)
		case b["id"] == "kr-2" && id != strconv.FormatInt(resp.Kvs[0].Lease, 16):
			t.Errorf("boost ls -o json: kr-2's lease_id %v, want %x", id, resp.Kvs[0].Lease)
		}
	}
}

// TestEligibilityCheckTakesTheNewestBoost: of two live boosts of one route
// the agents apply the newest write; the eligibility check does too. It
// used to order them by id, so with the newer boost's id the smaller, a
// drain of its pool (KR's only pool at the agents) passed without --force.
func TestEligibilityCheckTakesTheNewestBoost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.must(ExitOK, "apply", "-f", writeFile(t, "kr.yaml", `policy:
  residency:
    classes: {eu: [DE], apac: [KR]}
    unknown_country_class: eu
pools:
  kr-a: {host: kr-a.example.net:443, residency: apac, status: active}
  kr-b: {host: kr-b.example.net:443, residency: apac, status: active}
  eu-1: {host: eu-1.example.net:443, residency: eu, status: active}
routes:
  _default: {targets: [{pool: eu-1, weight: 100}]}
  KR: {targets: [{pool: kr-b, weight: 100}]}
`), "--allow-residency-change") // class eu narrower than the built-in one
	if r := e.must(ExitOK, "boost", "KR", "--target", "kr-b=100", "--ttl", "1h", "--id", "kr-z"); len(otherWarnings(r.stderr)) > 0 {
		t.Fatalf("the route's first boost: %s; want no warning", r)
	}
	// The second is written, with a warning naming the boost it overrides.
	if r := e.must(ExitOK, "boost", "KR", "--target", "kr-a=100", "--ttl", "1h", "--id", "kr-a"); !strings.Contains(r.stderr,
		"regionctl: warning: route KR has 1 live boost(s) already (kr-z): the newest boost of a route that sets targets sets its targets, and the attrs of all its boosts merge") ||
		!strings.Contains(r.stderr, "so this one's targets override theirs while it lives") {
		t.Fatalf("a second boost of KR: %s; want a warning naming kr-z", r)
	}
	// A newer one with attrs alone leaves the targets as they are, and
	// says so (the docs review: its warning said it overrode them).
	if r := e.must(ExitOK, "boost", "KR", "--attr", "lang=ko", "--ttl", "1h", "--id", "kr-attrs"); !strings.Contains(r.stderr,
		"so this one, which sets no targets, leaves theirs in force") || strings.Contains(r.stderr, "this one's targets override") {
		t.Fatalf("a boost of KR with attrs alone: %s; want a warning that it leaves the targets", r)
	}
	if r := e.must(ExitOK, "resolve", "KR", "--key", "v"); !strings.Contains(r.stdout, "kr-a") || !strings.Contains(r.stdout, "lang=ko") {
		t.Fatalf("resolve KR with three boosts: %s; want kr-a, the newest targets', with lang=ko", r)
	}
	e.must(ExitOK, "boost", "cancel", "kr-attrs")
	r := e.run("pool", "drain", "kr-a")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "country KR would have no eligible pool") {
		t.Fatalf("drain of the newest boost's only pool: %s; want exit 1 naming KR", r)
	}
	// Cancelled, the other boost serves KR (kr-b): the drain passes.
	e.must(ExitOK, "boost", "cancel", "kr-a")
	e.must(ExitOK, "pool", "drain", "kr-a")
}

// TestBoostAndRouteWarnWhenTheyDoNothing: a boost whose target is a
// draining pool, a route's new targets under a live boost that sets them,
// and a drain of a pool a live boost targets, are written, but serve no
// viewer as asked: each says so, naming the pool or the boost; a boost of
// an active pool, a change of a boosted route's attrs alone, and an
// undrain say nothing of it.
func TestBoostAndRouteWarnWhenTheyDoNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "drain", "eu-north", "--reason", "sto down")
	r := e.must(ExitOK, "boost", "SE", "--target", "eu-north=100", "--ttl", "10m", "--id", "se-b")
	if !strings.Contains(r.stderr, "regionctl: warning: the boost of SE targets eu-north (draining): no viewer goes there") {
		t.Errorf("a boost of a draining pool: %s; want a warning naming it", r)
	}
	if r := e.must(ExitOK, "boost", "PL", "--target", "eu-west=100", "--ttl", "10m", "--id", "pl-b"); len(otherWarnings(r.stderr)) > 0 {
		t.Errorf("a boost of an active pool: %s; want no warning", r)
	}
	r = e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=100", "--reason", "move PL")
	if !strings.Contains(r.stderr, "regionctl: warning: route PL has live boost(s) that set its targets (pl-b): its new targets take effect only when they end") {
		t.Errorf("route set of a boosted route's targets: %s; want a warning naming the boost", r)
	}
	if r := e.must(ExitOK, "route", "set", "PL", "--attr", "lang=pl", "--reason", "attrs only"); len(otherWarnings(r.stderr)) > 0 {
		t.Errorf("route set of a boosted route's attrs: %s; want no warning", r)
	}
	// The other order: draining a pool a live boost targets says so.
	r = e.must(ExitOK, "pool", "drain", "eu-west", "--force", "--reason", "ams down")
	if !strings.Contains(r.stderr, "regionctl: warning: pool eu-west is a target of live boost(s) pl-b (route PL): while it is out") {
		t.Errorf("drain of a boosted pool: %s; want a warning naming the boost", r)
	}
	if r := e.must(ExitOK, "pool", "undrain", "eu-west", "--reason", "back"); strings.Contains(r.stderr, "target of live boost") {
		t.Errorf("undrain of a boosted pool warned: %s", r)
	}
}

// TestBoostLsMarksBoostServingNoViewer: a boost whose pool is drained
// after it was written serves no viewer of its route (they go down the
// fallback chain past it): boost ls says so on stderr, naming it, and
// marks it in -o json; before the drain it says nothing.
func TestBoostLsMarksBoostServingNoViewer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "DE", "--target", "eu-west=100", "--ttl", "1h", "--id", "de-west")
	ls := e.must(ExitOK, "boost", "ls")
	var b []boostInfo
	mustJSON(t, e.must(ExitOK, "boost", "ls", "-o", "json").stdout, &b)
	if strings.Contains(ls.stderr, "serves no viewer") || len(b) != 1 || b[0].ServesNoViewer {
		t.Fatalf("boost ls of a boost that serves: %s %+v", ls, b)
	}
	e.must(ExitOK, "pool", "drain", "eu-west", "--reason", "test")
	if got := e.resolvePool("DE", "viewer-1"); got == "eu-west" || got == "" {
		t.Fatalf("DE with the boost's only pool drained: %q", got)
	}
	ls = e.must(ExitOK, "boost", "ls")
	if !strings.Contains(ls.stderr, "warning: boost de-west serves no viewer: none of its targets (eu-west 100) is eligible for a viewer of route DE") {
		t.Fatalf("boost ls with the boost's pool drained: %s", ls)
	}
	mustJSON(t, e.must(ExitOK, "boost", "ls", "-o", "json").stdout, &b)
	if len(b) != 1 || !b[0].ServesNoViewer {
		t.Fatalf("boost ls -o json with the boost's pool drained: %+v", b)
	}
}

// TestRetriedWriteWarnsOfTheCommittingAttempt: a write that --retry
// rebuilds on a newer state warns of what the attempt that commits saw,
// once, not of its first attempt's view. It used to warn from the first
// attempt alone: a boost retried past another boost of its route said the
// route had one live boost fewer than it had when it committed, and a
// --health-check retried past the pool's first heartbeat warned of none.
func TestRetriedWriteWarnsOfTheCommittingAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "FR", "--target", "eu-west=100", "--ttl", "10m", "--id", "fr-1")
	var calls atomic.Int32
	// Between the first attempt's read and its commit, another operator
	// boosts FR too.
	ctx := context.WithValue(context.Background(), afterReadHook{}, func() {
		if calls.Add(1) == 1 {
			e.must(ExitOK, "boost", "FR", "--target", "eu-west=100", "--ttl", "10m", "--id", "fr-2")
		}
	})
	r := e.runCtx(ctx, "boost", "FR", "--target", "eu-central=100", "--ttl", "10m", "--id", "fr-3", "--retry", "2")
	if r.code != ExitOK || calls.Load() != 2 {
		t.Fatalf("a boost retried once: %s (%d attempts); want exit 0 after 2 attempts", r, calls.Load())
	}
	if !strings.Contains(r.stderr, "route FR has 2 live boost(s) already (fr-1, fr-2)") || strings.Contains(r.stderr, "1 live boost(s)") ||
		strings.Count(r.stderr, "live boost(s) already") != 1 {
		t.Fatalf("a boost retried past another boost of FR: %s; want one warning naming fr-1 and fr-2", r)
	}

	// Between the first attempt's read and its commit, eu-central's first
	// heartbeat starts and another write moves the epoch: the attempt that
	// commits sees a live health key, so nothing to warn of.
	lease, err := testClient.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	defer testClient.Revoke(context.Background(), lease.ID)
	calls.Store(0)
	ctx = context.WithValue(context.Background(), afterReadHook{}, func() {
		if calls.Add(1) == 1 {
			if _, err := testClient.Put(context.Background(), e.ks.RoutingKey(routing.HealthKey("eu-central", "fra-1")),
				`{"addr":"10.0.0.1:443"}`, clientv3.WithLease(lease.ID)); err != nil {
				t.Error(err)
			}
			e.must(ExitOK, "pool", "set", "eu-west", "--attr", "other=1")
		}
	})
	r = e.runCtx(ctx, "pool", "set", "eu-central", "--health-check", "--retry", "2")
	if r.code != ExitOK || calls.Load() != 2 || len(otherWarnings(r.stderr)) > 0 {
		t.Fatalf("--health-check retried past the pool's first heartbeat: %s (%d attempts); want exit 0 after 2 attempts, no warning", r, calls.Load())
	}
}
