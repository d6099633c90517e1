package js_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// TestCountriesMatchGo: the JS reader's list of assigned codes (COUNTRIES,
// the keys of a KV export besides _unknown) is routing.Countries(), and
// its isCountry and countryKey say what routing.IsCountry and
// routing.NormalizeCountry do for every code AA..ZZ.
func TestCountriesMatchGo(t *testing.T) {
	script := `
import { COUNTRIES, isCountry, countryKey } from './regiond.mjs';
const codes = [];
for (let a = 65; a <= 90; a++) for (let b = 65; b <= 90; b++) codes.push(String.fromCharCode(a, b));
console.log(JSON.stringify({ countries: COUNTRIES, is: codes.filter(isCountry), keys: codes.map(countryKey) }));
`
	cmd := exec.Command(node(t), "--input-type=module", "-e", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got struct {
		Countries, Is, Keys []string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node said %s: %v", out, err)
	}
	if want := routing.Countries(); !slices.Equal(got.Countries, want) {
		t.Errorf("COUNTRIES has %d codes, routing.Countries() %d; JS only: %v, Go only: %v",
			len(got.Countries), len(want), minus(got.Countries, want), minus(want, got.Countries))
	}
	var is, keys []string
	for a := 'A'; a <= 'Z'; a++ {
		for b := 'A'; b <= 'Z'; b++ {
			c := string([]rune{a, b})
			if routing.IsCountry(c) {
				is = append(is, c)
			}
			keys = append(keys, routing.NormalizeCountry(c))
		}
	}
	if !slices.Equal(got.Is, is) {
		t.Errorf("isCountry: JS only %v, Go only %v", minus(got.Is, is), minus(is, got.Is))
	}
	if !slices.Equal(got.Keys, keys) {
		t.Errorf("countryKey of AA..ZZ differs from routing.NormalizeCountry")
	}
}

// minus is a without the members of b.
func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// usUnknownTable is the example fleet with unknown_country_class us: the
// unknown country is served by US pools (a policy that lets viewers of no
// known country use the cheapest pools).
func usUnknownTable(t *testing.T, now time.Time) *routing.Table {
	t.Helper()
	cfg := fleettest.Config(t).Clone()
	cfg.Policy.Residency.UnknownCountryClass = "us"
	vals, err := cfg.Values()
	if err != nil {
		t.Fatal(err)
	}
	kvs := []routing.KV{{Key: routing.EpochKey, Value: []byte("5"), ModRevision: 1}}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		kvs = append(kvs, routing.KV{Key: k, Value: vals[k], ModRevision: 2})
	}
	tab := routing.Compile(77, kvs, nil, routing.CompileOptions{Now: now, Start: now.Add(-time.Hour)})
	if sk := tab.Skipped(); len(sk) > 0 {
		t.Fatalf("compile: keys refused: %+v", sk)
	}
	return tab
}

// workerScript runs worker/worker.mjs on the KV export in the file
// process.argv[1] (cloudflare format) for each request of the JSON list
// process.argv[2] ({headers: [[name, value]], env: {…}}), the upstream
// fetch stubbed, and prints one JSON line per request: {status,
// retry_after, pool, host, body} or {threw}.
const workerScript = `
import { readFileSync } from 'node:fs';
import w from './worker/worker.mjs';
const m = new Map(JSON.parse(readFileSync(process.argv[1], 'utf8')).map(({ key, value }) => [key, value]));
const kv = { async get(k, o) { const v = m.get(k); return v === undefined ? null : (o?.type === 'json' ? JSON.parse(v) : v); } };
globalThis.fetch = async (req) => Response.json({ host: new URL(req.url).host, pool: req.headers.get('X-Regiond-Pool') });
for (const r of JSON.parse(process.argv[2])) {
  let res;
  try {
    res = await w.fetch(new Request('https://front.example/watch/1', { headers: r.headers }), { REGIOND: kv, ...r.env });
  } catch (err) {
    console.log(JSON.stringify({ threw: String(err) }));
    continue;
  }
  const body = await res.text();
  const o = { status: res.status, retry_after: res.headers.get('retry-after') ?? '', body };
  if (res.status === 200) Object.assign(o, JSON.parse(body));
  console.log(JSON.stringify(o));
}
`

