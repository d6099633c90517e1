// Package js_test runs the JavaScript reader (regiond.mjs, node.mjs)
// through testdata/driver.mjs and checks it against Go: xxh64 and the
// sticky score on the same vectors, and every decision of every header
// (AA..ZZ, junk, _unknown) × 1,000 keys through the KV export and the
// index file (sync and async), on tables with drained, down, unhealthy and
// boosted pools, NoRoute and a stale table. The tests need Node 18+
// (Debian bookworm's nodejs; the module is written for Node 20+ and
// Workers and uses nothing newer than 18): without it they skip, naming
// it, unless CI=true (then they fail; .ci/run installs nodejs).
package js_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// node returns the node binary; a missing or older than 18 node skips the
// test (fails it in CI).
func node(t testing.TB) string {
	t.Helper()
	return fleettest.Node(t)
}

// runNode runs the driver with args, stdin as JSON, and returns stdout.
func runNode(t testing.TB, stdin any, args ...string) []byte {
	t.Helper()
	in, err := json.Marshal(stdin)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node(t), append([]string{filepath.Join("testdata", "driver.mjs")}, args...)...)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node driver %v: %v\nstderr: %s", args, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Fatalf("node driver %v wrote to stderr: %s", args, stderr.String())
	}
	return stdout.Bytes()
}

