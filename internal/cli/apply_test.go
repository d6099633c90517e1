package cli

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/regiond/regiond/routing"
)

// TestExportApplyNoOp: applying what export printed changes nothing, with
// or without --prune.
func TestExportApplyNoOp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=60", "--target", "eu-west=40", "--attr", "note=with spaces: and colons")
	exported := e.must(ExitOK, "export").stdout
	path := writeFile(t, "exported.yaml", exported)
	rev, n := e.fingerprint()
	for _, args := range [][]string{{"apply", "-f", path}, {"apply", "-f", path, "--prune"}, {"diff", "-f", path, "--prune"}} {
		r := e.must(ExitOK, args...)
		if !strings.Contains(r.stdout, "no changes") {
			t.Fatalf("regionctl %s: want no changes, got %s", strings.Join(args, " "), r)
		}
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n || e.get(e.ks.Epoch()) != "2" {
		t.Fatalf("no-op apply wrote: revision %d → %d, keys %d → %d, epoch %s", rev, rev2, n, n2, e.get(e.ks.Epoch()))
	}
	// The example file itself, applied again on top of its own export, is
	// also a no-op once PL is put back.
	e.must(ExitOK, "apply", "-f", exampleConfig)
	if r := e.must(ExitOK, "apply", "-f", exampleConfig, "--prune"); !strings.Contains(r.stdout, "no changes") {
		t.Fatalf("second apply of the example: %s", r)
	}
}

