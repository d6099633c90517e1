package snapindex_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// headers returns raw country headers: every two-letter code AA..ZZ (as
// is, lower case, space-padded), junk, and _unknown's spellings.
func headers() []string {
	var hs []string
	for i := range snapindex.UnknownSlot {
		cc := snapindex.SlotCode(i)
		hs = append(hs, cc, strings.ToLower(cc), " "+cc+"\t", cc[:1]+strings.ToLower(cc[1:]))
	}
	return append(hs, junk...)
}

// junk are headers that are no two-letter code after normalizing.
var junk = []string{"", " ", "T1", "A1", "12", "POL", "P", "p l", "_unknown", "\x00\x00", "ÄÖ", "usa",
	"\vPL", "PL\x00", "\u00a0PL", "\x00de", "P@", "[L", "`a", "{z", "\xc1\xc2", "PL\r\n\r\n", "  d e "}

// keys returns n sticky keys, some of arbitrary bytes.
func keys(r *rand.Rand, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		b := make([]byte, 1+r.IntN(40))
		for j := range b {
			if i%7 == 0 {
				b[j] = byte(r.IntN(256))
			} else {
				b[j] = "abcdefghijklmnopqrstuvwxyz0123456789-_"[r.IntN(38)]
			}
		}
		ks[i] = string(b)
	}
	return ks
}

// sameDecision compares decisions, nil and empty lists and maps equal.
func sameDecision(a, b routing.Decision) bool {
	return a.Country == b.Country && a.Route == b.Route && a.Pool == b.Pool && a.Host == b.Host &&
		maps.Equal(a.Attrs, b.Attrs) && a.Revision == b.Revision && a.Epoch == b.Epoch &&
		a.FallbackDepth == b.FallbackDepth && slices.Equal(a.Degraded, b.Degraded)
}

// checkResolve compares x.Resolve with tab.Resolve on header × key: exactly
// for sticky decisions, and for random picks everything but the pick,
// which must be a candidate carrying its merged attrs. It returns the
// decisions compared exactly, as random picks and as NoRoute.
func checkResolve(t *testing.T, tab *routing.Table, x *snapindex.Index, now time.Time, header, key string) (sticky, random, noRoute int) {
	t.Helper()
	want, werr := tab.Resolve(header, key, now)
	got, gerr := x.Resolve(header, key, now)
	if !errors.Is(gerr, werr) && (werr != nil || gerr != nil) {
		t.Fatalf("Resolve(%q, %q): index error %v, table error %v", header, key, gerr, werr)
	}
	e := tab.Effective(want.Country)
	if werr != nil || (key != "" && e.Affinity != routing.AffinityRandom) || len(e.Candidates) == 1 {
		if !sameDecision(got, want) {
			t.Fatalf("Resolve(%q, %q):\n index %+v\n table %+v", header, key, got, want)
		}
		if werr != nil {
			return 0, 0, 1
		}
		return 1, 0, 0
	}
	i := slices.IndexFunc(e.Candidates, func(c routing.Candidate) bool { return c.Pool == got.Pool })
	if i < 0 {
		t.Fatalf("Resolve(%q, %q): random pick %s is not a candidate of %+v", header, key, got.Pool, e.Candidates)
	}
	c := &e.Candidates[i]
	want.Pool, want.Host, want.Attrs = c.Pool, c.Host, c.MergedAttrs()
	if !sameDecision(got, want) {
		t.Fatalf("Resolve(%q, %q) random:\n index %+v\n table %+v", header, key, got, want)
	}
	return 0, 1, 0
}