// writeTemp writes b to a file named name in a temp dir.
func writeTemp(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// randomKey returns a sticky key: session-id-like most of the time, but
// also arbitrary bytes (NUL, invalid UTF-8), UTF-8 text and keys of up to
// 450 bytes.
func randomKey(r *rand.Rand) string {
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	var b []byte
	switch r.IntN(10) {
	case 0:
		b = make([]byte, 1+r.IntN(40))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
	case 1:
		b = make([]byte, 250+r.IntN(200))
		for i := range b {
			b[i] = alnum[r.IntN(len(alnum))]
		}
	case 2:
		return []string{"żółć-ü", "視聴者-42", "🎬viewer", "ключ"}[r.IntN(4)] + strconv.Itoa(r.IntN(1000))
	case 3:
		b = []byte{alnum[r.IntN(len(alnum))]}
	default:
		b = make([]byte, 8+r.IntN(32))
		for i := range b {
			b[i] = alnum[r.IntN(len(alnum))]
		}
	}
	return string(b)
}

// TestRefusesWhatWouldDecideWrongly: the JS reader refuses a max age that
// is not a positive number (Number("15m") is NaN, which would compare
// false and switch staleness off) and a sticky key that is neither a
// string nor bytes (a number has no length: it was picked at random); a
// numeric max age and string or byte keys decide, the bytes as the
// string's UTF-8.
func TestRefusesWhatWouldDecideWrongly(t *testing.T) {
	script := `
import { decideEntry, isStale } from './regiond.mjs';
const header = { revision: 7, epoch: 1, synced_at: new Date(Date.now() - 100000 * 1000).toISOString() };
const entry = { route: 'PL', fallback_depth: 0, affinity: 'sticky', degraded: [], attrs: {},
  candidates: [{ pool: 'a', host: 'a:443', weight: 50, attrs: {} }, { pool: 'b', host: 'b:443', weight: 50, attrs: {} }] };
const out = [];
for (const m of [Number('15m'), 0, -5, Infinity, '900']) {
  try { isStale(header, { maxAgeSeconds: m }); out.push('accepted ' + String(m)); }
  catch (e) { out.push(e.name + ': ' + e.message); }
}
out.push('stale at 900: ' + isStale(header, { maxAgeSeconds: 900 }));
try { decideEntry(header, 'PL', entry, 12345, { maxAgeSeconds: 900 }); out.push('accepted a number key'); }
catch (e) { out.push(e.name + ': ' + e.message); }
const s = decideEntry(header, 'PL', entry, 'viewer-é', { maxAgeSeconds: 900 }).pool;
const b = decideEntry(header, 'PL', entry, new TextEncoder().encode('viewer-é'), { maxAgeSeconds: 900 }).pool;
out.push('string and bytes agree: ' + (s === b));
console.log(out.join('\n'));
`
	cmd := exec.Command(node(t), "--input-type=module", "-e", script)
	cmd.Dir = "."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	want := `RangeError: regiond: maxAgeSeconds NaN: want a positive number of seconds (e.g. 900)
RangeError: regiond: maxAgeSeconds 0: want a positive number of seconds (e.g. 900)
RangeError: regiond: maxAgeSeconds -5: want a positive number of seconds (e.g. 900)
RangeError: regiond: maxAgeSeconds Infinity: want a positive number of seconds (e.g. 900)
RangeError: regiond: maxAgeSeconds 900: want a positive number of seconds (e.g. 900)
stale at 900: true
TypeError: regiond: sticky key of type number: want a string, a Uint8Array, or null
string and bytes agree: true
`
	if string(out) != want {
		t.Fatalf("node said:\n%s\nwant:\n%s", out, want)
	}
}

// TestNoRouteBodyCarriesEpochZero: NoRouteError's toJSON is the agent's
// 503 body, which names its table's epoch, 0 (nothing applied yet) too.
func TestNoRouteBodyCarriesEpochZero(t *testing.T) {
	script := `
import { NoRouteError } from './regiond.mjs';
console.log(JSON.stringify(new NoRouteError('DE', ['no-route:DE'], 7, 0)));
`
	cmd := exec.Command(node(t), "--input-type=module", "-e", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	if want := `{"error":"no eligible pool","code":"no_route","country":"DE","reasons":["no-route:DE"],"revision":7,"epoch":0}` + "\n"; string(out) != want {
		t.Fatalf("NoRouteError body %s, want the agent's %s", out, want)
	}
}

// TestKVExportStaleAtItsValidUntil: a KV export's value carries the first
// instant the table changes its entry by the clock alone (here KR's, at a
// boost's expires_at; PL's none), and the JS reader marks its decisions
// stale-table from then on: nothing rewrites the values when the boost
// ends, as the agent rewrites its file (whose index carries none).
func TestKVExportStaleAtItsValidUntil(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	ends := now.Add(10 * time.Second)
	vals, err := fleettest.Config(t).Values()
	if err != nil {
		t.Fatal(err)
	}
	kvs := []routing.KV{{Key: routing.EpochKey, Value: []byte("3"), ModRevision: 1}}
	for k, v := range vals {
		kvs = append(kvs, routing.KV{Key: k, Value: v, ModRevision: 2})
	}
	boost, _ := json.Marshal(routing.Override{Route: "KR", Targets: []routing.Target{{Pool: "kr-music", Weight: 100}}, ExpiresAt: ends.Format(time.RFC3339)})
	kvs = append(kvs, routing.KV{Key: routing.OverrideKey("kr-1"), Value: boost, ModRevision: 3})
	tab := routing.Compile(3, kvs, nil, routing.CompileOptions{Now: now, Start: now.Add(-time.Hour)})
	vs, err := snapindex.KVValues(tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	var kr, pl string
	for _, v := range vs {
		switch v.Key {
		case "KR":
			kr = string(v.Value)
		case "PL":
			pl = string(v.Value)
		}
	}
	if want := `"valid_until":"` + ends.Format(time.RFC3339Nano) + `"`; !strings.Contains(kr, want) {
		t.Fatalf("KR's value %s: want %s", kr, want)
	}
	// PL's entry does not change when the KR boost ends: no valid_until.
	// Nor has the agent's own index one: it rewrites its file then.
	idx, err := snapindex.Encode(nil, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(pl, "valid_until") || bytes.Contains(idx, []byte("valid_until")) {
		t.Fatalf("PL's value %s, or the index, has a valid_until", pl)
	}
	script := `
import { decideEntry } from './regiond.mjs';
const v = JSON.parse(process.argv[1]);
const ends = Date.parse(v.valid_until);
for (const now of [ends - 1, ends]) {
  const d = decideEntry(v, v.country, v.entry, 'viewer-1', { maxAgeSeconds: 1e9, now });
  console.log(d.pool + ' ' + JSON.stringify(d.degraded));
}
`
	cmd := exec.Command(node(t), "--input-type=module", "-e", script, kr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	if want := "kr-music []\nkr-music [\"stale-table\"]\n"; string(out) != want {
		t.Fatalf("decisions before and at valid_until:\n%s\nwant:\n%s", out, want)
	}
}

// TestWorkerAnswers503WithoutAnExport: the example Worker answers a KV
// namespace without the export (an upload that went to Wrangler's local
// storage) with a 503 and Retry-After, naming the cause in its log, not
// with an uncaught exception on every request.
func TestWorkerAnswers503WithoutAnExport(t *testing.T) {
	script := `
import w from './worker/worker.mjs';
const env = { REGIOND: { get: async () => null } };
const r = await w.fetch(new Request('https://front.example/'), env);
console.log(r.status + ' ' + r.headers.get('retry-after'));
`
	cmd := exec.Command(node(t), "--input-type=module", "-e", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	if !strings.HasSuffix(string(out), "503 5\n") || !strings.Contains(string(out), "KV has no _unknown value") || !strings.Contains(string(out), "--remote") {
		t.Fatalf("worker without an export:\n%s\nwant a logged TableError naming --remote, then 503 with Retry-After 5", out)
	}
}
