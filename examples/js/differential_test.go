package js_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// diffHeaders are the raw country headers of every world: every ISO code
// as is and in lower case, and the junk headers (fleettest.Junk: spaced,
// reserved, unassigned, invalid).
func diffHeaders() []string {
	var hs []string
	for _, cc := range routing.Countries() {
		hs = append(hs, cc, strings.ToLower(cc))
	}
	return append(append(hs, fleettest.Junk...), diffCommaHeaders...)
}

// diffCommaHeaders are headers holding a comma: Node joins a repeated
// CF-IPCountry as "US, DE" and the JS reader takes the text before the
// first comma, as Go's agent takes the first of repeated headers
// (examples/js/README.md). They are compared with Go's decision for that
// text (goHeader).
var diffCommaHeaders = []string{"DE, US", "us,de", " pl ,x", ",PL", "XX, DE", "DE,", "gb\t, fr"}

// goHeader is the header Go decides for where the JS reader is given h:
// the text before a first comma.
func goHeader(h string) string {
	before, _, _ := strings.Cut(h, ",")
	return before
}

// diffEpochs are stored epoch values (routing/epoch) some worlds get:
// valid ones up to routing.MaxEpoch (2^53−1, the largest JSON.parse holds
// exactly), and refused ones (epoch 0 for every reader): negative, not a
// number, and past MaxEpoch (the JS review: past 2^53 the JS reader
// refused every decision while Go and PHP decided).
var diffEpochs = []string{"0", "7", " 42\n", "9007199254740991", "-1", "x", "9007199254740992", "9007199254740993", "9223372036854775807"}

// diffKeysPerWorld is how many sticky keys every header of a world is
// decided with, besides without one.
const diffKeysPerWorld = 6

// diffWorld is one world as the test and the driver see it.
type diffWorld struct {
	tab       *routing.Table
	now       time.Time
	later     time.Time // kv-later's clock
	keys      []string
	withStale bool   // Go's decisions get stale-table (old synced_at, or a stale table)
	synced    string // how synced_at was set, for messages
	header    routing.JSONHeader
	until     map[string]time.Time // each KV key's valid_until (zero: none)
	entries   map[string]string    // each KV key's entry
	kvs       []routing.KV
	KV        string   `json:"kv"`
	Idx       string   `json:"idx"`
	Now       int64    `json:"now"`   // the reader's clock, ms: Go's resolve instant
	Later     int64    `json:"later"` // kv-later's clock, ms
	MaxAge    int      `json:"max_age"`
	Keys      []string `json:"keys"`
}

// diffModes are the JS paths compared with Go at Go's instant: the
// Worker's (a KV export in a Workers KV) and Node's (table.idx read per
// decision, and an IndexReader). diffLater is the Worker's at a later
// instant (the world's later), compared with Go's decision at the
// export's instant plus stale-table from the value's valid_until on.
var (
	diffModes = []string{"kv", "idx", "idx-cached"}
	diffLater = "kv-later"
)

