package cli

// Gap tests from a mutation review of export and diff (export.go,
// exportkv.go, diff.go, humandiff.go): each kills a mutant the package's
// tests let live.

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestExpGapDiffNamesEveryChange: diff names every field a file changes,
// never hiding one behind "rewritten (same meaning)": a pool's residency
// (its data-residency class) and region, an attr added with an empty
// value (present is not absent), the attrs in key order whatever the map
// order; diff -o json's epoch is the stored epoch the diff was read at;
// and diff -o yaml of a file whose own values are invalid says valid
// false with the problems, as -o json does.
func TestExpGapDiffNamesEveryChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "drain", "uk-london", "--reason", "epoch 2")
	e.must(ExitOK, "pool", "undrain", "uk-london", "--reason", "epoch 3")
	f := writeFile(t, "eu-north.yaml", `pools:
  eu-north:
    host: edge-sto-1.example.net:443
    region: eu-north-2
    residency: uk
    status: active
    attrs: {shard: eu-3, cdn: cdn-eu.example.net, max_rps: "300", a1: "", z9: x, m5: y, b2: w, k7: v}
`)
	// Residency uk may be refused (EU countries' chains): the diff is
	// printed either way.
	r := e.run("diff", "-f", f, "-o", "json")
	var out diffResult
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("diff -o json: %v\n%s", err, r)
	}
	const want = `pool eu-north: residency eu→uk; region eu-north→eu-north-2; attrs.a1 none→""; attrs.b2 none→w; attrs.k7 none→v; attrs.m5 none→y; attrs.z9 none→x`
	if len(out.Diff) != 1 || out.Diff[0] != want {
		t.Errorf("diff of a pool's residency, region and attrs: %q\nwant %q", out.Diff, want)
	}
	if out.Epoch != 3 || e.currentEpoch() != 3 {
		t.Errorf("diff -o json: epoch %d, want the stored epoch %d", out.Epoch, e.currentEpoch())
	}

	bad := writeFile(t, "bad.yaml", "pools:\n  p: {host: \"\", residency: eu, status: active}\n")
	y := e.run("diff", "-f", bad, "-o", "yaml")
	var got struct {
		Valid    *bool    `json:"valid"`
		Problems []string `json:"problems"`
	}
	if y.code != ExitRefused || yaml.Unmarshal([]byte(y.stdout), &got) != nil || got.Valid == nil || *got.Valid ||
		!strings.Contains(strings.Join(got.Problems, "\n"), "pools/p: host: must not be empty") {
		t.Errorf("diff -o yaml of a file with an invalid value: %s; want valid false and the problem", y)
	}
}

// TestExpGapExportRoundTrips: export's output, as YAML (also with -o yaml,
// which is the same config file) and as JSON, applies as a no-op (diff
// --prune --exit-code exits 0), for a plain value that looks like the
// encoder's stand-in for a quoted one beside a value that needs quoting
// (an ESC): -o yaml too must write the config file, escaped so that apply
// reads the same characters back, not the printer's text "\x1b".
func TestExpGapExportRoundTrips(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	attrs := map[string]string{
		"si":  "regionctl-quoted-0-end",
		"esc": "x\x1b[31my",
	}
	var pool map[string]any
	mustJSON(t, e.get(e.ks.RoutingKey("pools/eu-north")), &pool)
	pool["attrs"] = attrs
	b, _ := json.Marshal(pool)
	e.putHandEdit("pools/eu-north", string(b))
	for _, o := range []string{"table", "yaml", "json"} {
		x := e.must(ExitOK, "export", "-o", o)
		if i := firstControl([]byte(x.stdout)); i >= 0 {
			t.Errorf("export -o %s wrote a control character raw at byte %d:\n%q", o, i, x.stdout)
		}
		r := e.run("diff", "-f", writeFile(t, "exported-"+o, x.stdout), "--prune", "--exit-code")
		if r.code != ExitOK || !strings.Contains(r.stdout, "no changes") {
			t.Errorf("diff --prune --exit-code of export -o %s: %s; want no changes, exit 0\nexport:\n%s", o, r, x.stdout)
		}
	}
}

// TestExpGapExportKVTimesAndHealth: export kv's written_at and synced_at
// are the time of the read (a worker's max age counts from them), and a
// health-checked pool with no live health key is unhealthy in the export
// at once, with no grace window (the entries equal the index's compiled
// without one); an --out whose directory is a regular file is a usage
// error (2), as a missing directory is, not a failed write (1).
func TestExpGapExportKVTimesAndHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "eu-central", "--health-check", "--reason", "test")
	before := time.Now()
	m := map[string]kvValue{}
	mustJSON(t, e.must(ExitOK, "export", "kv", "--format", "map").stdout, &m)
	after := time.Now()
	e.checkKVExport(m)
	if de := m["DE"].Entry; !bytes.Contains(de, []byte("pool-unhealthy:eu-central")) {
		t.Errorf("DE entry with eu-central health-checked and no live key: %s; want it unhealthy", de)
	}
	for _, k := range []string{"DE", "_unknown"} {
		v := m[k]
		w, err1 := time.Parse(time.RFC3339Nano, v.WrittenAt)
		s, err2 := time.Parse(time.RFC3339Nano, v.SyncedAt)
		if err1 != nil || err2 != nil || !w.Equal(s) || w.Before(before.Add(-time.Second)) || w.After(after.Add(time.Second)) {
			t.Errorf("export kv %s: written_at %q synced_at %q; want both the time of the read (%v..%v)", k, v.WrittenAt, v.SyncedAt, before, after)
		}
	}
	notDir := writeFile(t, "not-a-dir", "x")
	if r := e.must(ExitUsage, "export", "kv", "--out", filepath.Join(notDir, "kv.json")); !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("export kv --out under a regular file: %s; want a usage error naming the directory", r)
	}
}
