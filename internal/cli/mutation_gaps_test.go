package cli

// Gap tests from a mutation review of the write verbs (boost.go, pool.go,
// write.go, history.go, rollback.go, humandiff.go, get.go, export.go,
// configfile.go, exit.go): each kills a mutant the package's tests let
// live.

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// TestBoostTTLOfOneSecond: --ttl takes "a duration from 1s": 1s itself is
// a boost's shortest life, not a usage error.
func TestBoostTTLOfOneSecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1s", "--id", "kr-1s", "--dry-run")
	e.must(ExitUsage, "boost", "KR", "--target", "kr-music=100", "--ttl", "999ms", "--id", "kr-1s", "--dry-run")
}

// TestBoostOfAnIDInUseIsRefused: boost --id of a boost that exists is
// refused (exit 1, "extend or cancel it"), and the live boost is left as
// it was: not replaced with other targets under a new lease.
func TestBoostOfAnIDInUseIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--id", "kr-week")
	key := e.ks.RoutingKey(routing.OverrideKey("kr-week"))
	before := e.get(key)
	r := e.must(ExitRefused, "boost", "JP", "--target", "kr-music=100", "--attr", "lang=ja", "--ttl", "5m", "--id", "kr-week")
	if !strings.Contains(r.stderr, "REFUSED overrides/kr-week: boost already exists; extend or cancel it") {
		t.Errorf("boost of an id in use: %s; want it refused naming the id", r)
	}
	if got := e.get(key); got != before {
		t.Errorf("boost of an id in use replaced it: %s, was %s", got, before)
	}
}

// TestExpiredBoostIsNotCountedLive: a boost past its expires_at (its key
// kept by a lease an election renewed, or put by hand) is no live boost:
// a new boost of its route does not warn of it, and boost cancel of the
// route's name does not offer it.
func TestExpiredBoostIsNotCountedLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.putExpiredBoost("kr-old")
	r := e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--id", "kr-new")
	if strings.Contains(r.stderr, "live boost(s) already") {
		t.Errorf("boost of a route whose only other boost expired: %s; want no live-boost warning", r)
	}
	e.must(ExitOK, "boost", "cancel", "kr-new")
	r = e.must(ExitRefused, "boost", "cancel", "KR")
	if strings.Contains(r.stderr, "kr-old") || !strings.Contains(r.stderr, "no such live boost (it may have expired") {
		t.Errorf("boost cancel KR with only an expired boost: %s; want no live boost named", r)
	}
}

// TestBoostOfADownPoolWarns: a boost whose target is down (not only
// draining) warns that no viewer goes there while it is.
func TestBoostOfADownPoolWarns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "eu-north", "--status", "down", "--reason", "sto down")
	r := e.must(ExitOK, "boost", "SE", "--target", "eu-north=100", "--ttl", "10m", "--id", "se-b")
	if !strings.Contains(r.stderr, "regionctl: warning: the boost of SE targets eu-north (down): no viewer goes there") {
		t.Errorf("a boost of a down pool: %s; want a warning naming it", r)
	}
}

// TestBoostOfDefaultGetsAnID: a boost of _default without --id gets a
// generated id the key grammar takes (an id starts with a letter or a
// digit: "default-<time>-<random>").
func TestBoostOfDefaultGetsAnID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	r := e.must(ExitOK, "boost", "_default", "--attr", "banner=on", "--ttl", "10m")
	if !regexp.MustCompile(`(?m)^boost default-[0-9]{8}-[0-9]{6}-[0-9a-f]{4}: added \(on _default;`).MatchString(r.stdout) {
		t.Errorf("boost _default without --id: %s; want a generated id default-…", r)
	}
}

// TestBoostLsTTLSeconds: ttl_seconds in boost ls -o json is the lease's
// remaining life in seconds: an hour's boost has at most 3600 and, just
// written, more than 3500.
func TestBoostLsTTLSeconds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--id", "kr-1h")
	var b []boostInfo
	mustJSON(t, e.must(ExitOK, "boost", "ls", "-o", "json").stdout, &b)
	if len(b) != 1 || b[0].TTLSeconds == nil || *b[0].TTLSeconds > 3600 || *b[0].TTLSeconds < 3500 {
		t.Fatalf("boost ls -o json of a boost of 1h: %+v; want ttl_seconds in (3500, 3600]", b)
	}
}