// TestJSAgreesOnRandomPolicies: the JS reader decides as Go's
// Table.Resolve on random routing prefixes (examples/php's
// TestDecidersAgreeOnRandomPolicies' generator; besides, on some worlds,
// a stored epoch and pool attrs named like JS prototype members or
// holding escapes and non-ASCII), through a KV export (the Worker's path:
// snapindex.KVValues, what `regionctl export kv` uploads, in an in-memory
// Workers KV) and through table.idx (decideFromIndexFile and an
// IndexReader): for every ISO code as is and in lower case, the junk
// headers and headers holding a comma (Go deciding for the text before
// it), without a key and with diffKeysPerWorld keys, the same country,
// route, fallback depth, pool (when sticky: a key and affinity not
// random; else a candidate of Go's entry, of weight > 0), host, attrs,
// degraded reasons, revision and epoch, and NoRoute with the same reasons
// and 503 body; synced_at fresh, absent, an hour old (stale-table) or the
// table stale. The reader's clock is Go's resolve instant; and once more
// for the KV export later (at, or a millisecond before, one of its
// valid_until instants, or up to 40 s on): Go's decision at the export's
// instant, with stale-table from the value's valid_until on, whose
// promise is checked on Go's side too (the country's entry is the same
// until then and differs at it). No JS decision (nor Go's) sends a viewer
// to a pool outside the class of their country.
//
// REGIOND_DIFF_WORLDS sets how many worlds (30: ~7 s on a loaded 2-core
// machine), REGIOND_DIFF_SEED the seed (1), REGIOND_DIFF_FULL how many
// decisions per header go through the whole path, the no-key one first
// (2; the others decide on the entry read once for the header, through
// kvEntry, readIndexFile or the reader's read).
func TestJSAgreesOnRandomPolicies(t *testing.T) {
	nodeBin := node(t)
	nWorlds, seed, full := 30, uint64(1), 2
	for name, p := range map[string]any{"REGIOND_DIFF_WORLDS": &nWorlds, "REGIOND_DIFF_SEED": &seed, "REGIOND_DIFF_FULL": &full} {
		if s := os.Getenv(name); s != "" {
			if _, err := fmt.Sscan(s, p); err != nil {
				t.Fatalf("%s=%q: %v", name, s, err)
			}
		}
	}
	r := rand.New(rand.NewPCG(77, 88+seed-1)) // the worlds' stream (examples/php's seed at 1; it draws its keys from it too)
	kr := rand.New(rand.NewPCG(seed, 4242))   // keys, staleness and later, apart from the worlds' stream
	jsHeaders := diffHeaders()
	hx := make([]string, len(jsHeaders))
	headers := make([]string, len(jsHeaders)) // Go's, as messages name them
	for i, h := range jsHeaders {
		hx[i], headers[i] = hex.EncodeToString([]byte(h)), goHeader(h)
	}
	modes := append(slices.Clone(diffModes), diffLater)
	dir := t.TempDir()
	worlds := make([]*diffWorld, nWorlds)
	for w := range worlds {
		worlds[w] = makeWorld(t, r, kr, dir, w)
	}
	// Two node processes (the machine's cores), each half the worlds.
	type result struct {
		out []byte
		err error
	}
	halves := [][]*diffWorld{worlds[:len(worlds)/2], worlds[len(worlds)/2:]}
	results := make([]chan result, len(halves))
	for i, ws := range halves {
		results[i] = make(chan result, 1)
		in, err := json.Marshal(map[string]any{"headers": hx, "modes": modes, "worlds": ws, "full": full})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			cmd := exec.Command(nodeBin, filepath.Join("testdata", "diff.mjs"))
			cmd.Stdin = bytes.NewReader(in)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err == nil && stderr.Len() > 0 {
				err = fmt.Errorf("wrote to stderr")
			}
			if err != nil {
				err = fmt.Errorf("node diff.mjs: %v\nstderr: %s", err, stderr.String())
			}
			results[i] <- result{stdout.Bytes(), err}
		}()
	}
	var total fleettest.Counts
	var later, laterStale int
	bad := 0
	w0 := 0
	for i, ws := range halves {
		res := <-results[i]
		if res.err != nil {
			t.Fatal(res.err)
		}
		lines := bytes.SplitAfter(bytes.TrimSuffix(res.out, []byte("\n")), []byte("\n"))
		if want := len(ws) * len(modes) * len(headers); len(lines) != want {
			t.Fatalf("node diff.mjs wrote %d lines, want %d", len(lines), want)
		}
		for j, dw := range ws {
			w := w0 + j
			var sweeps []*fleettest.Sweep
			for m, mode := range modes {
				at := (j*len(modes) + m) * len(headers)
				s, err := fleettest.ReadSweep("JS "+mode, bytes.Join(lines[at:at+len(headers)], nil), headers, dw.keys)
				if err != nil {
					t.Fatalf("world %d: %v", w, err)
				}
				sweeps = append(sweeps, s)
			}
			now, late := sweeps[:len(diffModes)], sweeps[len(diffModes)]
			x := fleettest.Expect{Table: dw.tab, Now: dw.now, WithStale: dw.withStale}
			n, nbad, msgs, err := x.Compare(now...)
			if err != nil {
				t.Fatalf("world %d: %v", w, err)
			}
			total.Decisions += n.Decisions
			total.Sticky += n.Sticky
			total.Random += n.Random
			total.NoRoute += n.NoRoute
			ln, lstale, lbad, lmsgs := compareLater(t, dw, x, headers, late)
			later, laterStale = later+ln, laterStale+lstale
			vbad := checkValidUntil(t, dw)
			rbad := residency(t, dw, headers, sweeps)
			if nbad > 0 {
				t.Errorf("world %d (synced_at %s): %d of %d decisions differ from Go's; the first:\n  %s",
					w, dw.synced, nbad, n.Decisions, strings.Join(msgs, "\n  "))
			}
			if lbad > 0 {
				t.Errorf("world %d (synced_at %s): %s at %s: %d decisions differ from Go's; the first:\n  %s",
					w, dw.synced, diffLater, dw.later.UTC().Format(time.RFC3339Nano), lbad, strings.Join(lmsgs, "\n  "))
			}
			for _, m := range vbad {
				t.Errorf("world %d: VALID_UNTIL: %s", w, m)
			}
			for _, m := range rbad {
				t.Errorf("world %d: RESIDENCY: %s", w, m)
			}
			if nbad+lbad+len(vbad)+len(rbad) > 0 {
				bad++
				t.Logf("world %d:\n%s", w, describeWorld(dw))
			}
		}
		w0 += len(ws)
	}
	t.Logf("%d worlds × %d headers × (no key, %d keys); per mode of %v: %s; %s: %d decisions, %d of them stale from valid_until",
		nWorlds, len(headers), diffKeysPerWorld, diffModes, total, diffLater, later, laterStale)
	if bad > 0 {
		t.Errorf("%d of %d worlds differ", bad, nWorlds)
	}
}

