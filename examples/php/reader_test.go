package php_test

// These tests run the PHP snapshot reader (RegiondTable.php) through
// testdata/driver.php and check that it decides exactly as routing.Table.Resolve
// does on the same table. They need php-cli 8.1+: without it they skip,
// naming it, unless CI=true (then they fail; .ci/run installs it).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/regiond/regiond/internal/testprog"
	"github.com/regiond/regiond/routing"
)

const installHint = "install php-cli (PHP 8.1+), e.g. `apt-get update && apt-get install -y php-cli`"

var (
	phpOnce sync.Once
	phpPath string
	phpErr  error
)

// php returns the php binary, failing the test (never skipping it) when
// there is none or it is older than 8.1.
func php(t *testing.T) string {
	t.Helper()
	phpOnce.Do(func() {
		phpPath, phpErr = exec.LookPath("php")
		if phpErr != nil {
			phpErr = fmt.Errorf("php not found in PATH: %w", phpErr)
			return
		}
		out, err := exec.Command(phpPath, "-r", `echo PHP_VERSION_ID, " ", PHP_INT_SIZE, " ", in_array("xxh64", hash_algos(), true) ? 1 : 0;`).CombinedOutput()
		if err != nil {
			phpErr = fmt.Errorf("%s does not run: %v: %s", phpPath, err, out)
			return
		}
		var id, size, xxh int
		if _, err := fmt.Sscan(string(out), &id, &size, &xxh); err != nil || id < 80100 || xxh != 1 {
			phpErr = fmt.Errorf("%s is not PHP 8.1+ with hash xxh64 (PHP_VERSION_ID INT_SIZE XXH64 = %q)", phpPath, out)
		}
	})
	if phpErr != nil {
		testprog.Missing(t, phpErr.Error(), installHint)
	}
	return phpPath
}

// fleet parses examples/routing.yaml.
func fleet(t *testing.T) *routing.Config {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "routing.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := routing.ParseConfig(b)
	if err != nil {
		t.Fatalf("parse examples/routing.yaml: %v", err)
	}
	return cfg
}

// fleetKVs is examples/routing.yaml as the keys etcd holds, for
// routing.Compile at a revision of the test's choosing.
func fleetKVs(t *testing.T) []routing.KV {
	t.Helper()
	vals, err := fleet(t).Values()
	if err != nil {
		t.Fatal(err)
	}
	var kvs []routing.KV
	for k, v := range vals {
		kvs = append(kvs, routing.KV{Key: k, Value: v})
	}
	return kvs
}

