package js_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// garbage are raw country headers that must normalize like Go's
// routing.NormalizeCountry: spaced, lower-case, reserved, unassigned and
// invalid.
var garbage = []string{
	" pl ", "pl", "\tDe\r\n", "xx", "XX", "T1", "t1", "", " ", "A1", "A2", "O1", "EU", "UK", "zz",
	"POL", "P", "p l", "_unknown", "\x00\x00", "ÄÖ", "12", "usa", " us", "gb\n", "Pl\t",
	"\vPL", "PL\x00", "\u00a0PL", "\x00de", "Ｐl", "ǅe",
}

// headers returns every two-letter code AA..ZZ, the garbage headers and
// _unknown.
func headers() []string {
	var hs []string
	for a := 'A'; a <= 'Z'; a++ {
		for b := 'A'; b <= 'Z'; b++ {
			hs = append(hs, string([]rune{a, b}))
		}
	}
	return append(append(hs, garbage...), routing.Unknown)
}

// Keys of a cross-check: the first fullKeys go through the whole path (a
// KV get or an index read per decision), the rest through the sticky pick
// on the entry read once per header.
const (
	fullKeys = 20
	pickKeys = 1000
)

func keys() []string {
	r := rand.New(rand.NewPCG(20261202, 11))
	ks := make([]string, fullKeys+pickKeys)
	for i := range ks {
		ks[i] = randomKey(r)
	}
	return ks
}

// outcome is one decision of the driver.
type outcome struct {
	OK      bool            `json:"ok"`
	D       json.RawMessage `json:"d"`
	Error   string          `json:"error"`
	Body    json.RawMessage `json:"body"`
	Message string          `json:"message"`
}

// headerResult is the driver's line for one header.
type headerResult struct {
	NoKey outcome   `json:"nokey"`
	Full  []outcome `json:"full"`
	Picks []int     `json:"picks"`
}

// decideJS runs the driver's decide mode on file.
func decideJS(t *testing.T, mode, file string, maxAge int, hs, ks []string) []headerResult {
	t.Helper()
	out := runNode(t, map[string]any{"headers": hexAll(hs), "keys": hexAll(ks), "full": fullKeys},
		"decide", mode, file, fmt.Sprint(maxAge))
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	var rs []headerResult
	for sc.Scan() {
		var r headerResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("driver line %d: %v", len(rs), err)
		}
		rs = append(rs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(hs) {
		t.Fatalf("driver answered %d headers, want %d", len(rs), len(hs))
	}
	return rs
}

// noRouteBody is the agent's 503 body (internal/api errorBody).
type noRouteBody struct {
	Error    string   `json:"error"`
	Country  string   `json:"country,omitempty"`
	Reasons  []string `json:"reasons,omitempty"`
	Revision int64    `json:"revision,omitempty"`
	Epoch    int64    `json:"epoch,omitempty"`
}

// counts tallies what a cross-check compared.
type counts struct{ sticky, random, noRoute, picks int }

// checker compares the JS outcomes with routing.Resolve on tab at now;
// withStale adds the stale-table the JS reader adds for an old synced_at.
type checker struct {
	t         *testing.T
	tab       *routing.Table
	now       time.Time
	withStale bool
	bad       int
	n         counts
	// want holds Go's picks for the keys per entry: headers share entries
	// (a few dozen for every code), so each is computed once.
	want map[*routing.Effective][]int
}

func (c *checker) fail(h, key, format string, args ...any) {
	c.t.Helper()
	if c.bad++; c.bad <= 10 {
		c.t.Errorf("header %q key %q: %s", h, key, fmt.Sprintf(format, args...))
	}
}

// check compares one outcome for header h and key.
func (c *checker) check(h, key string, g outcome) {
	c.t.Helper()
	want, err := c.tab.Resolve(h, key, c.now)
	deg := slices.Clone(want.Degraded)
	if c.withStale && !slices.Contains(deg, "stale-table") {
		deg = append(deg, "stale-table")
	}
	if err != nil {
		if !errors.Is(err, routing.ErrNoRoute) {
			c.t.Fatalf("Go Resolve(%q, %q): %v", h, key, err)
		}
		c.n.noRoute++
		wantBody, _ := json.Marshal(noRouteBody{"no eligible pool", want.Country, deg, want.Revision, want.Epoch})
		if g.OK || g.Error != "NoRouteError" || !jsonEqual(g.Body, wantBody) {
			c.fail(h, key, "Go: NoRoute %s; JS: %+v", wantBody, g)
		}
		return
	}
	if !g.OK {
		c.fail(h, key, "Go: %s via %s; JS: %s %s", want.Pool, want.Route, g.Error, g.Message)
		return
	}
	var d routing.Decision
	dec := json.NewDecoder(bytes.NewReader(g.D))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		c.fail(h, key, "JS decision %s: %v", g.D, err)
		return
	}
	if k := jsonKeys(g.D); !slices.Equal(k, decisionKeys) {
		c.fail(h, key, "JS decision members %v, want Go's %v", k, decisionKeys)
	}
	e := c.tab.Effective(want.Country)
	if key != "" && e.Affinity != routing.AffinityRandom {
		c.n.sticky++
	} else {
		// A random pick: any candidate, with its host and attrs.
		c.n.random++
		i := slices.IndexFunc(e.Candidates, func(cd routing.Candidate) bool { return cd.Pool == d.Pool })
		if i < 0 {
			c.fail(h, key, "random pick %s is not a candidate of %s", d.Pool, want.Country)
			return
		}
		want.Pool, want.Host, want.Attrs = d.Pool, e.Candidates[i].Host, mergedAttrs(c.tab, e, d.Pool)
	}
	want.Degraded = deg
	if d.Country != want.Country || d.Route != want.Route || d.Pool != want.Pool || d.Host != want.Host ||
		!maps.Equal(d.Attrs, want.Attrs) || d.Revision != want.Revision || d.Epoch != want.Epoch ||
		d.FallbackDepth != want.FallbackDepth || !slices.Equal(d.Degraded, want.Degraded) {
		c.fail(h, key, "\n  JS %+v\n  Go %+v", d, want)
	}
}