// diffStart is the instant of the first world.
var diffStart = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// makeWorld makes world w: its table (r's next random world), its
// index and KV export in dir, keys, staleness and later instant from kr.
func makeWorld(t *testing.T, r, kr *rand.Rand, dir string, w int) *diffWorld {
	t.Helper()
	now := diffStart.Add(time.Duration(w) * time.Minute) // a failing seed's worlds come again alike
	kvs := fleettest.RandomWorld(r, now)
	// Attribute names and values JS could mistake (prototype members,
	// array indices, escapes, non-ASCII) on some pools (kr: the worlds'
	// stream stays examples/php's).
	for i := range kvs {
		if strings.HasPrefix(kvs[i].Key, routing.PoolKey("")) && kr.IntN(4) == 0 {
			var p map[string]any
			if err := json.Unmarshal(kvs[i].Value, &p); err != nil {
				t.Fatal(err)
			}
			p["attrs"] = map[string]string{"__proto__": "proto", "constructor": "c", "toString": "t", "hasOwnProperty": "h",
				"0": "zero", "lang": "é視🎬", "quote": "\"</script>\\", "ls": "a\u2028b\u0000c", "shard": kvs[i].Key}
			b, err := routing.EncodeValue(p)
			if err != nil {
				t.Fatal(err)
			}
			kvs[i].Value = b
		}
	}
	// A stored epoch on some worlds (kr), refused ones too.
	if kr.IntN(3) == 0 {
		kvs = append(kvs, routing.KV{Key: routing.EpochKey, Value: []byte(diffEpochs[kr.IntN(len(diffEpochs))]),
			ModRevision: int64(len(kvs) + 2), CreateRevision: int64(len(kvs) + 2), Version: 1})
	}
	start := now.Add(-time.Duration(r.IntN(10)) * time.Second)
	dw := &diffWorld{now: now, kvs: kvs, Now: now.UnixMilli(), MaxAge: 180, synced: "now"}
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: now}
	stale := false
	switch kr.IntN(6) {
	case 3:
		h.SyncedAt, dw.synced = time.Time{}, "absent"
	case 4:
		h.SyncedAt, dw.synced, dw.MaxAge, dw.withStale = now.Add(-time.Hour), "an hour ago", 1800, true
	case 5:
		stale, dw.synced, dw.withStale = true, "now, table stale", true
	}
	dw.header = h
	dw.tab = routing.Compile(100, kvs, nil, routing.CompileOptions{Now: now, Start: start, Stale: stale})
	for range diffKeysPerWorld {
		k := randomKey(kr)
		dw.keys = append(dw.keys, k)
		dw.Keys = append(dw.Keys, hex.EncodeToString([]byte(k)))
	}
	idx, err := snapindex.Encode(nil, dw.tab, h)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := snapindex.KVValues(dw.tab, h)
	if err != nil {
		t.Fatal(err)
	}
	dw.until, dw.entries = kvEntries(t, vs)
	kv, err := snapindex.AppendKV(nil, vs, snapindex.KVFormatCloudflare)
	if err != nil {
		t.Fatal(err)
	}
	// later: at one of the export's valid_until instants (rounded up to
	// the ms: stale from it on) or a ms before it, or up to 40 s on.
	var untils []time.Time
	for _, u := range dw.until {
		if !u.IsZero() && !slices.ContainsFunc(untils, u.Equal) {
			untils = append(untils, u)
		}
	}
	slices.SortFunc(untils, time.Time.Compare)
	dw.later = now.Add(time.Duration(kr.IntN(40_000)) * time.Millisecond)
	if len(untils) > 0 && kr.IntN(3) > 0 {
		u := untils[kr.IntN(len(untils))]
		// A whole millisecond (a boost's expires_at) half the time when
		// there is one: later can then be the instant itself.
		whole := slices.DeleteFunc(slices.Clone(untils), func(u time.Time) bool { return u.Nanosecond()%1e6 != 0 })
		if len(whole) > 0 && kr.IntN(2) == 0 {
			u = whole[kr.IntN(len(whole))]
		}
		ms := u.UnixMilli()
		if time.UnixMilli(ms).Before(u) {
			ms++ // ceiling
		}
		if kr.IntN(2) == 0 {
			ms-- // the last ms before u
		}
		dw.later = time.UnixMilli(ms)
	}
	dw.Later = dw.later.UnixMilli()
	dw.Idx, dw.KV = filepath.Join(dir, fmt.Sprintf("w%d.idx", w)), filepath.Join(dir, fmt.Sprintf("w%d.kv.json", w))
	if err := os.WriteFile(dw.Idx, idx, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dw.KV, kv, 0o644); err != nil {
		t.Fatal(err)
	}
	return dw
}