// TestResolveMatchesTable: the index of every scenario decides as the
// table does for every code AA..ZZ and junk header, and _unknown for
// 1,000 keys.
func TestResolveMatchesTable(t *testing.T) {
	now := time.Now()
	r := rand.New(rand.NewPCG(11, 1))
	ks := append(keys(r, 3), "")
	many := keys(r, 1000)
	for _, sc := range fleettest.Scenarios(t, now) {
		t.Run(sc.Name, func(t *testing.T) {
			b, err := snapindex.Encode(nil, sc.Table, routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			x, err := snapindex.Parse("table.idx", b)
			if err != nil {
				t.Fatal(err)
			}
			var sticky, random, noRoute int
			add := func(s, r, n int) { sticky, random, noRoute = sticky+s, random+r, noRoute+n }
			for _, h := range headers() {
				for _, k := range ks {
					add(checkResolve(t, sc.Table, x, now, h, k))
				}
			}
			for _, h := range []string{"", "XX", "zz"} {
				for _, k := range many {
					add(checkResolve(t, sc.Table, x, now, h, k))
				}
			}
			t.Logf("%s: %d sticky decisions equal, %d random picks valid, %d NoRoute; %d bytes", sc.Name, sticky, random, noRoute, len(b))
			checkScenario(t, sc.Name, x, now, noRoute)
		})
	}
}

// checkScenario asserts that a scenario's index shows what the scenario
// is about, so that the cross-check covers it.
func checkScenario(t *testing.T, name string, x *snapindex.Index, now time.Time, noRoute int) {
	t.Helper()
	dec := func(cc string) (routing.Decision, error) { return x.Resolve(cc, "viewer-1", now) }
	switch name {
	case "fleet":
		if d, err := dec("PL"); err != nil || d.Route != "PL" || len(d.Degraded) != 0 || noRoute != 0 {
			t.Errorf("fleet PL: %+v %v (NoRoute %d)", d, err, noRoute)
		}
	case "drained":
		if d, err := dec("PL"); err != nil || d.Pool != "eu-west" || !slices.Contains(d.Degraded, "pool-draining:eu-central") ||
			d.Attrs["cdn"] != "cdn-pl.example.net" || d.Attrs["pool_only"] != "yes" || d.Attrs["lang"] != "pl" {
			t.Errorf("drained PL: %+v %v", d, err)
		}
		if _, err := dec("XX"); !errors.Is(err, routing.ErrNoRoute) {
			t.Errorf("drained unknown: %v, want NoRoute", err)
		}
	case "down":
		if d, err := dec("de"); !errors.Is(err, routing.ErrNoRoute) || d.Country != "DE" || !slices.Contains(d.Degraded, "pool-down:eu-central") {
			t.Errorf("down DE: %+v %v, want NoRoute naming pool-down:eu-central", d, err)
		}
		if d, err := dec("GB"); err != nil || d.Pool != "uk-london" {
			t.Errorf("down GB: %+v %v, want uk-london", d, err)
		}
	case "unhealthy":
		if d, err := dec("US"); err != nil || d.Pool == "us-east" || !slices.Contains(d.Degraded, "pool-unhealthy:us-east") {
			t.Errorf("unhealthy US: %+v %v, want no us-east and pool-unhealthy:us-east", d, err)
		}
		if d, err := dec("JP"); err != nil || slices.Contains(d.Degraded, "pool-unhealthy:apac-tokyo") {
			t.Errorf("unhealthy JP: %+v %v, apac-tokyo has a live instance", d, err)
		}
	case "boosted":
		if d, err := dec("KR"); err != nil || d.Pool != "kr-music" || d.Attrs["campaign"] != "comeback" || d.Attrs["lang"] != "ko-KR" {
			t.Errorf("boosted KR: %+v %v", d, err)
		}
		if d, err := dec("PL"); err != nil || d.Attrs["promo"] != "winter" {
			t.Errorf("boosted PL: %+v %v", d, err)
		}
	case "stale":
		if d, err := dec("PL"); err != nil || !slices.Contains(d.Degraded, "stale-table") || !x.Header.Stale {
			t.Errorf("stale PL: %+v %v, want stale-table", d, err)
		}
	}
}

// TestLayout checks the file against the format: magic, version, header
// JSON, slot kinds and that every non-country slot shares _unknown's entry.
func TestLayout(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	tab := fleettest.Scenarios(t, now)[0].Table
	b, err := snapindex.Encode(nil, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:4]) != "RGIX" || binary.LittleEndian.Uint16(b[4:]) != 1 {
		t.Fatalf("prefix %q", b[:8])
	}
	h := int(binary.LittleEndian.Uint16(b[6:]))
	wantHeader := `{"format":1,"revision":4242,"epoch":17,"written_at":"2026-12-02T10:00:00.123456789Z",` +
		`"synced_at":"2026-12-02T09:59:58.123456789Z","stale":false,"slots":677}`
	if got := string(b[8 : 8+h]); got != wantHeader {
		t.Fatalf("header %s\nwant %s", got, wantHeader)
	}
	slot := func(i int) (off, n, kind uint32) {
		p := b[8+h+12*i:]
		return binary.LittleEndian.Uint32(p), binary.LittleEndian.Uint32(p[4:]), binary.LittleEndian.Uint32(p[8:])
	}
	uo, un, uk := slot(676)
	if uk != 1 {
		t.Fatalf("slot 676 kind %d", uk)
	}
	countries := 0
	offsets := map[uint32]bool{}
	for i := range 676 {
		off, n, kind := slot(i)
		offsets[off] = true
		cc := snapindex.SlotCode(i)
		switch {
		case routing.IsCountry(cc) && kind == 0:
			countries++
		case !routing.IsCountry(cc) && kind == 1 && off == uo && n == un:
		default:
			t.Fatalf("slot %d (%s): offset %d length %d kind %d", i, cc, off, n, kind)
		}
	}
	if countries != len(routing.Countries()) {
		t.Errorf("%d country slots, want %d", countries, len(routing.Countries()))
	}
	var pl map[string]any
	off, n, _ := slot(int('P'-'A')*26 + int('L'-'A'))
	if err := json.Unmarshal(b[off:off+n], &pl); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(pl)); !slices.Equal(got, []string{"affinity", "candidates", "degraded", "fallback_depth", "route"}) {
		t.Errorf("PL entry members %v", got)
	}
	if end := off + n; int(end) > len(b) || b[end-1] != '}' {
		t.Errorf("PL entry does not end with its object")
	}
	t.Logf("%d bytes, %d distinct entry offsets for 676 codes", len(b), len(offsets))
	if len(offsets) >= 250 {
		t.Errorf("%d distinct entries: byte-identical entries are not shared", len(offsets))
	}
	// No synced_at: the member is left out.
	b, _ = snapindex.Encode(nil, tab, routing.JSONHeader{WrittenAt: now})
	if h := binary.LittleEndian.Uint16(b[6:]); bytes.Contains(b[8:8+h], []byte("synced_at")) {
		t.Errorf("header without synced_at: %s", b[8:8+h])
	}
}