// checkPicks compares the JS sticky picks (candidate indices) of header h
// for keys with Go's.
func (c *checker) checkPicks(h string, ks []string, picks []int) {
	c.t.Helper()
	e := c.tab.Effective(routing.NormalizeCountry(h))
	if len(e.Candidates) < 2 {
		if len(picks) != 0 {
			c.fail(h, "", "%d picks for %d candidates", len(picks), len(e.Candidates))
		}
		return
	}
	if len(picks) != len(ks) {
		c.fail(h, "", "%d picks, want %d", len(picks), len(ks))
		return
	}
	wants, ok := c.want[e]
	if !ok {
		wants = make([]int, len(ks))
		for j, k := range ks {
			wants[j] = routing.PickSticky(e.Candidates, k)
		}
		if c.want == nil {
			c.want = map[*routing.Effective][]int{}
		}
		c.want[e] = wants
	}
	for j, k := range ks {
		want := wants[j]
		if picks[j] != want {
			c.fail(h, k, "JS picks %d, Go %d (%s)", picks[j], want, e.Candidates[want].Pool)
		}
		c.n.picks++
	}
}

// crossCheck checks every header's JS outcomes against Go.
func crossCheck(t *testing.T, tab *routing.Table, now time.Time, withStale bool, hs, ks []string, rs []headerResult) counts {
	t.Helper()
	c := &checker{t: t, tab: tab, now: now, withStale: withStale}
	for i, h := range hs {
		c.check(h, "", rs[i].NoKey)
		if len(rs[i].Full) != fullKeys {
			t.Fatalf("header %q: %d full decisions, want %d", h, len(rs[i].Full), fullKeys)
		}
		for j, g := range rs[i].Full {
			c.check(h, ks[j], g)
		}
		c.checkPicks(h, ks[fullKeys:], rs[i].Picks)
	}
	if c.bad > 0 {
		t.Fatalf("%d outcomes differ between JS and Go", c.bad)
	}
	return c.n
}