// TestPoolSetCreateNeedsHostAndResidency: creating a pool with only one
// of --host and --residency is a usage error (2) naming both, not a
// validation refusal.
func TestPoolSetCreateNeedsHostAndResidency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	for _, args := range [][]string{
		{"pool", "set", "eu-east", "--host", "edge-waw-1.example.net"},
		{"pool", "set", "eu-east", "--residency", "eu"},
	} {
		r := e.must(ExitUsage, args...)
		if !strings.Contains(r.stderr, "pool eu-east does not exist: creating it needs --host and --residency") {
			t.Errorf("regionctl %s: %s; want the usage error naming both flags", strings.Join(args, " "), r)
		}
	}
}

// TestPoolSetKeepsFieldsNotGiven: pool set changes only the fields given:
// an --attr leaves the region (and the rest) as stored.
func TestPoolSetKeepsFieldsNotGiven(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	r := e.must(ExitOK, "pool", "set", "eu-central", "--attr", "max_rps=900")
	if first := strings.SplitN(r.stdout, "\n", 2)[0]; first != "pool eu-central: attrs.max_rps 800→900" {
		t.Errorf("pool set --attr: diff %q, want the attr alone", first)
	}
	var p routing.Pool
	mustJSON(t, e.get(e.ks.RoutingKey(routing.PoolKey("eu-central"))), &p)
	if p.Region != "eu-central" || p.Status != routing.StatusActive || p.Residency != "eu" {
		t.Errorf("pools/eu-central after pool set --attr: %+v; want region, status and residency kept", p)
	}
}

// TestPoolRmNamesLiveHealthKeysSorted: pool rm names every live health key
// of the pool, sorted (the same line on every run), one whose value does
// not decode included, and no key of another pool whose id it begins.
func TestPoolRmNamesLiveHealthKeysSorted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "test-hb", "--host", "edge-hb-1.example.net:443", "--residency", "eu")
	lease, err := testClient.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = testClient.Revoke(context.Background(), lease.ID) })
	var keys []string
	for _, hk := range []struct{ pool, inst string }{{"test-hb", "d-4"}, {"test-hb", "a-1"}, {"test-hb", "c-3"}, {"test-hb", "b-2"}, {"test-hb2", "a-0"}} {
		key := e.ks.RoutingKey(routing.HealthKey(hk.pool, hk.inst))
		if _, err := testClient.Put(context.Background(), key, `{"addr":"10.0.0.1:443"}`, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		if hk.pool == "test-hb" {
			keys = append(keys, key+" (addr 10.0.0.1:443)")
		}
	}
	// A live key whose value does not decode counts too (get pools: "1
	// live"; the agents count it): pool rm named only the decoded ones.
	garbage := e.ks.RoutingKey(routing.HealthKey("test-hb", "e-5"))
	if _, err := testClient.Put(context.Background(), garbage, "garbage", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	keys = append(keys, garbage+" (its value does not decode)")
	slices.Sort(keys)
	r := e.must(ExitOK, "pool", "rm", "test-hb", "--reason", "gone")
	want := "regionctl: warning: pool test-hb has 5 live health key(s): " + strings.Join(keys, ", ") + "; their heartbeats keep running"
	if !strings.Contains(r.stderr, want) {
		t.Fatalf("pool rm with 4 live health keys: %s; want %q", r, want)
	}
}

// TestBareWaitConvergedWaitsAMinute: a bare --wait-converged waits 1m (the
// docs' default) on every write verb; --retry, --expect-agents and
// --force default to 0 and off, and --dry-run to off.
func TestBareWaitConvergedWaitsAMinute(t *testing.T) {
	t.Parallel()
	a := &app{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	root := a.rootCmd()
	verbs := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		f := c.Flags().Lookup("wait-converged")
		if f == nil {
			return
		}
		verbs++
		if d, err := time.ParseDuration(f.NoOptDefVal); err != nil || d != time.Minute || f.DefValue != "0s" {
			t.Errorf("%s --wait-converged: bare %q, default %q; want 1m and 0s", c.CommandPath(), f.NoOptDefVal, f.DefValue)
		}
		for name, def := range map[string]string{"retry": "0", "expect-agents": "0", "force": "false", "dry-run": "false"} {
			if g := c.Flags().Lookup(name); g == nil || g.DefValue != def {
				t.Errorf("%s --%s: %v; want default %s", c.CommandPath(), name, g, def)
			}
		}
	}
	walk(root)
	if verbs < 10 { // apply, pool set/drain/undrain/rm, route set/rm, boost, cancel, extend, rollback
		t.Errorf("%d write verbs found; want at least 10", verbs)
	}
}

// TestReasonEndingNotUTF8IsRefused: a --reason whose last byte begins no
// UTF-8 character (a truncated multi-byte character, as a cut paste
// leaves) is refused as one with such a byte inside.
func TestReasonEndingNotUTF8IsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	r := e.must(ExitUsage, "pool", "drain", "eu-west", "--reason", "Z\xc3")
	if want := "--reason: byte 0xc3 at offset 1 (counting from 0) begins no UTF-8 character"; !strings.Contains(r.stderr, want) {
		t.Errorf("a --reason ending in a cut character: want %q\n%s", want, r)
	}
	if got := e.currentEpoch(); got != 1 {
		t.Errorf("a refused --reason wrote: epoch %d, want 1", got)
	}
}