// kvEntries returns each KV key's valid_until (zero: none) and entry.
func kvEntries(t *testing.T, vs []snapindex.KVValue) (map[string]time.Time, map[string]string) {
	t.Helper()
	until, entries := map[string]time.Time{}, map[string]string{}
	for _, v := range vs {
		var m struct {
			ValidUntil string          `json:"valid_until"`
			Entry      json.RawMessage `json:"entry"`
		}
		if err := json.Unmarshal(v.Value, &m); err != nil {
			t.Fatalf("KV value of %s: %v", v.Key, err)
		}
		if m.ValidUntil != "" {
			u, err := time.Parse(time.RFC3339Nano, m.ValidUntil)
			if err != nil {
				t.Fatalf("KV value of %s: %v", v.Key, err)
			}
			until[v.Key] = u
		}
		entries[v.Key] = string(m.Entry)
	}
	return until, entries
}

// compareLater compares the sweep of the KV export at dw.later with Go's
// decision at the export's instant (dw.now), stale-table added where the
// value's valid_until is at or before later (or its synced_at older than
// the max age then). It returns how many decisions it compared, how many
// of them valid_until alone made stale, how many differ and the first
// few.
func compareLater(t *testing.T, dw *diffWorld, x fleettest.Expect, headers []string, s *fleettest.Sweep) (n, byUntil, bad int, msgs []string) {
	t.Helper()
	synced := dw.header.SyncedAt
	if synced.IsZero() {
		synced = dw.header.WrittenAt
	}
	aged := dw.later.Sub(synced) > time.Duration(dw.MaxAge)*time.Second
	for h, hdr := range headers {
		cc := routing.NormalizeCountry(hdr)
		u := dw.until[cc]
		stale := aged || !u.IsZero() && !dw.later.Before(u)
		for k := -1; k < len(dw.keys); k++ {
			key := ""
			if k >= 0 {
				key = dw.keys[k]
			}
			want, err := x.Want(hdr, key)
			if err != nil {
				t.Fatal(err)
			}
			n++
			if !u.IsZero() && !dw.later.Before(u) && !aged && !dw.withStale {
				byUntil++
			}
			if stale && !slices.Contains(want.D.Degraded, "stale-table") {
				want.D.Degraded = append(slices.Clone(want.D.Degraded), "stale-table")
			}
			a := s.At(h, k)
			if d := x.Match(&want, a); d != "" {
				if bad++; bad <= 5 {
					until := "none"
					if !u.IsZero() {
						until = u.UTC().Format(time.RFC3339Nano)
					}
					msgs = append(msgs, fmt.Sprintf("header %q, key %q (valid_until %s):\n    Go: %s\n    %s: %s [DIFFERS: %s]",
						hdr, key, until, want.Answer.String(), s.Reader, a.String(), d))
				}
			}
		}
	}
	return n, byUntil, bad, msgs
}