// mergedAttrs is what a Decision for pool in e carries: the pool's attrs
// overlaid by the entry's.
func mergedAttrs(tab *routing.Table, e *routing.Effective, pool string) map[string]string {
	m := map[string]string{}
	if p, ok := tab.Pool(pool); ok {
		maps.Copy(m, p.Attrs)
	}
	maps.Copy(m, e.Attrs)
	return m
}

var decisionKeys = func() []string {
	b, _ := json.Marshal(routing.Decision{})
	return jsonKeys(b)
}()

func jsonKeys(b []byte) []string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	return slices.Sorted(maps.Keys(m))
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// kvFile writes tab's KV export (cloudflare format) with synced_at.
func kvFile(t testing.TB, tab *routing.Table, now, synced time.Time) string {
	t.Helper()
	vs, err := snapindex.KVValues(tab, routing.JSONHeader{WrittenAt: now, SyncedAt: synced})
	if err != nil {
		t.Fatal(err)
	}
	b, err := snapindex.AppendKV(nil, vs, snapindex.KVFormatCloudflare)
	if err != nil {
		t.Fatal(err)
	}
	return writeTemp(t, "kv.json", b)
}

// indexFile writes tab's index (snapindex.Encode, the agent's encoder).
func indexFile(t testing.TB, tab *routing.Table, now, synced time.Time) string {
	t.Helper()
	b, err := snapindex.Encode(nil, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: synced})
	if err != nil {
		t.Fatal(err)
	}
	return writeTemp(t, "table.idx", b)
}

// Max ages given to the JS reader: the fresh checks must not turn stale
// however long the test runs (a busy machine), and a synced_at an hour old
// must be stale.
const (
	freshAge = 1 << 30
	oldAge   = 30 * 60
)

// TestDecisionsMatchGo: through the KV export (a Workers KV namespace in
// memory) and through the index file (sync and async reads), every header
// (AA..ZZ, junk, _unknown) × 1,020 keys (20 through the whole path on
// every path, 1,000 more through the sticky pick of the entry read from KV) decides as routing.Resolve on
// every scenario of fleettest.Scenarios (drained, down, unhealthy, boosted,
// NoRoute, stale); a synced_at older than the max age adds stale-table.
func TestDecisionsMatchGo(t *testing.T) {
	node(t)
	now := time.Now()
	hs, ks := headers(), keys()
	var total counts
	for _, sc := range fleettest.Scenarios(t, now) {
		for _, mode := range []string{"kv", "idx", "idx-async"} {
			t.Run(sc.Name+"/"+mode, func(t *testing.T) {
				file := ""
				switch mode {
				case "kv":
					file = kvFile(t, sc.Table, now, now)
				default:
					file = indexFile(t, sc.Table, now, now)
				}
				// The 1,000 picks run on the KV path only: the index's entries
				// are the same bytes (one encoder), and the pick the same code;
				// the stale scenario has the fleet's candidates.
				ks := ks
				if mode != "kv" || sc.Name == "stale" {
					ks = ks[:fullKeys]
				}
				rs := decideJS(t, mode, file, freshAge, hs, ks)
				n := crossCheck(t, sc.Table, now, sc.Table.Stale(), hs, ks, rs)
				t.Logf("%d sticky, %d random, %d NoRoute equal; %d sticky picks equal", n.sticky, n.random, n.noRoute, n.picks)
				total.sticky, total.random, total.noRoute, total.picks = total.sticky+n.sticky, total.random+n.random, total.noRoute+n.noRoute, total.picks+n.picks
			})
		}
	}
	tab := fleettest.Scenarios(t, now)[0].Table
	old := now.Add(-time.Hour)
	t.Run("old-sync/kv", func(t *testing.T) {
		crossCheck(t, tab, now, true, hs, ks[:fullKeys], decideJS(t, "kv", kvFile(t, tab, now, old), oldAge, hs, ks[:fullKeys]))
	})
	t.Run("old-sync/idx", func(t *testing.T) {
		crossCheck(t, tab, now, true, hs, ks[:fullKeys], decideJS(t, "idx", indexFile(t, tab, now, old), oldAge, hs, ks[:fullKeys]))
	})
	if total.noRoute == 0 || total.random == 0 || total.sticky < 5000 {
		t.Errorf("compared %+v: want NoRoute, random and ≥ 5000 sticky decisions", total)
	}
}