// TestDryRunRefusedReadNamesTheViewer: a dry run only reads (the viewer's
// role is enough, docs/regionctl.md): refused its first read, it names
// the read it needs and the roles that hold it, not the operator's write
// grants a real write names.
func TestDryRunRefusedReadNamesTheViewer(t *testing.T) {
	e := newRBACEnv(t, true)
	p := rbacPrefix
	r := e.as(rbacOrigin, "route", "set", "PL", "--target", "eu-central=100", "--dry-run")
	want := "read " + p + "/routing/epoch needs read on " + p + "/routing/ (role regiond-viewer or regiond-operator)"
	if r.code != ExitRefused || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "regiond-operator)") && !strings.Contains(r.stderr, "regiond-viewer") {
		t.Errorf("a dry run refused its first read: %s; want exit 1 naming %q", r, want)
	}
	r = e.as(rbacOrigin, "route", "set", "PL", "--target", "eu-central=100")
	if want := "read " + p + "/routing/epoch needs " + commitNeeds(p) + " (role regiond-operator)"; r.code != ExitRefused || !strings.Contains(r.stderr, want) {
		t.Errorf("a write refused its first read: %s; want exit 1 naming %q", r, want)
	}
}

// TestHistoryListsTheNewest20: history with no --limit lists the newest 20
// records, newest first (the docs' default); --limit 0 lists them all.
func TestHistoryListsTheNewest20(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed() // epoch 1
	e.attrEpochs("eu-central", 2, 23)
	got := historyEpochs(t, e)
	if len(got) != 20 || got[0] != 23 || got[19] != 4 {
		t.Errorf("history: epochs %v; want the newest 20, 23 back to 4", got)
	}
	if all := historyEpochs(t, e, "--limit", "0"); len(all) != 23 {
		t.Errorf("history --limit 0: %d records, want 23", len(all))
	}
	lines := strings.Split(strings.TrimSpace(e.must(ExitOK, "history").stdout), "\n")
	if len(lines) != 21 || !strings.HasPrefix(lines[1], "23 ") {
		t.Errorf("history table: %d lines, first row %q; want a header and 20 rows from epoch 23", len(lines), lines[1])
	}
}

// TestEpochZeroIsAUsageError: epochs start at 1: history 0 and rollback 0
// are usage errors (2) saying so, before etcd is asked.
func TestEpochZeroIsAUsageError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	for _, args := range [][]string{{"history", "0"}, {"rollback", "0", "--dry-run"}} {
		if r := e.run(args...); r.code != ExitUsage || !strings.Contains(r.stderr, "a positive integer") || strings.Contains(r.stderr, "--touching") {
			t.Errorf("regionctl %s: %s; want a usage error asking for a positive integer (and no --touching 0: a number is no key)", strings.Join(args, " "), r)
		}
	}
	if r := e.run("history", "PL"); r.code != ExitUsage || !strings.Contains(r.stderr, "regionctl history --touching PL") {
		t.Errorf("regionctl history PL: %s; want a usage error suggesting --touching PL", r)
	}
}