// TestEncoderReuse: an encoder reused across changed tables makes the
// same bytes as a fresh one, each time.
func TestEncoderReuse(t *testing.T) {
	now := time.Now()
	scs := fleettest.Scenarios(t, now)
	var enc snapindex.Encoder
	var buf []byte
	for round := range 3 {
		for _, sc := range scs {
			h := routing.JSONHeader{WrittenAt: now.Add(time.Duration(round) * time.Second)}
			var err error
			if buf, err = enc.Encode(buf, sc.Table, h); err != nil {
				t.Fatal(err)
			}
			fresh, err := snapindex.Encode(nil, sc.Table, h)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, fresh) {
				t.Fatalf("round %d %s: reused encoder's bytes differ from a fresh encoder's", round, sc.Name)
			}
		}
	}
}

// TestParseRefuses: files that are not index format 1 are refused with
// an error naming the file and what is wrong.
func TestParseRefuses(t *testing.T) {
	now := time.Now()
	good, err := snapindex.Encode(nil, fleettest.Scenarios(t, now)[0].Table, routing.JSONHeader{WrittenAt: now})
	if err != nil {
		t.Fatal(err)
	}
	h := int(binary.LittleEndian.Uint16(good[6:]))
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"magic", edit(func(b []byte) []byte { b[0] = 'X'; return b }), "not a regiond index"},
		{"version 2", edit(func(b []byte) []byte { b[4] = 2; return b }), "format version 2; this reader knows version 1"},
		{"header past end", good[:8+h-1], "runs past the end"},
		{"slot table cut", good[:8+h+100], "too short for the slot table"},
		{"bad kind", edit(func(b []byte) []byte { b[8+h+12*5+8] = 7; return b }), "slot 5 (AF): unknown kind 7"},
		{"unknown slot kind", edit(func(b []byte) []byte { b[8+h+12*676+8] = 0; return b }), "slot 676 (_unknown) has kind 0"},
		{"entry past end", edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8+h+12*3:], uint32(len(b))); return b }), "slot 3 (AD): entry at"},
		{"entry not JSON", good[:len(good)-1], "entry"},
		{"format member", edit(func(b []byte) []byte { return bytes.Replace(b, []byte(`"format":1`), []byte(`"format":3`), 1) }), "format member is not 1"},
		{"block revision", edit(func(b []byte) []byte { b[8+h+12*677+8]++; return b }), "header block"},
		{"block stale flag", edit(func(b []byte) []byte { b[8+h+12*677+4] ^= snapindex.BlockStale; return b }), "header block"},
	}
	for _, c := range cases {
		_, err := snapindex.Parse("/dev/shm/regiond/table.idx", c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "/dev/shm/regiond/table.idx") {
			t.Errorf("%s: %v, want an error naming the file and %q", c.name, err, c.want)
		}
	}
	_, err = snapindex.Parse("f.idx", cases[2].b)
	if !errors.Is(err, snapindex.ErrVersion) {
		t.Errorf("version 2: %v is not ErrVersion", err)
	}
}