// checkValidUntil checks the KV export's valid_until on Go's side: each
// value's entry is the one the table has at later and at every
// valid_until instant (and a nanosecond before) before the value's own,
// and differs at its own.
func checkValidUntil(t *testing.T, dw *diffWorld) []string {
	t.Helper()
	ats := []time.Time{dw.later}
	for _, u := range dw.until {
		ats = append(ats, u.Add(-time.Nanosecond), u)
	}
	var msgs []string
	seen := map[int64]bool{}
	for _, at := range ats {
		if seen[at.UnixNano()] || at.Before(dw.now) {
			continue
		}
		seen[at.UnixNano()] = true
		vs, err := snapindex.KVValues(dw.tab, routing.JSONHeader{WrittenAt: at, SyncedAt: dw.header.SyncedAt})
		if err != nil {
			t.Fatal(err)
		}
		_, entries := kvEntries(t, vs)
		for cc, e := range entries {
			u := dw.until[cc]
			switch {
			case (u.IsZero() || at.Before(u)) && e != dw.entries[cc]:
				msgs = append(msgs, fmt.Sprintf("%s's entry changes at %s, before its valid_until %v:\n    then %s\n    now  %s",
					cc, at.UTC().Format(time.RFC3339Nano), u, e, dw.entries[cc]))
			case at.Equal(u) && e == dw.entries[cc]:
				msgs = append(msgs, fmt.Sprintf("%s's entry is the same at its valid_until %s: %s", cc, at.UTC().Format(time.RFC3339Nano), e))
			}
			if len(msgs) >= 5 {
				return msgs
			}
		}
	}
	return msgs
}

// residency returns a message for every decision, Go's or a sweep's, that
// sends a viewer to a pool outside the class of their country (the
// table's ClassOf: "" any pool), and for every random pick of a pool of
// weight 0 (Go never picks one unless all are 0).
func residency(t *testing.T, dw *diffWorld, headers []string, sweeps []*fleettest.Sweep) []string {
	t.Helper()
	var msgs []string
	report := func(format string, args ...any) {
		if len(msgs) < 5 {
			msgs = append(msgs, fmt.Sprintf(format, args...))
		}
	}
	for h, hdr := range headers {
		cc := routing.NormalizeCountry(hdr)
		class := dw.tab.ClassOf(cc)
		e := dw.tab.Effective(cc)
		positive := slices.ContainsFunc(e.Candidates, func(c routing.Candidate) bool { return c.Weight > 0 })
		for k := -1; k < len(dw.keys); k++ {
			key := ""
			if k >= 0 {
				key = dw.keys[k]
			}
			type pick struct{ reader, pool string }
			var picks []pick
			if d, err := dw.tab.Resolve(hdr, key, dw.now); err == nil {
				picks = append(picks, pick{"Go", d.Pool})
			}
			for _, s := range sweeps {
				if a := s.At(h, k); !a.NoRoute && a.Err == "" {
					picks = append(picks, pick{s.Reader, a.D.Pool})
				}
			}
			for _, p := range picks {
				if i := slices.IndexFunc(e.Candidates, func(c routing.Candidate) bool { return c.Pool == p.pool }); i >= 0 &&
					positive && e.Candidates[i].Weight <= 0 {
					report("%s picks pool %s of weight %d for header %q, key %q", p.reader, p.pool, e.Candidates[i].Weight, hdr, key)
				}
				if class == "" {
					continue
				}
				if pl, ok := dw.tab.Pool(p.pool); !ok || pl.Residency != class {
					res := "<no such pool>"
					if ok {
						res = pl.Residency
					}
					report("%s sends header %q (class %s), key %q, to pool %s (residency %s)", p.reader, hdr, class, key, p.pool, res)
				}
			}
		}
	}
	return msgs
}

// describeWorld is the routing prefix of a world, one key a line.
func describeWorld(dw *diffWorld) string {
	var b strings.Builder
	for _, kv := range dw.kvs {
		fmt.Fprintf(&b, "  %s = %s\n", kv.Key, kv.Value)
	}
	fmt.Fprintf(&b, "  now %s", dw.now.UTC().Format(time.RFC3339Nano))
	return b.String()
}