// TestExportControlCharactersRoundTrip: a stored value holding control
// characters (an ESC, DEL, a C1 control, a right-to-left override, a line
// separator, a noncharacter; an attr key with one too) is exported as a
// double-quoted YAML string with them escaped, and applying the export is
// a no-op. The YAML encoder refused DEL and U+0085 (export failed whole),
// read U+0085 back as a space and wrote U+202E raw (apply changed the value).
func TestExportControlCharactersRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	attrs := map[string]string{
		"x":          "a\u001b[31mRED\u007f\u0085\u202eevil",
		"nel":        "a\u0085b",
		"rlo":        "shard\u202e",
		"lines":      "one\ntwo\u001b \"q\" back\\slash",
		"sep":        "a\u2028b\uffff",
		"k\u202ekey": "plain",
	}
	var pool map[string]any
	mustJSON(t, e.get(e.ks.RoutingKey("pools/eu-north")), &pool)
	pool["attrs"] = attrs
	b, _ := json.Marshal(pool)
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey("pools/eu-north"), string(b)); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "export")
	if !strings.Contains(r.stdout, `x: "a\x1b[31mRED\u007f\u0085\u202eevil"`) || !strings.Contains(r.stdout, `"k\u202ekey": plain`) {
		t.Errorf("export: want the values double-quoted, escaped:\n%s", r)
	}
	if i := firstControl([]byte(r.stdout)); i >= 0 {
		t.Errorf("export wrote a control character raw at byte %d:\n%q", i, r.stdout)
	}
	cfg, err := routing.ParseConfig([]byte(r.stdout))
	if err != nil {
		t.Fatalf("export's output does not parse: %v\n%s", err, r.stdout)
	}
	for k, v := range attrs {
		if got := cfg.Pools["eu-north"].Attrs[k]; got != v {
			t.Errorf("attr %q read back from export as %q, want %q", k, got, v)
		}
	}
	path := writeFile(t, "exported.yaml", r.stdout)
	rev, n := e.fingerprint()
	for _, args := range [][]string{{"diff", "-f", path, "--prune", "--exit-code"}, {"apply", "-f", path, "--prune"}} {
		if r := e.must(ExitOK, args...); !strings.Contains(r.stdout, "no changes") {
			t.Errorf("regionctl %s: want no changes, got %s", strings.Join(args, " "), r)
		}
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Errorf("apply of the export wrote: revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}
}

// TestDryRun: --dry-run prints exactly the diff a real run then writes,
// and writes nothing.
func TestDryRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	cfg := strings.Replace(e.must(ExitOK, "export").stdout, "status: active", "status: draining", 1)
	path := writeFile(t, "changed.yaml", cfg)
	rev, n := e.fingerprint()
	dry := e.must(ExitOK, "apply", "-f", path, "--dry-run", "-o", "json")
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatalf("--dry-run wrote: revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}
	real := e.must(ExitOK, "apply", "-f", path, "-o", "json", "--reason", "drain apac-singapore")
	var d, w writeResult
	mustJSON(t, dry.stdout, &d)
	mustJSON(t, real.stdout, &w)
	if !d.DryRun || w.DryRun || d.Epoch != 2 || w.Epoch != 2 {
		t.Fatalf("dry %+v real %+v", d, w)
	}
	if dj, wj := marshal(t, d.Changes), marshal(t, w.Changes); dj != wj || strings.Join(d.Diff, "\n") != strings.Join(w.Diff, "\n") {
		t.Fatalf("dry run printed\n%s\n%s\nreal run wrote\n%s\n%s", d.Diff, dj, w.Diff, wj)
	}
	if len(w.Diff) != 1 || w.Diff[0] != "pool apac-singapore: status active→draining" {
		t.Fatalf("diff = %q", w.Diff)
	}
	rec := e.audit(2)
	if marshal(t, rec.Changes) != marshal(t, w.Changes) || rec.Reason != "drain apac-singapore" || !strings.HasPrefix(rec.Command, "apply -f ") {
		t.Fatalf("audit record %+v does not match the write %+v", rec, w)
	}
	// A dry run of a verb prints the same human diff.
	r := e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=60", "--target", "eu-west=40", "--dry-run")
	if !strings.Contains(r.stdout, "PL: targets eu-central 70→60, eu-west 30→40\n") || !strings.Contains(r.stdout, "nothing written") {
		t.Fatalf("dry-run route set: %s", r)
	}
}

// TestPrune: apply never deletes without --prune; with it, config keys
// absent from the file go, and boosts stay.
func TestPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "JP", "--target", "kr-music=100", "--ttl", "1h", "--id", "jp-boost")
	data, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	without := strings.Replace(string(data), "  CZ: {targets: [{pool: eu-central, weight: 100}], fallback: [eu-general], attrs: {lang: cs, tokenizer: unicode61}}\n", "", 1)
	path := writeFile(t, "no-cz.yaml", without)
	if r := e.must(ExitOK, "apply", "-f", path); !strings.Contains(r.stdout, "no changes") {
		t.Fatalf("apply without --prune deleted: %s", r)
	}
	r := e.must(ExitOK, "diff", "-f", path, "--prune")
	if strings.TrimSpace(r.stdout) != "CZ: removed" {
		t.Fatalf("diff --prune: %s", r)
	}
	r = e.must(ExitOK, "apply", "-f", path, "--prune")
	if !strings.Contains(r.stdout, "CZ: removed") || e.get(e.ks.RoutingKey("routes/CZ")) != "" {
		t.Fatalf("apply --prune kept CZ: %s", r)
	}
	if e.get(e.ks.RoutingKey("overrides/jp-boost")) == "" {
		t.Fatal("apply --prune removed a boost")
	}
}