// TestRollbackNeverNamesItsOwnEpochUndone: the epochs a rollback's warning
// names as undone are those after its target; with a later record
// deleted by hand, the records read reach back to the target, which is
// restored, not undone.
func TestRollbackNeverNamesItsOwnEpochUndone(t *testing.T) {
	t.Parallel()
	e := epochsOfPL(t, 4)
	if _, err := testClient.Delete(context.Background(), e.ks.Audit(4)); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "rollback", "2", "--dry-run")
	if strings.Contains(r.stderr, "first: 2 (") || strings.Contains(r.stderr, ", 2 (") {
		t.Errorf("rollback 2 --dry-run: %s; want epoch 2 not named among the epochs it undoes", r)
	}
	// Epochs 3 and 4 are undone; 4's record is gone: the warning said
	// nothing at all (one record found past the target).
	if !strings.Contains(r.stderr, "undoes the config changes of 2 later epochs, not only the first: 3 (") ||
		!strings.Contains(r.stderr, "and whatever epoch(s) 4 changed: their audit records are not kept") {
		t.Errorf("rollback 2 --dry-run over epoch 3 and epoch 4 without its record: %s; want both named undone", r)
	}
}

// TestDiffOfReorderedTargets: the same targets in another order are a
// change (a sticky viewer's pool follows the order) and read as one:
// "targets reordered …", not "rewritten (same meaning)".
func TestDiffOfReorderedTargets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	r := e.must(ExitOK, "route", "set", "PL", "--target", "eu-west=30", "--target", "eu-central=70", "--dry-run")
	if first := strings.SplitN(r.stdout, "\n", 2)[0]; first != "PL: targets reordered eu-west 30, eu-central 70" {
		t.Errorf("route set PL with its targets swapped: diff %q, want them named reordered", first)
	}
}

// TestDiffOfResidencyClasses: a policy change names each country added to
// a class with + and each one taken out with -.
func TestDiffOfResidencyClasses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	path := writeFile(t, "policy.yaml", `policy:
  residency:
    classes:
      eu: [AT, BE, BG, HR, CY, CZ, DK, EE, FI, FR, DE, GR, HU, IE, IT, LV, LT, LU, MT, NL, PL, PT, RO, SK, SI, ES, SE, IS, LI, NO, AX, GF, GP, MF, MQ, RE, CH]
    unknown_country_class: eu
`)
	r := e.must(ExitOK, "diff", "-f", path, "--allow-residency-change") // YT leaves class eu
	if got := strings.TrimSpace(r.stdout); got != "policy residency: class eu +CH; class eu -YT" {
		t.Errorf("diff of a policy adding CH and dropping YT: %q, want +CH and -YT", got)
	}
}

// TestDiffOfUnknownCountryClass: a change of unknown_country_class reads
// from the stored class to the new one.
func TestDiffOfUnknownCountryClass(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	path := writeFile(t, "policy.yaml", `policy:
  residency:
    classes:
      eu: [AT, BE, BG, HR, CY, CZ, DK, EE, FI, FR, DE, GR, HU, IE, IT, LV, LT, LU, MT, NL, PL, PT, RO, SK, SI, ES, SE, IS, LI, NO, AX, GF, GP, MF, MQ, RE, YT]
      apac: [JP]
    unknown_country_class: apac
`)
	// The diff is printed though the write would be refused (exit 1):
	// the unknown country leaves class eu (--allow-residency-change
	// would allow that), and no pool of class apac serves it (nothing
	// allows that).
	r := e.run("diff", "-f", path)
	if r.code != ExitRefused || !strings.Contains(r.stdout, "policy residency: unknown_country_class eu→apac; class apac +JP") ||
		!strings.Contains(r.stderr, "unknown_country_class") {
		t.Errorf("diff of unknown_country_class eu to apac: %s; want it named eu→apac, and refused naming unknown_country_class", r)
	}
}

// TestDiffOfAnExtendWithinTheSameSecond: boost extend whose new expires_at
// is the one stored (the same --ttl again within the second) changes
// only the lease, and says so: "new lease", not "rewritten (same
// meaning)".
func TestDiffOfAnExtendWithinTheSameSecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--id", "kr")
	for try := 0; try < 20; try++ {
		var w writeResult
		mustJSON(t, e.must(ExitOK, "boost", "extend", "kr", "--ttl", "1h", "-o", "json").stdout, &w)
		if len(w.Changes) != 1 || len(w.Diff) != 1 {
			t.Fatalf("boost extend: %+v; want one change", w)
		}
		var before, after routing.Override
		mustJSON(t, string(w.Changes[0].Before), &before)
		mustJSON(t, string(w.Changes[0].After), &after)
		if before.ExpiresAt != after.ExpiresAt {
			continue // the second turned between the two: try again
		}
		if w.Diff[0] != "boost kr: new lease" {
			t.Errorf("boost extend to the stored expires_at: diff %q, want \"boost kr: new lease\"", w.Diff[0])
		}
		return
	}
	t.Fatal("no two boost extends in 20 fell within one second")
}