// TestOpenAndStale: Open reads a file; MaxAge and the header's stale flag
// add stale-table once.
func TestOpenAndStale(t *testing.T) {
	now := time.Now()
	scs := fleettest.Scenarios(t, now)
	path := filepath.Join(t.TempDir(), "table.idx")
	b, _ := snapindex.Encode(nil, scs[0].Table, routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Hour)})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	x, err := snapindex.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := x.Resolve("PL", "k", now); slices.Contains(d.Degraded, "stale-table") {
		t.Errorf("no max age: %v", d.Degraded)
	}
	x.MaxAge = time.Minute
	if d, _ := x.Resolve("PL", "k", now); !slices.Equal(d.Degraded, []string{"stale-table"}) {
		t.Errorf("synced an hour ago, max age 1m: degraded %v, want [stale-table]", d.Degraded)
	}
	x.MaxAge = 2 * time.Hour
	if d, _ := x.Resolve("PL", "k", now); slices.Contains(d.Degraded, "stale-table") {
		t.Errorf("max age 2h: %v", d.Degraded)
	}
	b, _ = snapindex.Encode(nil, scs[len(scs)-1].Table, routing.JSONHeader{WrittenAt: now})
	x, err = snapindex.Parse(path, b)
	if err != nil {
		t.Fatal(err)
	}
	x.MaxAge = time.Nanosecond
	if d, _ := x.Resolve("PL", "k", now.Add(time.Hour)); fmt.Sprint(d.Degraded) != "[stale-table]" {
		t.Errorf("stale table: degraded %v, want stale-table once", d.Degraded)
	}
	if _, err := snapindex.Open(filepath.Join(t.TempDir(), "missing.idx")); err == nil || !strings.Contains(err.Error(), "missing.idx") {
		t.Errorf("missing file: %v", err)
	}
}

// FuzzParse: Parse never panics, and what it accepts resolves.
func FuzzParse(f *testing.F) {
	now := time.Now()
	b, _ := snapindex.Encode(nil, fleettest.Scenarios(f, now)[0].Table, routing.JSONHeader{WrittenAt: now})
	f.Add(b)
	f.Add(b[:200])
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := snapindex.Parse("f.idx", b)
		if err != nil {
			return
		}
		for _, h := range []string{"PL", "", "ZZ"} {
			_, _ = x.Resolve(h, "k", now)
		}
	})
}

// TestHeaderBlock: the header block after the slot table carries the
// header JSON's revision, epoch, times and stale flag, exactly; a file
// without it (an older agent's) reads the same.
func TestHeaderBlock(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	for _, sc := range fleettest.Scenarios(t, now) {
		for _, h := range []routing.JSONHeader{{WrittenAt: now}, {WrittenAt: now, SyncedAt: now.Add(-time.Minute - time.Nanosecond)}} {
			b, err := snapindex.Encode(nil, sc.Table, h)
			if err != nil {
				t.Fatal(err)
			}
			x, err := snapindex.Parse("t.idx", b)
			if err != nil {
				t.Fatalf("%s: %v", sc.Name, err)
			}
			blk, ok := snapindex.ReadBlock(b, 8+int(binary.LittleEndian.Uint16(b[6:]))+snapindex.Slots*snapindex.SlotSize)
			if !ok || !x.HasBlock {
				t.Fatalf("%s: no header block", sc.Name)
			}
			want := snapindex.Block{Revision: sc.Table.Revision(), Epoch: sc.Table.Epoch(), WrittenAt: now.UnixNano()}
			if sc.Table.Stale() {
				want.Flags |= snapindex.BlockStale
			}
			if !h.SyncedAt.IsZero() {
				want.Flags |= snapindex.BlockSynced
				want.SyncedAt = h.SyncedAt.UnixNano()
			}
			if blk != want {
				t.Errorf("%s: block %+v, want %+v", sc.Name, blk, want)
			}
			ob, err := snapindex.WithoutBlock(b)
			if err != nil {
				t.Fatal(err)
			}
			old, err := snapindex.Parse("old.idx", ob)
			if err != nil {
				t.Fatalf("%s without the block: %v", sc.Name, err)
			}
			if old.HasBlock || old.Header != x.Header {
				t.Errorf("%s without the block: header %+v (block %v), want %+v", sc.Name, old.Header, old.HasBlock, x.Header)
			}
			for i := range snapindex.Slots {
				if a, b := old.Entry(i), x.Entry(i); !reflect.DeepEqual(a, b) {
					t.Fatalf("%s without the block: slot %d: %+v, want %+v", sc.Name, i, a, b)
				}
			}
		}
	}
}