func compile(t *testing.T, cfg *routing.Config, opts routing.CompileOptions) *routing.Table {
	t.Helper()
	tab, err := routing.CompileConfig(cfg, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// writeTable writes tab's table JSON, written at writtenAt, to a temp file.
func writeTable(t *testing.T, tab *routing.Table, writtenAt time.Time) string {
	t.Helper()
	b, err := tab.JSON(writtenAt)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "table.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type pair struct{ country, key string }

// randomKey returns a sticky key: session-id-like most of the time, but
// also arbitrary bytes (NUL, invalid UTF-8) and keys longer than 256 bytes.
func randomKey(r *rand.Rand) string {
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	var b []byte
	switch r.IntN(10) {
	case 0: // arbitrary bytes
		b = make([]byte, 1+r.IntN(40))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
	case 1: // long
		b = make([]byte, 250+r.IntN(200))
		for i := range b {
			b[i] = alnum[r.IntN(len(alnum))]
		}
	case 2: // short
		b = []byte{alnum[r.IntN(len(alnum))]}
	default:
		b = make([]byte, 8+r.IntN(32))
		for i := range b {
			b[i] = alnum[r.IntN(len(alnum))]
		}
	}
	return string(b)
}

// garbage are raw country headers that must normalize like Go's
// NormalizeCountry: spaced, lower-case, reserved, unassigned and invalid.
var garbage = []string{
	" pl ", "pl", "\tDe\r\n", "xx", "XX", "T1", "t1", "", " ", "A1", "A2", "O1", "EU", "UK", "zz",
	"POL", "P", "p l", "_unknown", "\x00\x00", "ÄÖ", "12", "usa", " us", "gb\n", "Pl\t",
	// Only ' ', \t, \r and \n are trimmed (not PHP trim()'s default \v and NUL).
	"\vPL", "PL\x00", "\u00a0PL", "\x00de",
}

// pairs returns the (country, key) pairs resolved by every test: for every
// ISO country 20 sticky keys, one lower-case and one space-padded sticky
// variant and one pair without a key; for every garbage header 20 sticky
// keys and one without.
func pairs() []pair {
	r := rand.New(rand.NewPCG(20240611, 1))
	var ps []pair
	for _, cc := range routing.Countries() {
		for range 20 {
			ps = append(ps, pair{cc, randomKey(r)})
		}
		ps = append(ps,
			pair{strings.ToLower(cc), randomKey(r)},
			pair{" " + cc + " ", randomKey(r)},
			pair{cc, ""})
	}
	for _, g := range garbage {
		for range 20 {
			ps = append(ps, pair{g, randomKey(r)})
		}
		ps = append(ps, pair{g, ""})
	}
	return ps
}

// phpDecision is one line of the driver's resolve output.
type phpDecision struct {
	OK       bool             `json:"ok"`
	D        json.RawMessage  `json:"d"`
	Country  string           `json:"country"`
	Reasons  []string         `json:"reasons"`
	Revision int64            `json:"revision"`
	Epoch    int64            `json:"epoch"`
	Body     *json.RawMessage `json:"body"`
}

type phpMeta struct {
	Revision int64 `json:"revision"`
	Epoch    int64 `json:"epoch"`
	Stale    bool  `json:"stale"`
	Index    bool  `json:"index"` // read from the per-country index
}

// runPHP runs the driver with args and stdin, returning stdout.
func runPHP(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(php(t), append([]string{filepath.Join("testdata", "driver.php")}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("php driver %v: %v\nstderr: %s", args, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Fatalf("php driver %v wrote to stderr: %s", args, stderr.String())
	}
	return stdout.Bytes()
}

// resolvePHP resolves every pair with the PHP reader on the table file.
func resolvePHP(t *testing.T, path string, maxAge float64, ps []pair) (phpMeta, []phpDecision) {
	t.Helper()
	var in bytes.Buffer
	for _, p := range ps {
		fmt.Fprintf(&in, "%x %x\n", p.country, p.key)
	}
	out := runPHP(t, in.Bytes(), "resolve", path, strconv.FormatFloat(maxAge, 'f', -1, 64))
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	var meta phpMeta
	var ds []phpDecision
	for i := 0; sc.Scan(); i++ {
		if i == 0 {
			if err := json.Unmarshal(sc.Bytes(), &meta); err != nil {
				t.Fatalf("php meta line %q: %v", sc.Text(), err)
			}
			continue
		}
		var d phpDecision
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("php line %d %q: %v", i, sc.Text(), err)
		}
		ds = append(ds, d)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ds) != len(ps) {
		t.Fatalf("php resolved %d pairs, want %d", len(ds), len(ps))
	}
	return meta, ds
}

// decisionKeys are the JSON fields of Go's Decision.
func decisionKeys(t *testing.T) []string {
	b, err := json.Marshal(routing.Decision{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(m))
}

func sameStrings(a, b []string) bool { return slices.Equal(a, b) } // nil == empty

func sameAttrs(a, b map[string]string) bool { return maps.Equal(a, b) } // nil == empty

// check asserts that the PHP decisions equal Go's Resolve: field for field
// for sticky pairs, and for random picks (no key, or affinity random) that
// the pool is a candidate and everything else matches. withStale adds the
// "stale-table" reason the PHP reader adds for an old written_at. It
// returns how many pairs were compared as sticky, as random and as NoRoute.
func check(t *testing.T, tab *routing.Table, now time.Time, ps []pair, got []phpDecision, withStale bool) (sticky, random, noRoute int) {
	t.Helper()
	keys := decisionKeys(t)
	bad := 0
	fail := func(i int, format string, args ...any) {
		bad++
		if bad <= 10 {
			t.Errorf("pair %d (country %q, key %q): %s", i, ps[i].country, ps[i].key, fmt.Sprintf(format, args...))
		}
	}
	for i, p := range ps {
		want, err := tab.Resolve(p.country, p.key, now)
		wantDeg := slices.Clone(want.Degraded)
		if withStale && !slices.Contains(wantDeg, "stale-table") {
			wantDeg = append(wantDeg, "stale-table")
		}
		g := got[i]
		if err != nil {
			if !errors.Is(err, routing.ErrNoRoute) {
				t.Fatalf("Go Resolve(%q, %q): %v", p.country, p.key, err)
			}
			noRoute++
			switch {
			case g.OK:
				fail(i, "Go: NoRoute %v; PHP: decision %s", wantDeg, g.D)
			case g.Country != want.Country || !sameStrings(g.Reasons, wantDeg) || g.Revision != want.Revision || g.Epoch != want.Epoch:
				fail(i, "NoRoute: Go country %s reasons %q rev %d epoch %d; PHP country %s reasons %q rev %d epoch %d",
					want.Country, wantDeg, want.Revision, want.Epoch, g.Country, g.Reasons, g.Revision, g.Epoch)
			default:
				// The agent's 503 body (internal/api errorBody): empty
				// members left out, but for epoch.
				body := map[string]any{"error": "no eligible pool", "code": "no_route", "country": want.Country, "epoch": want.Epoch}
				if len(wantDeg) > 0 {
					body["reasons"] = wantDeg
				}
				if want.Revision != 0 {
					body["revision"] = want.Revision
				}
				wantBody, _ := json.Marshal(body)
				if g.Body == nil || !jsonEqual(*g.Body, wantBody) {
					fail(i, "NoRoute body %s, want %s", derefRaw(g.Body), wantBody)
				}
			}
			continue
		}
		if !g.OK {
			fail(i, "Go: %s via %s; PHP: NoRoute %q", want.Pool, want.Route, g.Reasons)
			continue
		}
		var shape map[string]json.RawMessage
		if err := json.Unmarshal(g.D, &shape); err != nil {
			t.Fatal(err)
		}
		if k := slices.Sorted(maps.Keys(shape)); !slices.Equal(k, keys) {
			fail(i, "PHP decision fields %v, want Go's %v", k, keys)
			continue
		}
		var d routing.Decision
		dec := json.NewDecoder(bytes.NewReader(g.D))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			fail(i, "PHP decision %s: %v", g.D, err)
			continue
		}
		e := tab.Effective(want.Country)
		if p.key != "" && e.Affinity != routing.AffinityRandom {
			sticky++
			want.Degraded = wantDeg
			if d.Country != want.Country || d.Route != want.Route || d.Pool != want.Pool || d.Host != want.Host ||
				!sameAttrs(d.Attrs, want.Attrs) || d.Revision != want.Revision || d.Epoch != want.Epoch ||
				d.FallbackDepth != want.FallbackDepth || !sameStrings(d.Degraded, want.Degraded) {
				fail(i, "\n  PHP %+v\n  Go  %+v", d, want)
			}
			continue
		}
		random++
		idx := slices.IndexFunc(e.Candidates, func(c routing.Candidate) bool { return c.Pool == d.Pool })
		if idx < 0 {
			fail(i, "random pick %s is not a candidate of %s: %+v", d.Pool, want.Country, e.Candidates)
			continue
		}
		pool, _ := tab.Pool(d.Pool)
		wantAttrs := maps.Clone(pool.Attrs)
		if wantAttrs == nil {
			wantAttrs = map[string]string{}
		}
		maps.Copy(wantAttrs, e.Attrs)
		if d.Country != want.Country || d.Route != want.Route || d.Host != e.Candidates[idx].Host ||
			!sameAttrs(d.Attrs, wantAttrs) || d.Revision != want.Revision || d.Epoch != want.Epoch ||
			d.FallbackDepth != want.FallbackDepth || !sameStrings(d.Degraded, wantDeg) {
			fail(i, "random pick\n  PHP %+v\n  Go  %+v (attrs for %s: %v)", d, want, d.Pool, wantAttrs)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d pairs differ between PHP and Go", bad, len(ps))
	}
	return sticky, random, noRoute
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func derefRaw(r *json.RawMessage) string {
	if r == nil {
		return "<none>"
	}
	return string(*r)
}

// TestReaderMatchesGo resolves ≥5,000 sticky pairs covering every country
// and garbage headers on the example fleet, in PHP and in Go.
func TestReaderMatchesGo(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
	ps := pairs()
	// Weighted random: PL is 70/30 eu-central/eu-west.
	const nPL = 2000
	for range nPL {
		ps = append(ps, pair{"PL", ""})
	}
	meta, got := resolvePHP(t, writeTable(t, tab, now), 180, ps)
	if meta.Stale || meta.Revision != tab.Revision() || meta.Epoch != tab.Epoch() {
		t.Errorf("php meta %+v, want fresh table at revision %d epoch %d", meta, tab.Revision(), tab.Epoch())
	}
	sticky, random, noRoute := check(t, tab, now, ps, got, false)
	t.Logf("%d sticky pairs equal, %d random picks valid, %d NoRoute", sticky, random, noRoute)
	if sticky < 5000 {
		t.Errorf("only %d sticky pairs compared, want ≥ 5000", sticky)
	}
	if noRoute != 0 {
		t.Errorf("%d NoRoute on the example fleet, want 0", noRoute)
	}
	central := 0
	for _, d := range got[len(got)-nPL:] {
		var dec routing.Decision
		_ = json.Unmarshal(d.D, &dec)
		if dec.Pool == "eu-central" {
			central++
		}
	}
	// 6 standard deviations of a binomial(2000, 0.7).
	if sd := math.Sqrt(nPL * 0.7 * 0.3); math.Abs(float64(central)-0.7*nPL) > 6*sd {
		t.Errorf("PL random picks: eu-central %d of %d, want about %d", central, nPL, int(0.7*nPL))
	}
}

// TestReaderDrainedPool drains eu-central, makes JP's route random, adds a
// weight-0 target and attrs that both a pool and a route set: PL moves to
// eu-west, DE falls back to eu-general, the unknown country (class eu,
// _default = eu-central + us-east) has no route, and route attrs win over
// pool attrs.
func TestReaderDrainedPool(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	cfg := fleet(t).Clone()
	p := cfg.Pools["eu-central"]
	p.Status = routing.StatusDraining
	cfg.Pools["eu-central"] = p
	w := cfg.Pools["eu-west"]
	w.Attrs = maps.Clone(w.Attrs)
	w.Attrs["lang"], w.Attrs["pool_only"] = "pool-lang", "yes"
	cfg.Pools["eu-west"] = w
	pl := cfg.Routes["PL"]
	pl.Attrs = maps.Clone(pl.Attrs)
	pl.Attrs["cdn"] = "cdn-pl.example.net"
	cfg.Routes["PL"] = pl
	cfg.Routes["JP"] = routing.Route{
		Targets:  []routing.Target{{Pool: "apac-tokyo", Weight: 50}, {Pool: "apac-singapore", Weight: 50}},
		Fallback: []string{"apac-general"},
		Affinity: routing.AffinityRandom,
		Attrs:    map[string]string{"lang": "ja"},
	}
	us := cfg.Routes["US"]
	us.Targets = append(slices.Clone(us.Targets), routing.Target{Pool: "latam-mex", Weight: 0})
	cfg.Routes["US"] = us
	// A _default whose only eu pool is the drained one: unknown viewers get NoRoute.
	def := cfg.Routes["_default"]
	def.Targets = []routing.Target{{Pool: "eu-central", Weight: 50}, {Pool: "us-east", Weight: 50}}
	cfg.Routes["_default"] = def
	tab := compile(t, cfg, routing.CompileOptions{Now: now})

	if e := tab.Effective("PL"); len(e.Candidates) != 1 || e.Candidates[0].Pool != "eu-west" || !slices.Contains(e.Degraded, "pool-draining:eu-central") {
		t.Fatalf("Go PL entry %+v: want eu-west only, degraded pool-draining:eu-central", e)
	}
	if e := tab.Effective("DE"); e.Route != "eu-general" || e.FallbackDepth != 1 {
		t.Fatalf("Go DE entry %+v: want eu-general at depth 1", e)
	}
	if d, _ := tab.Resolve("PL", "k", now); d.Attrs["lang"] != "pl" || d.Attrs["cdn"] != "cdn-pl.example.net" || d.Attrs["pool_only"] != "yes" {
		t.Fatalf("Go PL attrs %v: want route attrs over pool attrs", d.Attrs)
	}
	if _, err := tab.Resolve("", "k", now); !errors.Is(err, routing.ErrNoRoute) {
		t.Fatalf("Go unknown country: %v, want NoRoute", err)
	}

	ps := pairs()
	// Affinity random ignores the key: one key, both pools.
	for range 200 {
		ps = append(ps, pair{"JP", "same-viewer"})
	}
	_, got := resolvePHP(t, writeTable(t, tab, now), 180, ps)
	sticky, random, noRoute := check(t, tab, now, ps, got, false)
	t.Logf("%d sticky pairs equal, %d random picks valid, %d NoRoute", sticky, random, noRoute)
	if noRoute == 0 {
		t.Error("no NoRoute for the unknown country")
	}
	seen := map[string]bool{}
	for _, d := range got[len(got)-200:] {
		var dec routing.Decision
		_ = json.Unmarshal(d.D, &dec)
		seen[dec.Pool] = true
	}
	if !seen["apac-tokyo"] || !seen["apac-singapore"] {
		t.Errorf("JP (affinity random) with one key picked %v, want both pools", seen)
	}
}

// TestReaderNoRoute marks every eu pool down: EU viewers and unknown
// countries get NoRoute in both languages (never a non-EU pool); the UK
// keeps uk-london.
func TestReaderNoRoute(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now, Down: []string{"eu-central", "eu-west", "eu-north"}})
	ps := pairs()
	_, got := resolvePHP(t, writeTable(t, tab, now), 180, ps)
	sticky, random, noRoute := check(t, tab, now, ps, got, false)
	t.Logf("%d sticky pairs equal, %d random picks valid, %d NoRoute", sticky, random, noRoute)
	wantNoRoute := map[string]bool{"PL": true, " pl ": true, "DE": true, "xx": true, "T1": true, "": true, "GB": false, "US": false}
	for i, p := range ps {
		w, ok := wantNoRoute[p.country]
		if !ok {
			continue
		}
		if got[i].OK == w {
			t.Errorf("country %q: PHP ok=%v, want NoRoute=%v", p.country, got[i].OK, w)
		}
		if !got[i].OK && !slices.Contains(got[i].Reasons, "pool-down:eu-central") {
			t.Errorf("country %q: NoRoute reasons %q lack pool-down:eu-central", p.country, got[i].Reasons)
		}
	}
	if want := 30 * 23; noRoute < want { // 23 pairs for each of the 30 eu-class countries, plus garbage
		t.Errorf("%d NoRoute pairs, want ≥ %d", noRoute, want)
	}
}

// TestReaderStale: a file whose written_at is older than the max age, and a
// table the agent itself marked stale, both say stale-table (once).
func TestReaderStale(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	ps := pairs()[:1500]

	t.Run("old-file", func(t *testing.T) {
		tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
		meta, got := resolvePHP(t, writeTable(t, tab, now.Add(-time.Hour)), 60, ps)
		if !meta.Stale {
			t.Error("php: a file written an hour ago with max age 60s is not stale")
		}
		check(t, tab, now, ps, got, true)
		// The same file is fresh under a larger max age.
		meta, got = resolvePHP(t, writeTable(t, tab, now.Add(-time.Hour)), 7200, ps)
		if meta.Stale {
			t.Error("php: a file written an hour ago with max age 2h is stale")
		}
		check(t, tab, now, ps, got, false)
	})
	t.Run("agent-stale", func(t *testing.T) {
		tab := compile(t, fleet(t), routing.CompileOptions{Now: now, Stale: true})
		if d, _ := tab.Resolve("PL", "k", now); !slices.Contains(d.Degraded, "stale-table") {
			t.Fatalf("Go: stale table's decision degraded %q lacks stale-table", d.Degraded)
		}
		meta, got := resolvePHP(t, writeTable(t, tab, now.Add(-time.Hour)), 60, ps)
		if !meta.Stale {
			t.Error("php: a table marked stale by the agent is not stale")
		}
		check(t, tab, now, ps, got, true) // stale-table already there: not added twice
	})
}

// TestReaderStickyScore compares the PHP hash and score with Go's: h >> 11
// must be equal, the float64 score equal to within 2 ulps. (PHP's log() is
// the C library's, correctly rounded; Go's math.Log is not always, so a few
// percent of scores differ in the last bit or two. A decision differs only
// if two candidates' scores are that close: about 1e-15 of decisions.)
func TestReaderStickyScore(t *testing.T) {
	php(t)
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	pools := []string{"eu-central", "eu-west", "us-east", "a", "10", "9", "kr-music", "x.y_z-1"}
	type triple struct {
		key, pool string
		w         int
	}
	var ts []triple
	var in bytes.Buffer
	for range 4000 {
		tr := triple{randomKey(r), pools[r.IntN(len(pools))], 1 + r.IntN(100)}
		ts = append(ts, tr)
		fmt.Fprintf(&in, "%x %x %d\n", tr.key, tr.pool, tr.w)
	}
	ts = append(ts, triple{"", "eu-central", 1})
	fmt.Fprintf(&in, " %x 1\n", "eu-central")
	lines := strings.Split(strings.TrimSpace(string(runPHP(t, in.Bytes(), "scores"))), "\n")
	if len(lines) != len(ts) {
		t.Fatalf("php scored %d triples, want %d", len(lines), len(ts))
	}
	bad, exact, maxULP := 0, 0, uint64(0)
	for i, tr := range ts {
		h53 := xxhash.Sum64String(tr.key+"\x00"+tr.pool) >> 11
		want := math.Float64bits(routing.StickyScore(tr.key, tr.pool, tr.w))
		var gotH53, got uint64
		if _, err := fmt.Sscanf(lines[i], "%d %x", &gotH53, &got); err != nil {
			t.Fatalf("php score line %q: %v", lines[i], err)
		}
		ulps := max(got, want) - min(got, want) // positive floats order like their bits
		maxULP = max(maxULP, ulps)
		if ulps == 0 {
			exact++
		}
		if gotH53 != h53 || ulps > 2 {
			bad++
			if bad <= 10 {
				t.Errorf("key %q pool %s weight %d: php h>>11 %d score %016x, go %d %016x",
					tr.key, tr.pool, tr.w, gotH53, got, h53, want)
			}
		}
	}
	t.Logf("%d of %d scores bit-identical, the rest within %d ulp", exact, len(ts), maxULP)
	if bad > 0 {
		t.Fatalf("%d of %d sticky hashes or scores differ", bad, len(ts))
	}
}

// TestReaderCache: the parsed table is reused while the file is unchanged,
// a same-second in-place rewrite and an atomic rename are both noticed, and
// a missing or broken file is an error.
func TestReaderCache(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	kvs := fleetKVs(t)
	dir := t.TempDir()
	var files []string
	for _, rev := range []int64{11, 12, 13} {
		b, err := routing.Compile(rev, kvs, nil, routing.CompileOptions{Now: now}).JSON(now)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, fmt.Sprintf("rev%d.json", rev))
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	out := runPHP(t, nil, append([]string{"cache", work}, files...)...)
	type stats struct{ Reads, Parses int }
	var res struct {
		First          any    `json:"first"`
		Second         any    `json:"second"`
		InPlace        any    `json:"in_place"`
		Renamed        any    `json:"renamed"`
		Aged           any    `json:"aged"`
		AgedAgain      any    `json:"aged_again"`
		StatsA         stats  `json:"stats_a"`
		StatsB         stats  `json:"stats_b"`
		StatsC         stats  `json:"stats_c"`
		StatsAged      stats  `json:"stats_aged"`
		StatsAgedAgain stats  `json:"stats_aged_again"`
		SameSignature  bool   `json:"same_signature"`
		Garbage        string `json:"garbage"`
		NotTable       string `json:"not_table"`
		Missing        string `json:"missing"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("cache output %s: %v", out, err)
	}
	t.Logf("cache run: %s", out)
	revs := []struct {
		name string
		got  any
		want float64
	}{{"first load", res.First, 11}, {"second load", res.Second, 11}, {"after in-place rewrite", res.InPlace, 12},
		{"after rename", res.Renamed, 13}, {"after touch", res.Aged, 13}, {"after touch, again", res.AgedAgain, 13}}
	for _, r := range revs {
		if r.got != r.want {
			t.Errorf("%s: revision %v, want %v", r.name, r.got, r.want)
		}
	}
	for _, c := range []struct {
		name      string
		got, want stats
	}{
		{"two loads of one file", res.StatsA, stats{Parses: 1}},
		{"in-place rewrite", res.StatsB, stats{Parses: 2}},
		{"rename", res.StatsC, stats{Parses: 3}},
		{"touch (same bytes)", res.StatsAged, stats{Parses: 3}},
		{"load of an old, unchanged file", res.StatsAgedAgain, stats{Reads: res.StatsAged.Reads, Parses: 3}},
	} {
		if c.got.Parses != c.want.Parses || (c.want.Reads != 0 && c.got.Reads != c.want.Reads) {
			t.Errorf("%s: reads/parses %+v, want %+v (reads 0 = any)", c.name, c.got, c.want)
		}
	}
	if !res.SameSignature {
		t.Log("the in-place rewrite changed the file's stat signature (slow machine?): the racy re-read was not exercised")
	}
	for name, got := range map[string]string{"garbage": res.Garbage, "not a table": res.NotTable, "missing": res.Missing} {
		if !strings.HasPrefix(got, "error: regiond:") {
			t.Errorf("%s file: %q, want a TableException", name, got)
		}
	}
	// A missing file says why, for the JSON and the index it looked for.
	if !strings.Contains(res.Missing, ".json: No such file or directory (nor the index ") || !strings.HasSuffix(res.Missing, ".idx: No such file or directory)") {
		t.Errorf("missing file: %q, want the cause for both the JSON and the index", res.Missing)
	}
}

// TestExampleFrontDoor runs example.php as the CLI would see a request
// with CF-IPCountry, against a routable and a NoRoute table, with
// REGIOND_OWNER the test's uid (the tables are its own). Without
// REGIOND_OWNER it checks the owner against the package's user,
// regiond, and refuses the test's table; an empty REGIOND_OWNER (the
// opt-out) reads it.
func TestExampleFrontDoor(t *testing.T) {
	bin := php(t)
	t.Parallel()
	now := time.Now()
	tmp := t.TempDir() // the failure log's state file (no APCu in the CLI)
	me := "REGIOND_OWNER=" + strconv.Itoa(os.Geteuid())
	runAs := func(path, country string, env ...string) string {
		t.Helper()
		cmd := exec.Command(bin, "-d", "sys_temp_dir="+tmp, "example.php")
		cmd.Env = append(os.Environ(), "REGIOND_SNAPSHOT="+path, "HTTP_CF_IPCOUNTRY="+country, "REQUEST_URI=/watch/42")
		// Without REGIOND_OWNER in env: none, whatever the test's environment holds.
		cmd.Env = slices.DeleteFunc(cmd.Env, func(e string) bool { return strings.HasPrefix(e, "REGIOND_OWNER=") })
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("php example.php (country %q): %v\n%s", country, err, out)
		}
		return string(out)
	}
	run := func(path, country string) string { t.Helper(); return runAs(path, country, me) }
	ok := writeTable(t, compile(t, fleet(t), routing.CompileOptions{Now: now}), now)
	if out := runAs(ok, "PL"); !strings.Contains(out, defaultOwnerRefusal(t, filepath.Dir(ok), os.Geteuid())) ||
		!strings.Contains(out, "routing unavailable: the regiond table cannot be read\n") || strings.Contains(out, "https://edge-") {
		t.Errorf("example.php without REGIOND_OWNER, on a table of uid %d: %q, want the 503 and the log line: %q", os.Geteuid(), out, defaultOwnerRefusal(t, filepath.Dir(ok), os.Geteuid()))
	}
	if out := runAs(ok, "PL", "REGIOND_OWNER="); !strings.Contains(out, "https://edge-") {
		t.Errorf("example.php with an empty REGIOND_OWNER (no check): %q, want a redirect to an edge", out)
	}
	if out := run(ok, " pl "); !strings.Contains(out, "https://edge-") || !strings.Contains(out, "/watch/42") {
		t.Errorf("example.php for PL: %q, want a redirect to an edge", out)
	}
	down := writeTable(t, compile(t, fleet(t), routing.CompileOptions{Now: now, Down: []string{"eu-central", "eu-west", "eu-north"}}), now)
	if out := run(down, "DE"); !strings.Contains(out, `"error":"no eligible pool"`) || !strings.Contains(out, "pool-down:eu-central") {
		t.Errorf("example.php for DE with every eu pool down: %q, want the NoRoute body", out)
	}
	// The log line (stderr here) names the cause; the body claims none.
	if out := run(filepath.Join(t.TempDir(), "missing.json"), "DE"); !strings.Contains(out, "cannot open snapshot") ||
		!strings.Contains(out, "routing unavailable: the regiond table cannot be read\n") {
		t.Errorf("example.php without a snapshot: %q, want the log line about the snapshot and the 503's body", out)
	}
	// The viewer cookie as PHP parses a client's Cookie header: a string, or
	// an array for "viewer[]=x" (not a key: the weighted pick, not a fatal
	// TypeError under strict_types).
	for _, cookie := range []string{`'viewer-1'`, `['x']`, `['a' => ['b' => 'c']]`} {
		prep := filepath.Join(t.TempDir(), "cookie.php")
		if err := os.WriteFile(prep, []byte("<?php $_COOKIE['viewer'] = "+cookie+";\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-d", "sys_temp_dir="+tmp, "-d", "auto_prepend_file="+prep, "example.php")
		cmd.Env = append(os.Environ(), "REGIOND_SNAPSHOT="+ok, "HTTP_CF_IPCOUNTRY=PL", "REQUEST_URI=/watch/42", me)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "https://edge-") {
			t.Errorf("example.php with the viewer cookie %s: %v\n%s", cookie, err, out)
		}
	}
}

// TestNoRouteBodyCarriesEpochZero: NoRouteException's toArray is the
// agent's 503 body, which names its table's epoch, 0 (nothing applied
// yet) too.
func TestNoRouteBodyCarriesEpochZero(t *testing.T) {
	out, err := exec.Command(php(t), "-r", `require 'RegiondTable.php';
echo json_encode((new \Regiond\NoRouteException('DE', ['no-route:DE'], 7, 0))->toArray());`).CombinedOutput()
	if err != nil {
		t.Fatalf("php: %v\n%s", err, out)
	}
	if want := `{"error":"no eligible pool","code":"no_route","country":"DE","reasons":["no-route:DE"],"revision":7,"epoch":0}`; string(out) != want {
		t.Fatalf("NoRouteException body %s, want the agent's %s", out, want)
	}
}