// TestHumanDiffs checks the one-line diffs operators read.
func TestHumanDiffs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"pool", "drain", "eu-north"}, "pool eu-north: status active→draining"},
		{[]string{"pool", "undrain", "eu-north"}, "pool eu-north: status draining→active"},
		{[]string{"route", "set", "PL", "--target", "eu-central=60", "--target", "eu-west=40"}, "PL: targets eu-central 70→60, eu-west 30→40"},
		{[]string{"route", "set", "PL", "--target", "eu-central=60", "--target", "eu-north=40"}, "PL: targets eu-north none→40, eu-west 40→none"},
		{[]string{"route", "set", "PL", "--attr", "lang=en", "--unset-attr", "cron_minutes"}, "PL: attrs.cron_minutes 15→none; attrs.lang pl→en"},
		{[]string{"route", "set", "CZ", "--fallback", "eu-general,_default", "--affinity", "random"}, "CZ: fallback eu-general→eu-general _default; affinity sticky→random"},
		{[]string{"pool", "set", "eu-east", "--host", "edge-waw-1.example.net:443", "--residency", "eu"}, "pool eu-east: added (host edge-waw-1.example.net:443; residency eu; status active)"},
		{[]string{"pool", "set", "eu-east", "--attr", "shard=eu-4", "--health-check"}, "pool eu-east: health_check false→true; attrs.shard none→eu-4"},
		{[]string{"route", "set", "SK", "--target", "eu-east=100", "--fallback", "eu-general"}, "SK: added (targets eu-east 100; fallback eu-general)"},
		{[]string{"route", "rm", "SK"}, "SK: removed"},
		{[]string{"pool", "rm", "eu-east"}, "pool eu-east: removed"},
		// An addition shows every field given: attrs too.
		{[]string{"pool", "set", "eu-east", "--host", "edge-waw-1.example.net:443", "--residency", "eu", "--attr", "shard=eu-4", "--health-check", "--force"},
			"pool eu-east: added (host edge-waw-1.example.net:443; residency eu; status active; health_check; attrs shard=eu-4)"},
		{[]string{"route", "set", "SK", "--target", "eu-east=100", "--attr", "lang=sk", "--affinity", "random", "--force"},
			"SK: added (targets eu-east 100; affinity random; attrs lang=sk)"},
	}
	for _, tc := range cases {
		r := e.must(ExitOK, tc.args...)
		if first := strings.SplitN(r.stdout, "\n", 2)[0]; first != tc.want {
			t.Errorf("regionctl %s: diff %q, want %q", strings.Join(tc.args, " "), first, tc.want)
		}
	}
}