// workerAnswer is one line of workerScript.
type workerAnswer struct {
	Status     int    `json:"status"`
	RetryAfter string `json:"retry_after"`
	Pool       string `json:"pool"`
	Host       string `json:"host"`
	Body       string `json:"body"`
	Threw      string `json:"threw"`
}

// workerRequest is one request of workerScript.
type workerRequest struct {
	Headers [][2]string `json:"headers"`
	Env     map[string]any
}

func (r workerRequest) MarshalJSON() ([]byte, error) {
	env := r.Env
	if env == nil {
		env = map[string]any{}
	}
	return json.Marshal(struct {
		Headers [][2]string    `json:"headers"`
		Env     map[string]any `json:"env"`
	}{r.Headers, env})
}

// runWorker runs workerScript on the export kv with reqs and returns its
// answers and what it logged (stderr).
func runWorker(t *testing.T, kv string, reqs []workerRequest) ([]workerAnswer, string) {
	t.Helper()
	in, err := json.Marshal(reqs)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node(t), "--input-type=module", "-e", workerScript, kv, string(in))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var out []workerAnswer
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var a workerAnswer
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("worker script line %q: %v", line, err)
		}
		out = append(out, a)
	}
	if len(out) != len(reqs) {
		t.Fatalf("%d answers to %d requests:\n%s", len(out), len(reqs), stdout.String())
	}
	return out, stderr.String()
}

// exportWithout writes tab's KV export (snapindex.KVValues and AppendKV,
// what regionctl export kv prints, cloudflare format) with the values of
// the keys drop left out, and the value of each key of swap replaced by
// another key's.
func exportWithout(t *testing.T, tab *routing.Table, now time.Time, drop []string, swap map[string]string) string {
	t.Helper()
	vs, err := snapindex.KVValues(tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string][]byte{}
	for _, v := range vs {
		byKey[v.Key] = v.Value
	}
	var kept []snapindex.KVValue
	for _, v := range vs {
		if slices.Contains(drop, v.Key) {
			continue
		}
		if from, ok := swap[v.Key]; ok {
			v.Value = byKey[from]
		}
		kept = append(kept, v)
	}
	if len(kept) != len(vs)-len(drop) {
		t.Fatalf("dropped %d of %d values, want %d", len(vs)-len(kept), len(vs), len(drop))
	}
	b, err := snapindex.AppendKV(nil, kept, snapindex.KVFormatCloudflare)
	if err != nil {
		t.Fatal(err)
	}
	return writeTemp(t, "kv.json", b)
}