// TestGetPoolsProvenanceFollowsFourWrites: get follows a pool key's writes
// back at most 4 (docs/regionctl.md): a drain followed by three attr sets
// is the 4th write back, and is found, with its reason.
func TestGetPoolsProvenanceFollowsFourWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "drain", "eu-west", "--reason", "disk failure") // 2
	e.attrEpochs("eu-west", 3, 5)
	want := `^eu-west draining since epoch 2 \(` + auditWhen + `: "disk failure"\)$`
	if line := provenanceLines(e.must(ExitOK, "get", "pools").stdout)["eu-west"]; !regexp.MustCompile(want).MatchString(line) {
		t.Errorf("get pools, the drain 4 writes back: %q, want %s", line, want)
	}
}

// TestExportJSONLeavesOutUnknownFields: export -o json, like the YAML,
// leaves out the stored fields this regionctl does not know (a config
// file is strict): its output applies as a no-op.
func TestExportJSONLeavesOutUnknownFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey(routing.PoolKey("eu-north")),
		`{"host":"edge-sto-1.example.net:443","region":"eu-north","residency":"eu","status":"active","weight_hint":3}`); err != nil {
		t.Fatal(err)
	}
	x := e.must(ExitOK, "export", "-o", "json")
	if strings.Contains(x.stdout, "weight_hint") || !strings.Contains(x.stderr, "pools/eu-north (weight_hint)") {
		t.Fatalf("export -o json: %s; want weight_hint left out and named on stderr", x)
	}
	path := writeFile(t, "exported.json", x.stdout)
	if r := e.must(ExitOK, "apply", "-f", path, "--prune"); !strings.Contains(r.stdout, "no changes") {
		t.Errorf("apply --prune of export -o json: %s, want no changes", r)
	}
}

// TestExportEscapesDELAlone: a value whose only control character is DEL
// is exported double-quoted, escaped, and reads back the same.
func TestExportEscapesDELAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "eu-north", "--attr", "del=a\x7fb")
	r := e.must(ExitOK, "export")
	if !strings.Contains(r.stdout, `del: "a\u007fb"`) || strings.Contains(r.stdout, "\x7f") {
		t.Fatalf("export of an attr holding DEL: %s; want it double-quoted, escaped", r)
	}
	if r := e.must(ExitOK, "apply", "-f", writeFile(t, "exported.yaml", r.stdout), "--prune"); !strings.Contains(r.stdout, "no changes") {
		t.Errorf("apply of the export: %s, want no changes", r)
	}
}

// TestMissingConfigFileIsAUsageError: -f naming no file is a usage error
// (2), for apply, diff and validate alike.
func TestMissingConfigFileIsAUsageError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	for _, verb := range []string{"apply", "diff", "validate"} {
		if r := e.run(verb, "-f", missing); r.code != ExitUsage || !strings.Contains(r.stderr, "read config file: ") {
			t.Errorf("regionctl %s -f %s: %s; want a usage error", verb, missing, r)
		}
	}
}

// putExpiredBoost puts, around regionctl, a boost of KR to kr-music past
// its expires_at and without a lease (as a key kept by a lease an
// election renewed, or put by hand).
func (e *tenv) putExpiredBoost(id string) {
	e.t.Helper()
	e.putHandEdit(routing.OverrideKey(id), `{"route":"KR","targets":[{"pool":"kr-music","weight":100}],"expires_at":"2020-01-01T00:00:00Z"}`)
}

// attrEpochs writes epochs from to to (each the previous epoch plus one),
// each a pool set of pool's attr n to the epoch's number.
func (e *tenv) attrEpochs(pool string, from, to int) {
	e.t.Helper()
	for i := from; i <= to; i++ {
		e.must(ExitOK, "pool", "set", pool, "--attr", fmt.Sprintf("n=%d", i))
	}
}