func mustJSON(t testing.TB, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

func marshal(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// audit reads the audit record of an epoch.
func (e *tenv) audit(epoch int64) routing.Audit {
	e.t.Helper()
	var rec routing.Audit
	mustJSON(e.t, e.get(e.ks.Audit(epoch)), &rec)
	return rec
}

// TestDiffRefusesWhatApplyRefuses: diff runs apply's checks, not only the
// config's validation: a file that drains every EU pool (countries left
// with no eligible pool) and one that removes a pool a live boost names are
// refused by diff (exit 1, valid false, the reason named) as by apply;
// with --force the first is valid for both.
func TestDiffRefusesWhatApplyRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "JP", "--target", "kr-music=100", "--ttl", "1h", "--id", "jp-boost")
	drain := writeFile(t, "drain.yaml", `pools:
  eu-central: {host: edge-fra-1.example.net:443, region: eu-central, residency: eu, status: draining}
  eu-west: {host: edge-ams-1.example.net:443, region: eu-west, residency: eu, status: draining}
  eu-north: {host: edge-sto-1.example.net:443, region: eu-north, residency: eu, status: draining}
`)
	data, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := routing.ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	delete(cfg.Pools, "kr-music")
	for name, r := range cfg.Routes {
		kept := r.Targets[:0]
		for _, tg := range r.Targets {
			if tg.Pool != "kr-music" {
				kept = append(kept, tg)
			}
		}
		if len(kept) < len(r.Targets) {
			kept[0].Weight = 100
			kept = kept[:1]
			r.Targets = kept
			cfg.Routes[name] = r
		}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	noKR := writeFile(t, "no-kr-music.json", string(b))
	for _, c := range []struct {
		name, file, why string
	}{
		{"every EU pool drained", drain, "would have no eligible pool"},
		{"the boosted pool removed", noKR, "live boost"},
	} {
		d := e.run("diff", "-f", c.file, "--prune="+map[bool]string{true: "true", false: "false"}[c.file == noKR], "-o", "json")
		var out diffResult
		if err := json.Unmarshal([]byte(d.stdout), &out); err != nil {
			t.Fatalf("%s: diff -o json: %v\n%s", c.name, err, d)
		}
		if d.code != ExitRefused || out.Valid || !strings.Contains(d.stderr, c.why) || len(out.Changes) == 0 {
			t.Errorf("%s: diff exit %d, valid %v, %d changes, want exit %d, valid false, the changes and %q\n%s",
				c.name, d.code, out.Valid, len(out.Changes), ExitRefused, c.why, d)
		}
		args := []string{"apply", "-f", c.file, "--dry-run"}
		if c.file == noKR {
			args = append(args, "--prune")
		}
		if a := e.run(args...); a.code != ExitRefused || !strings.Contains(a.stderr, c.why) {
			t.Errorf("%s: apply --dry-run exit %d, want it refused too (%q)\n%s", c.name, a.code, c.why, a)
		}
	}
	d := e.run("diff", "-f", drain, "--force", "-o", "json")
	var out diffResult
	if err := json.Unmarshal([]byte(d.stdout), &out); err != nil || d.code != ExitOK || !out.Valid {
		t.Errorf("diff --force of the drain: exit %d, valid %v, want 0 and valid (%v)\n%s", d.code, out.Valid, err, d)
	}
	// Forced, the diff and the dry run still name the countries left
	// with no pool.
	if !strings.Contains(out.Forced, "no eligible pool") || !strings.Contains(d.stderr, "regionctl: warning: forced (--force): ") {
		t.Errorf("diff --force of the drain: forced %q; want the countries it leaves with no pool\n%s", out.Forced, d)
	}
	if a := e.must(ExitOK, "apply", "-f", drain, "--force", "--dry-run"); !strings.Contains(a.stderr, "no eligible pool") {
		t.Errorf("apply --force --dry-run of the drain: %s; want the countries it leaves with no pool", a)
	}
}

// TestUnknownFieldsSurviveExportAndApply: stored values may carry fields
// this regionctl does not know (written by a newer version: kept, as the
// agent keeps them). export leaves them out (a config file is strict) and
// says so; applying its output, with or without --prune, is a no-op and
// keeps them; applying a changed pool keeps them too.
func TestUnknownFieldsSurviveExportAndApply(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	pool := e.ks.RoutingKey(routing.PoolKey("eu-north"))
	route := e.ks.RoutingKey(routing.RouteKey("KR"))
	put := func(key, val string) {
		t.Helper()
		if _, err := testClient.Put(context.Background(), key, val); err != nil {
			t.Fatal(err)
		}
	}
	put(pool, `{"host":"edge-sto-1.example.net:443","region":"eu-north","residency":"eu","status":"active","weight_hint":3}`)
	put(route, `{"targets":[{"pool":"kr-music","weight":70,"slo":"p99"},{"pool":"apac-tokyo","weight":30}],"fallback":["apac-general"],"attrs":{"lang":"ko","tokenizer":"icu"},"canary":true}`)
	x := e.must(ExitOK, "export")
	if strings.Contains(x.stdout, "weight_hint") || !strings.Contains(x.stderr, "pools/eu-north (weight_hint)") ||
		!strings.Contains(x.stderr, "routes/KR (canary)") || !strings.Contains(x.stderr, "routes/KR target kr-music (slo)") {
		t.Fatalf("export: want the unknown fields left out and named on stderr\n%s", x)
	}
	path := writeFile(t, "exported.yaml", x.stdout)
	for _, args := range [][]string{{"apply", "-f", path}, {"apply", "-f", path, "--prune"}} {
		if r := e.must(ExitOK, args...); !strings.Contains(r.stdout, "no changes") {
			t.Errorf("%v of export's output: %s, want no changes", args, r)
		}
	}
	changed := strings.Replace(x.stdout, "edge-sto-1.example.net:443", "edge-sto-2.example.net:443", 1)
	e.must(ExitOK, "apply", "-f", writeFile(t, "changed.yaml", changed))
	if v := e.get(pool); !strings.Contains(v, `"weight_hint":3`) || !strings.Contains(v, "edge-sto-2") {
		t.Errorf("after apply of a changed pool: %s, want the new host and weight_hint kept", v)
	}
	if v := e.get(route); !strings.Contains(v, `"canary":true`) || !strings.Contains(v, `"slo":"p99"`) {
		t.Errorf("after apply: routes/KR = %s, want its unknown fields kept", v)
	}
}

// TestApplyFromStandardInput: -f - reads the config from standard input,
// as kubectl does (regionctl export | … | regionctl apply -f -), and the
// audit record says -f -.
func TestApplyFromStandardInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	cfg := e.must(ExitOK, "export").stdout
	changed := strings.Replace(cfg, "edge-fra-1.example.net", "edge-fra-9.example.net", 1)
	if changed == cfg {
		t.Fatal("export lacks edge-fra-1.example.net")
	}
	ctx := context.WithValue(context.Background(), stdinHook{}, strings.NewReader(changed))
	r := e.runCtx(ctx, "apply", "-f", "-", "--reason", "from a pipe")
	if r.code != ExitOK || !strings.Contains(r.stdout, "edge-fra-9.example.net") {
		t.Fatalf("apply -f -: %s", r)
	}
	if rec := e.audit(2); rec.Command != "apply -f - --reason 'from a pipe'" {
		t.Fatalf("audit: %+v", rec)
	}
	ctx = context.WithValue(context.Background(), stdinHook{}, strings.NewReader("pools: [\n"))
	if r := e.runCtx(ctx, "validate", "-f", "-"); r.code == ExitOK || !strings.Contains(r.stderr, "(standard input)") {
		t.Fatalf("validate -f - of a broken file: %s; want a refusal naming standard input", r)
	}
}

