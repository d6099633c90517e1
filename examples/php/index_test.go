package php_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// writeSnapshot writes tab's table JSON and, when withIndex, its index
// beside it (as the agent does) into a new directory; it returns the JSON's
// path.
func writeSnapshot(t *testing.T, tab *routing.Table, h routing.JSONHeader, withIndex bool) string {
	t.Helper()
	dir := t.TempDir()
	js, err := tab.JSONWith(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "table.json")
	if err := os.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	if withIndex {
		idx, err := snapindex.Encode(nil, tab, h)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "table.idx"), idx, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// withoutBlock rewrites the index beside snapshot path as agents wrote it
// before the header block (snapindex.WithoutBlock), so that readers take
// the header JSON; it returns path.
func withoutBlock(t *testing.T, path string) string {
	t.Helper()
	idx := filepath.Join(filepath.Dir(path), "table.idx")
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = snapindex.WithoutBlock(b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// allPairs returns every two-letter code AA..ZZ (as is, lower case,
// space-padded) with sticky keys and without, the garbage headers, and the
// unknown country with 1,000 keys.
func allPairs() []pair {
	r := rand.New(rand.NewPCG(20261202, 3))
	var ps []pair
	for i := range snapindex.UnknownSlot {
		cc := snapindex.SlotCode(i)
		ps = append(ps, pair{cc, randomKey(r)}, pair{cc, randomKey(r)}, pair{strings.ToLower(cc), randomKey(r)},
			pair{" " + cc + "\t", randomKey(r)}, pair{cc, ""})
	}
	for _, g := range garbage {
		for range 10 {
			ps = append(ps, pair{g, randomKey(r)})
		}
		ps = append(ps, pair{g, ""})
	}
	for range 1000 {
		ps = append(ps, pair{"XX", randomKey(r)})
	}
	return ps
}

// TestIndexReaderMatchesGo: on every scenario (drained, down, unhealthy,
// boosted pools, NoRoute, stale), the PHP reader decides as Go's Resolve
// does, through the index and through the full JSON (no index beside it):
// every header AA..ZZ, junk and _unknown without a key and × 1,000 keys
// (the sweep, one php process per scenario and path, each decision
// through resolve()), and the pairs of allPairs (every code lower-case and
// space-padded too, the unknown country × 1,000 more keys).
func TestIndexReaderMatchesGo(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	ps := allPairs()
	shared, sharedNow, _, _ := sweepScenarios(t)
	for i, sc := range fleettest.Scenarios(t, now) {
		for _, variant := range []string{"index", "index-without-block", "json"} {
			withIndex := variant != "json"
			t.Run(sc.Name+"/"+variant, func(t *testing.T) {
				t.Parallel()
				// Written now, not at the test's start: under load the
				// subtests ran past the 180 s max age, and every decision
				// read stale-table.
				at := time.Now()
				path := writeSnapshot(t, sc.Table, routing.JSONHeader{WrittenAt: at, SyncedAt: at.Add(-time.Second)}, withIndex)
				if variant == "index-without-block" {
					withoutBlock(t, path)
				}
				meta, got := resolvePHP(t, path, 180, ps)
				if meta.Index != withIndex || meta.Revision != 4242 || meta.Epoch != 17 || meta.Stale != sc.Table.Stale() {
					t.Errorf("php meta %+v, want index=%v revision 4242 epoch 17 stale=%v", meta, withIndex, sc.Table.Stale())
				}
				sticky, random, noRoute := check(t, sc.Table, now, ps, got, sc.Table.Stale())
				t.Logf("%d sticky pairs equal, %d random picks valid, %d NoRoute", sticky, random, noRoute)
				if sticky+noRoute < 3000 {
					t.Errorf("only %d sticky and %d NoRoute pairs compared exactly", sticky, noRoute)
				}
				if (sc.Name == "down" || sc.Name == "drained") && noRoute < 1000 {
					t.Errorf("%s: %d NoRoute pairs, want ≥ 1,000 (the unknown country)", sc.Name, noRoute)
				}
				if variant == "index-without-block" {
					return // the sweep below reads the same entries
				}
				ssc := shared[i]
				s := sweepPHP(t, ssc, withIndex)
				n := compareGo(t, s.Reader, fleettest.Expect{Table: ssc.Table, Now: sharedNow, WithStale: ssc.Table.Stale()}, s)
				t.Logf("sweep: %s equal", n)
			})
		}
	}
}

// TestIndexReaderRefuses: an index of an unknown version, or one that is
// not an index, is an error naming the file (never a silent fall back to
// the JSON); a missing index falls back to the JSON.
func TestIndexReaderRefuses(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	h := routing.JSONHeader{WrittenAt: now}
	edit := func(f func(b []byte)) string {
		path := withoutBlock(t, writeSnapshot(t, tab, h, true))
		idx := filepath.Join(filepath.Dir(path), "table.idx")
		b, err := os.ReadFile(idx)
		if err != nil {
			t.Fatal(err)
		}
		f(b)
		if err := os.WriteFile(idx, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	v2 := edit(func(b []byte) { binary.LittleEndian.PutUint16(b[4:], 2) })
	if m := metaPHP(t, v2, 180); !strings.Contains(m.Error, "table.idx has format version 2; this reader knows version 1") {
		t.Errorf("version 2: %+v, want a refusal naming the file and both versions", m)
	}
	magic := edit(func(b []byte) { copy(b, "JSON") })
	if m := metaPHP(t, magic, 180); !strings.Contains(m.Error, "table.idx is not a regiond snapshot index") {
		t.Errorf("bad magic: %+v", m)
	}
	header := edit(func(b []byte) { b[8] = 'x' })
	if m := metaPHP(t, header, 180); !strings.Contains(m.Error, "malformed header") {
		t.Errorf("broken header: %+v", m)
	}
	// A malformed written_at beside a good synced_at, in a file without the
	// header block: refused at load, as the Go reader refuses it.
	synced := withoutBlock(t, writeSnapshot(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, true))
	sidx := filepath.Join(filepath.Dir(synced), "table.idx")
	sb, err := os.ReadFile(sidx)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(sb, []byte(`"written_at":"`))
	if at < 0 {
		t.Fatalf("no written_at in the header: %q", sb[:200])
	}
	sb[at+len(`"written_at":"`)] = 'x'
	if err := os.WriteFile(sidx, sb, 0o644); err != nil {
		t.Fatal(err)
	}
	if m := metaPHP(t, synced, 180); !strings.Contains(m.Error, "table.idx: written_at or synced_at is not RFC 3339") {
		t.Errorf("malformed written_at: %+v, want a refusal naming the file", m)
	}
	// An entry cut short: the slot points past the end.
	short := writeSnapshot(t, tab, h, true)
	idx := filepath.Join(filepath.Dir(short), "table.idx")
	b, _ := os.ReadFile(idx)
	if err := os.WriteFile(idx, b[:len(b)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	in.WriteString("5a5a 6b\n") // ZZ: the unknown entry, the last one
	out := string(runPHPAllowFail(t, []byte(in.String()), "resolve", short, "180"))
	if !strings.Contains(out, "cannot read the entry") {
		t.Errorf("entry cut short: %q, want an error naming the entry", out)
	}
	// A candidate without an integer weight, in the entries of every
	// country that has one: refused by the pick, naming the slot. (Same
	// length, so every offset still holds.)
	noWeight := writeSnapshot(t, tab, h, true)
	widx := filepath.Join(filepath.Dir(noWeight), "table.idx")
	wb, _ := os.ReadFile(widx)
	if err := os.WriteFile(widx, bytes.ReplaceAll(wb, []byte(`"weight":`), []byte(`"weigh_":`)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"504c 6b\n", "504c \n"} { // PL, sticky and random
		if out := string(runPHPAllowFail(t, []byte(in), "resolve", noWeight, "180")); !strings.Contains(out, "malformed candidate") {
			t.Errorf("a candidate without a weight (%q): %q, want an error naming the candidate", in, out)
		}
	}
	// Candidates as an object, not a list ({"-1": candidate}): refused as a
	// malformed entry, never picked by key. Made from an entry with one
	// candidate, rewritten in place to the same length (valid JSON).
	object := writeSnapshot(t, tab, h, true)
	oidx := filepath.Join(filepath.Dir(object), "table.idx")
	ob, _ := os.ReadFile(oidx)
	x, err := snapindex.Parse(oidx, ob)
	if err != nil {
		t.Fatal(err)
	}
	one := -1
	for i := range snapindex.UnknownSlot {
		if e := x.Entry(i); x.Slot(i).Kind == snapindex.KindCountry && len(e.Candidates) == 1 {
			one = i
			break
		}
	}
	if one < 0 {
		t.Fatal("no country with exactly one candidate in the scenario")
	}
	sl := x.Slot(one)
	entry := ob[sl.Offset : sl.Offset+sl.Length]
	head := regexp.MustCompile(`"affinity":"[a-z]*","candidates":\[`).FindIndex(entry)
	tail := bytes.LastIndex(entry, []byte(`}],"degraded"`))
	if head == nil || tail < 0 {
		t.Fatalf("entry %s: %s", snapindex.SlotCode(one), entry)
	}
	repl := []byte(`"candidates":{"-1":`)
	repl = append(repl, bytes.Repeat([]byte{' '}, head[1]-head[0]-len(repl))...)
	copy(entry[head[0]:head[1]], repl)
	entry[tail+1] = '}'
	if err := os.WriteFile(oidx, ob, 0o644); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(entry) {
		t.Fatalf("the rewritten entry is not JSON: %s", entry)
	}
	code := hex.EncodeToString([]byte(snapindex.SlotCode(one)))
	for _, in := range []string{code + " 6b\n", code + " \n"} {
		if out := string(runPHPAllowFail(t, []byte(in), "resolve", object, "180")); !strings.Contains(out, "malformed entry") {
			t.Errorf("candidates as an object (%q): %q, want an error naming the entry", in, out)
		}
	}
	// A slot of an unknown kind, and one whose length is forged past the
	// file (PHP's fread would allocate it whole: a fatal error, not a
	// TableException): each refused naming the slot.
	forge := func(f func(slot []byte)) string {
		path := writeSnapshot(t, tab, h, true)
		idx := filepath.Join(filepath.Dir(path), "table.idx")
		b, err := os.ReadFile(idx)
		if err != nil {
			t.Fatal(err)
		}
		x, err := snapindex.Parse(idx, b)
		if err != nil {
			t.Fatal(err)
		}
		pl := x.Slot(snapindex.SlotOf("PL"))
		var want [12]byte
		binary.LittleEndian.PutUint32(want[0:], uint32(pl.Offset))
		binary.LittleEndian.PutUint32(want[4:], uint32(pl.Length))
		binary.LittleEndian.PutUint32(want[8:], uint32(pl.Kind))
		at := bytes.Index(b, want[:])
		if at < 0 {
			t.Fatal("PL's slot not found in the index")
		}
		f(b[at : at+12])
		if err := os.WriteFile(idx, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	kind := forge(func(slot []byte) { binary.LittleEndian.PutUint32(slot[8:], 7) })
	if out := string(runPHPAllowFail(t, []byte("504c 6b\n"), "resolve", kind, "180")); !strings.Contains(out, "unknown slot kind 7") ||
		!strings.Contains(out, "slot 401 (PL): ") { // the country beside the slot (the PHP review)
		t.Errorf("a slot of kind 7: %q, want a refusal naming the kind and the country", out)
	}
	long := forge(func(slot []byte) { binary.LittleEndian.PutUint32(slot[4:], 0xFFFFFF00) })
	if out := string(runPHPAllowFail(t, []byte("504c 6b\n"), "resolve", long, "180")); !strings.Contains(out, "is past the end of the file") {
		t.Errorf("a slot's length forged to 4 GiB: %q, want a refusal, not a fatal error", out)
	}

	missing := writeSnapshot(t, tab, h, false)
	if m := metaPHP(t, missing, 180); m.Error != "" {
		t.Errorf("no index: %+v, want the JSON read", m)
	}
}

// runPHPAllowFail runs the driver and returns its stdout and stderr,
// whether it failed or not.
func runPHPAllowFail(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(php(t), append([]string{filepath.Join("testdata", "driver.php")}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, _ := cmd.CombinedOutput()
	return out
}

// TestIndexReaderStale: through the index, a synced_at older than the max
// age makes every decision stale-table (once), and a younger one does not.
func TestIndexReaderStale(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	ps := allPairs()[:2000]
	for _, block := range []bool{true, false} {
		path := writeSnapshot(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Hour)}, true)
		if !block {
			withoutBlock(t, path)
		}
		meta, got := resolvePHP(t, path, 60, ps)
		if !meta.Index || !meta.Stale {
			t.Errorf("block %v: synced an hour ago, max age 60 s: meta %+v, want stale, from the index", block, meta)
		}
		check(t, tab, now, ps, got, true)
		meta, got = resolvePHP(t, path, 7200, ps)
		if meta.Stale {
			t.Errorf("block %v: synced an hour ago, max age 2 h: meta %+v, want fresh", block, meta)
		}
		check(t, tab, now, ps, got, false)
		// The header's times, to the microsecond, from the block and from
		// the header JSON alike.
		m := metaPHP(t, path, 60)
		if math.Abs(m.WrittenAt-float64(now.UnixNano())/1e9) > 1e-6 || math.Abs(m.SyncedAt-float64(now.Add(-time.Hour).UnixNano())/1e9) > 1e-6 {
			t.Errorf("block %v: written_at %f, synced_at %f; want %f, %f", block, m.WrittenAt, m.SyncedAt,
				float64(now.UnixNano())/1e9, float64(now.Add(-time.Hour).UnixNano())/1e9)
		}
	}
}

// TestReaderRevisionsPast32Bits: etcd's revision counts the cluster's
// writes, so a busy etcd passes 2^31. On a 32-bit PHP json_decode gives a
// float for such a revision, and the reader refused every table ("malformed
// header", "revision is not an integer") from that write on: every front
// door answered 503. Its rule (wholeNumber) takes a whole float past
// PHP_INT_MAX up to 2^53, judged here as a 32-bit PHP would decode each
// literal; where ints are 64-bit no float passes. And a table at revision
// 3,000,000,000 loads through the index, the header JSON and the JSON.
func TestReaderRevisionsPast32Bits(t *testing.T) {
	php(t)
	t.Parallel()
	var got []string
	lits := []string{"5", "2147483647", "2147483648", "3000000000", "9007199254740992", "2147483648.5", "1.0", `"5"`, "null"}
	if err := json.Unmarshal(runPHP(t, nil, append([]string{"wholenumbers", "2147483647"}, lits...)...), &got); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"5 int -> int 5",
		"2147483647 int -> int 2147483647",
		"2147483648 float -> float 2147483648",
		"3000000000 float -> float 3000000000",
		"9007199254740992 float -> float 9007199254740992",
		"2147483648.5 float -> null",
		"1.0 float -> null",
		`"5" string -> null`,
		"null null -> null",
	}
	if !slices.Equal(got, want) {
		t.Errorf("as a 32-bit PHP:\n got %q\nwant %q", got, want)
	}
	if err := json.Unmarshal(runPHP(t, nil, "wholenumbers", "9223372036854775807", "3000000000", "3000000000.0"), &got); err != nil {
		t.Fatal(err)
	}
	if want := []string{"3000000000 int -> int 3000000000", "3000000000.0 float -> null"}; !slices.Equal(got, want) {
		t.Errorf("as this PHP (64-bit ints):\n got %q\nwant %q", got, want)
	}

	const rev = 3_000_000_000
	now := time.Now()
	tab := routing.Compile(rev, fleetKVs(t), nil, routing.CompileOptions{Now: now})
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: now}
	for _, variant := range []string{"index", "index-without-block", "json"} {
		path := writeSnapshot(t, tab, h, variant != "json")
		if variant == "index-without-block" {
			withoutBlock(t, path)
		}
		var m struct {
			Revision int64
			Error    string
		}
		if err := json.Unmarshal(runPHP(t, nil, "meta", path, "180"), &m); err != nil || m.Revision != rev || m.Error != "" {
			t.Errorf("%s: meta %+v %v, want revision %d", variant, m, err, int64(rev))
		}
	}
}