// TestWorkerRefusesAMissingCountryKey: with unknown_country_class us (the
// unknown country served by US pools) and the DE key missing from the KV
// export (an upload cut short, a key deleted), the worker answers a DE
// viewer 503 with Retry-After and logs which key is missing: it fell back
// to _unknown and sent the EU viewer to a US pool. Codes that are not
// assigned countries (XX, EU, T1, none) still route as _unknown, and
// assigned ones with their key as Go decides; a key holding another
// country's value (FR's holding US's) is refused too.
func TestWorkerRefusesAMissingCountryKey(t *testing.T) {
	now := time.Now()
	tab := usUnknownTable(t, now)
	const viewer = "v-4711"
	unk, err := tab.Resolve(routing.Unknown, viewer, now)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := tab.Pool(unk.Pool); !ok || p.Residency != "us" {
		t.Fatalf("premise: the unknown country is served by %s, want a pool of residency us", unk.Pool)
	}
	kv := exportWithout(t, tab, now, []string{"DE"}, map[string]string{"FR": "US"})
	headers := []string{"DE", " de ", "XX", "EU", "T1", "", "PL", "US", "FR"}
	var reqs []workerRequest
	for _, h := range headers {
		hs := [][2]string{{"Cookie", "viewer=" + viewer}}
		if h != "" {
			hs = append(hs, [2]string{"CF-IPCountry", h})
		}
		reqs = append(reqs, workerRequest{Headers: hs})
	}
	got, log := runWorker(t, kv, reqs)
	for i, h := range headers {
		a := got[i]
		switch routing.NormalizeCountry(h) {
		case "DE":
			if a.Status != 503 || a.RetryAfter != "5" {
				t.Errorf("CF-IPCountry %q with the DE key missing: %+v, want 503 with Retry-After 5 (not _unknown's %s)", h, a, unk.Pool)
			}
		case "FR":
			if a.Status != 503 || a.RetryAfter != "5" {
				t.Errorf("CF-IPCountry %q with FR's key holding US's value: %+v, want 503 with Retry-After 5", h, a)
			}
		default:
			want, err := tab.Resolve(h, viewer, now)
			if err != nil {
				t.Fatal(err)
			}
			if a.Status != 200 || a.Pool != want.Pool || a.Host+":443" != want.Host {
				t.Errorf("CF-IPCountry %q: %+v, want Go's pool %s on %s", h, a, want.Pool, want.Host)
			}
		}
	}
	for _, want := range []string{
		"regiond: KV has no value for DE, an assigned country: not routed as _unknown",
		`regiond: KV key FR holds the value of "US"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("worker log:\n%s\nwant a line with %q", log, want)
		}
	}
}

// TestWorkerRefusesABadMaxAge: a REGIOND_MAX_AGE that is not a positive
// number of seconds ("15m", "", "0") makes the worker log it and answer
// 503 with Retry-After, as for a missing export: the library's RangeError
// escaped every request (Cloudflare's error 1101). The worker checks each
// value once, so a fixed value routes again in the same isolate; unset,
// a number or a numeric string route.
func TestWorkerRefusesABadMaxAge(t *testing.T) {
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	kv := exportWithout(t, tab, now, nil, nil)
	ages := []any{"15m", "15m", "900", nil, "", "0", "-5", "Infinity", 900, "15m", " 600 "}
	var reqs []workerRequest
	for _, age := range ages {
		r := workerRequest{Headers: [][2]string{{"CF-IPCountry", "PL"}, {"Cookie", "viewer=v-1"}}}
		if age != nil {
			r.Env = map[string]any{"REGIOND_MAX_AGE": age}
		}
		reqs = append(reqs, r)
	}
	got, log := runWorker(t, kv, reqs)
	want, err := tab.Resolve("PL", "v-1", now)
	if err != nil {
		t.Fatal(err)
	}
	for i, age := range ages {
		a := got[i]
		bad := true
		switch age {
		case "900", nil, 900, " 600 ":
			bad = false
		}
		if bad && (a.Status != 503 || a.RetryAfter != "5" || a.Threw != "") {
			t.Errorf("REGIOND_MAX_AGE %#v: %+v, want 503 with Retry-After 5", age, a)
		}
		if !bad && (a.Status != 200 || a.Pool != want.Pool) {
			t.Errorf("REGIOND_MAX_AGE %#v: %+v, want Go's pool %s", age, a, want.Pool)
		}
	}
	for _, age := range []string{`"15m"`, `""`, `"0"`} {
		if line := "regiond worker: REGIOND_MAX_AGE " + age + " is not a positive number of seconds"; !strings.Contains(log, line) {
			t.Errorf("worker log:\n%s\nwant a line with %q", log, line)
		}
	}
}

// TestRepeatedCountryHeaderTakesTheFirst: a request with CF-IPCountry
// twice (a proxy that appends its own) reaches a Node front door as one
// value, "US, DE" (Node's http joins repeated headers); the agent, in Go,
// takes the first (Header.Get). The README's Node front door
// (decideFromIndexFile on req.headers['cf-ipcountry']), an IndexReader
// and the worker (the Fetch API joins them too) decide as Go does on the
// same request bytes, not as _unknown.
func TestRepeatedCountryHeaderTakesTheFirst(t *testing.T) {
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	idx := indexFile(t, tab, now, now)
	server := `
import { createServer } from 'node:http';
import { decideFromIndexFile, IndexReader } from './node.mjs';
const opts = { maxAgeSeconds: 1 << 30, owner: process.getuid() };
const reader = new IndexReader(process.argv[1], opts);
const srv = createServer((req, res) => {
  const h = req.headers['cf-ipcountry'];
  const out = [];
  for (const f of [() => decideFromIndexFile(process.argv[1], h, 'viewer-1', opts), () => reader.decide(h, 'viewer-1', opts)]) {
    try { out.push({ raw: h, country: f().country, pool: f().pool }); } catch (err) { out.push({ raw: h, error: err.message }); }
  }
  res.setHeader('Connection', 'close');
  res.end(JSON.stringify(out));
});
srv.listen(0, '127.0.0.1', () => console.log(srv.address().port));
`
	cmd := exec.Command(node(t), "--input-type=module", "-e", server, idx)
	cmd.Dir = "."
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	portLine, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("node server: %v: %s", err, stderr.String())
	}
	addr := net.JoinHostPort("127.0.0.1", strings.TrimSpace(portLine))
	cases := [][]string{{"US", "DE"}, {"de", "US"}, {" pl ", "US"}, {"XX", "DE"}, {"DE"}, {"US, DE"}}
	var reqs []workerRequest
	for _, lines := range cases {
		var raw strings.Builder
		raw.WriteString("GET /watch/1 HTTP/1.1\r\nHost: front.example\r\n")
		var hs [][2]string
		for _, l := range lines {
			fmt.Fprintf(&raw, "CF-IPCountry: %s\r\n", l)
			hs = append(hs, [2]string{"CF-IPCountry", l})
		}
		raw.WriteString("Cookie: viewer=viewer-1\r\n\r\n")
		reqs = append(reqs, workerRequest{Headers: append(hs, [2]string{"Cookie", "viewer=viewer-1"})})
		// Go's view of the same bytes: the agent's r.Header.Get("CF-IPCountry").
		greq, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw.String())))
		if err != nil {
			t.Fatal(err)
		}
		want, err := tab.Resolve(greq.Header.Get("CF-IPCountry"), "viewer-1", now)
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) == 1 && strings.Contains(lines[0], ",") {
			// One line with a comma: Go decides "US, DE" as _unknown; Node
			// cannot tell it from two lines and takes US.
			if want, err = tab.Resolve("US", "viewer-1", now); err != nil {
				t.Fatal(err)
			}
		}
		conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(conn, raw.String()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), greq)
		if err != nil {
			t.Fatalf("header lines %q: %v; node: %s", lines, err, stderr.String())
		}
		body, err := io.ReadAll(resp.Body)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		var got []struct{ Raw, Country, Pool, Error string }
		if err := json.Unmarshal(body, &got); err != nil || len(got) != 2 {
			t.Fatalf("header lines %q: node answered %s (%v)", lines, body, err)
		}
		for i, g := range got {
			if g.Country != want.Country || g.Pool != want.Pool {
				t.Errorf("header lines %q (Node's value %q), path %d: %+v, want Go's %s on %s", lines, g.Raw, i, g, want.Country, want.Pool)
			}
		}
		if len(lines) == 2 && got[0].Raw != strings.TrimSpace(lines[0])+", "+lines[1] {
			t.Errorf("premise: Node gave the two lines %q as %q, want them joined", lines, got[0].Raw)
		}
	}
	// The worker: the Fetch API's Headers join the lines as Node does.
	answers, _ := runWorker(t, exportWithout(t, tab, now, nil, nil), reqs)
	for i, lines := range cases {
		first, _, _ := strings.Cut(lines[0], ",")
		want, err := tab.Resolve(first, "viewer-1", now)
		if err != nil {
			t.Fatal(err)
		}
		if a := answers[i]; a.Status != 200 || a.Pool != want.Pool {
			t.Errorf("worker, header lines %q: %+v, want %s's pool %s", lines, a, want.Country, want.Pool)
		}
	}
}