// TestDiffExitCode checks diff --exit-code as a drift check: 0 when etcd
// holds the file, 6 when apply would change something (the diff on stdout,
// nothing on stderr, in table and JSON output), 1 when apply would refuse.
func TestDiffExitCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	if r := e.must(ExitOK, "diff", "-f", exampleConfig, "--prune", "--exit-code"); !strings.Contains(r.stdout, "no changes") {
		t.Fatalf("diff of the applied file: %s", r)
	}
	data, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	noCZ := writeFile(t, "no-cz.yaml", strings.Replace(string(data), "  CZ: {targets: [{pool: eu-central, weight: 100}], fallback: [eu-general], attrs: {lang: cs, tokenizer: unicode61}}\n", "", 1))
	e.must(ExitOK, "diff", "-f", noCZ, "--exit-code") // without --prune the file changes nothing
	r := e.must(ExitDiffers, "diff", "-f", noCZ, "--prune", "--exit-code")
	if strings.TrimSpace(r.stdout) != "CZ: removed" || r.stderr != "" {
		t.Fatalf("diff --exit-code of a drifted file: %s", r)
	}
	r = e.must(ExitDiffers, "diff", "-f", noCZ, "--prune", "--exit-code", "-o", "json")
	if !strings.Contains(r.stdout, `"CZ: removed"`) || r.stderr != "" {
		t.Fatalf("diff --exit-code -o json: %s", r)
	}
	drain := writeFile(t, "drain.yaml", `pools:
  eu-central: {host: edge-fra-1.example.net:443, region: eu-central, residency: eu, status: draining}
  eu-west: {host: edge-ams-1.example.net:443, region: eu-west, residency: eu, status: draining}
  eu-north: {host: edge-sto-1.example.net:443, region: eu-north, residency: eu, status: draining}
`)
	if r := e.must(ExitRefused, "diff", "-f", drain, "--exit-code"); !strings.Contains(r.stderr, "REFUSED") {
		t.Fatalf("a refused diff with --exit-code: %s", r)
	}
}

// TestPartialObjectSaysObjectsAreWhole: a file holding a pool's one field
// (status: draining), written as for kubectl apply, which merges, is
// refused for the fields it lacks, and says why: apply replaces objects
// whole (the CLI review: "host: must not be empty" alone).
func TestPartialObjectSaysObjectsAreWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	f := writeFile(t, "partial.yaml", "pools:\n  eu-west: {status: draining}\n")
	r := e.must(ExitRefused, "apply", "-f", f, "--reason", "drain")
	if !strings.Contains(r.stderr, "pools/eu-west: host: must not be empty") || !strings.Contains(r.stderr, "a config file's objects are whole: apply replaces each stored object by the file's") {
		t.Fatalf("apply of a pool's one field: %s", r)
	}
}
