package js_test

// Gap tests from a mutation review of the JS reader (regiond.mjs,
// xxh64.mjs, node.mjs, worker/worker.mjs): 84 mutants, each applied
// alone; 38 killed by the package's tests, 46 survived, 31 of them real
// gaps. Every test here fails with the mutants its comment names, which
// the rest of the package let through.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// nodeScript runs the ES module script (from this directory) with args
// and returns its output, failing the test when node fails.
func nodeScript(t *testing.T, script string, args ...string) string {
	t.Helper()
	out, err := exec.Command(node(t), append([]string{"--input-type=module", "-e", script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	return string(out)
}

// encodeIndex is tab's index as the agent writes it, with or without the
// header block.
func encodeIndex(t *testing.T, tab *routing.Table, h routing.JSONHeader, block bool) []byte {
	t.Helper()
	b, err := snapindex.Encode(nil, tab, h)
	if err != nil {
		t.Fatal(err)
	}
	if !block {
		if b, err = snapindex.WithoutBlock(b); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// reheader returns index b with its header JSON replaced by f's and every
// slot's offset moved by the change in length: the same entries behind
// another header, as format 1 allows (readers ignore members they do not
// know; a header is up to 65,535 bytes).
func reheader(t *testing.T, b []byte, f func(h []byte) []byte) []byte {
	t.Helper()
	h := int(binary.LittleEndian.Uint16(b[6:8]))
	nh := f(bytes.Clone(b[snapindex.PrefixSize : snapindex.PrefixSize+h]))
	if len(nh) > math.MaxUint16 {
		t.Fatalf("header of %d bytes", len(nh))
	}
	out := binary.LittleEndian.AppendUint16(bytes.Clone(b[:6]), uint16(len(nh)))
	out = append(out, nh...)
	slots := len(out)
	out = append(out, b[snapindex.PrefixSize+h:]...)
	for i := range snapindex.Slots {
		p := out[slots+i*snapindex.SlotSize:]
		binary.LittleEndian.PutUint32(p, uint32(int(binary.LittleEndian.Uint32(p))+len(nh)-h))
	}
	return out
}

// padTo returns header JSON h with an unknown member added, n bytes long.
func padTo(t *testing.T, h []byte, n int) []byte {
	t.Helper()
	const member = `,"x_future":""`
	pad := n - len(h) - len(member)
	if pad < 0 || h[len(h)-1] != '}' {
		t.Fatalf("cannot pad header %q to %d bytes", h, n)
	}
	out := append(bytes.Clone(h[:len(h)-1]), `,"x_future":"`...)
	out = append(out, bytes.Repeat([]byte{'a'}, pad)...)
	return append(out, `"}`...)
}

// slotAt is the offset of slot i in index b.
func slotAt(b []byte, i int) int {
	return snapindex.PrefixSize + int(binary.LittleEndian.Uint16(b[6:8])) + i*snapindex.SlotSize
}

// TestGapIndexWithALongHeader: a header JSON longer than 255 bytes (its
// length's high byte set), one that puts a slot across the end of the
// reader's first read (294 bytes: AR's slot, 17, spans bytes 506..518 of
// the 512 read first), and ones that end past the first read (1,001 and
// 10,000 bytes) are format 1 as a later agent may write them (members the
// reader does not know): every header AA..ZZ, junk and _unknown decides as
// Go's Resolve through the three index paths, with and without the header
// block, and Go's reference reader takes the same files. Mutants R40 (the
// header's rest not read), R41 (a slot straddling the first read taken
// short), R49 (u16 reads its high byte at the wrong place).
func TestGapIndexWithALongHeader(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	hs, ks := fleettest.Headers(), fleettest.Keys(fleettest.JSFullKeys)
	for _, n := range []int{294, 1001, 10000} {
		for _, block := range []bool{true, false} {
			t.Run(fmt.Sprintf("%d/block=%v", n, block), func(t *testing.T) {
				t.Parallel()
				b := reheader(t, encodeIndex(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, block), func(h []byte) []byte { return padTo(t, h, n) })
				if x, err := snapindex.Parse("table.idx", b); err != nil || x.HasBlock != block {
					t.Fatalf("Go's reader: %v", err)
				}
				if n == 294 {
					if at := slotAt(b, snapindex.SlotOf("AR")); at >= 512 || at+snapindex.SlotSize <= 512 {
						t.Fatalf("premise: AR's slot at %d..%d does not straddle byte 512", at, at+snapindex.SlotSize)
					}
				}
				idx := writeTemp(t, "table.idx", b)
				var sweeps []*fleettest.Sweep
				for _, mode := range []string{"idx", "idx-async", "idx-cached"} {
					sweeps = append(sweeps, fleettest.SweepJS(t, mode, idx, freshAge, hs, ks))
				}
				compareGo(t, fleettest.Expect{Table: tab, Now: now}, sweeps...)
			})
		}
	}
}

// TestGapHeadersBesideTheLetters: a country header of the characters just
// outside A..Z and a..z ('@', '[', '`', '{': each a letter's code ± 1, or
// with the case bit flipped) is no code: _unknown, as Go's
// NormalizeCountry, through the KV export and the three index paths.
// Mutants R04 ('[' and '{' taken as letters: "A[" read BA's slot, "[A"
// the slot after ZZ) and R05 ('@' and '`': "@A" read a slot before AA's,
// inside the header).
func TestGapHeadersBesideTheLetters(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	var hs []string
	for _, c := range []string{"@", "[", "`", "{"} {
		hs = append(hs, c+"A", "A"+c, c+"Z", "Z"+c, c+"p", "p"+c, " "+c+"l ")
	}
	hs = append(hs, "@@", "[[", "``", "{{", "PL") // PL: a code among them still decides as PL
	ks := fleettest.Keys(fleettest.JSFullKeys)
	kv, idx := kvFile(t, tab, now, now), indexFile(t, tab, now, now)
	var sweeps []*fleettest.Sweep
	for _, mode := range []string{"kv", "idx", "idx-async", "idx-cached"} {
		file := idx
		if mode == "kv" {
			file = kv
		}
		sweeps = append(sweeps, fleettest.SweepJS(t, mode, file, freshAge, hs, ks))
	}
	compareGo(t, fleettest.Expect{Table: tab, Now: now}, sweeps...)
	out := nodeScript(t, `
import { countrySlot } from './regiond.mjs';
console.log(JSON.stringify(JSON.parse(process.argv[1]).map(countrySlot)));
`, mustJSON(t, hs))
	var slots []int
	if err := json.Unmarshal([]byte(out), &slots); err != nil {
		t.Fatalf("node: %s", out)
	}
	for i, h := range hs {
		if want := snapindex.SlotOf(h); slots[i] != want {
			t.Errorf("countrySlot(%q) = %d, Go's SlotOf %d", h, slots[i], want)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGapForgedIndexRefused: index files that Go's reference reader (and
// the PHP reader) refuse are refused by the three Node paths too, with a
// TableError naming the file: format version 2 in the prefix, no RGIX
// magic, a header JSON of format 2, of 678 slots, without a revision,
// with a stale that is no boolean or a synced_at that is no RFC 3339 time
// (no header block: the JSON is the only header), a slot of kind 2, and a
// slot pointing at an entry-shaped object inside the header JSON (US's
// entry, forged under PL's slot). Each was decided (PL's pool, or US's)
// with one check dropped. Mutants R38 (magic), R39 (version), R09
// (format member), R42 (slots member), R10 (revision), R11 (stale), R12
// (synced_at), R44 (kind 2 read as _unknown), R45 (an offset inside the
// header accepted).
func TestGapForgedIndexRefused(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: now}
	good := encodeIndex(t, tab, h, false)
	pl := snapindex.SlotOf("PL")
	edit := func(what string, old, new string) func(b []byte) []byte {
		return func(b []byte) []byte {
			return reheader(t, b, func(h []byte) []byte {
				if !bytes.Contains(h, []byte(old)) {
					t.Fatalf("%s: no %s in header %s", what, old, h)
				}
				return bytes.Replace(h, []byte(old), []byte(new), 1)
			})
		}
	}
	cases := []struct {
		name, want string
		forge      func(b []byte) []byte
	}{
		{"version 2", "index format version 2, this reader knows version 1", func(b []byte) []byte { b[4] = 2; return b }},
		{"no magic", "no RGIX magic", func(b []byte) []byte { b[3] = 'Y'; return b }},
		{"format 2", "format 2, this reader knows format 1", edit("format 2", `"format":1`, `"format":2`)},
		{"678 slots", "header says 678 slots", edit("678 slots", `"slots":677`, `"slots":678`)},
		// The JS reader took a header without format or slots (the Go and
		// PHP readers refuse it).
		{"no format", "header has no format member", edit("no format", `"format":1,`, ``)},
		{"no slots", "header has no slots member", edit("no slots", `,"slots":677`, ``)},
		{"no revision", "revision is not an integer", edit("no revision", `"revision":`, `"revisiox":`)},
		{"stale a string", "stale is not a boolean", edit("stale a string", `"stale":false`, `"stale":"false"`)},
		{"synced_at no time", `synced_at "yesterday" is not an RFC 3339 time`, func(b []byte) []byte {
			return reheader(t, b, func(h []byte) []byte {
				var m map[string]any
				if err := json.Unmarshal(h, &m); err != nil {
					t.Fatal(err)
				}
				m["synced_at"] = "yesterday"
				return []byte(mustJSON(t, m))
			})
		}},
		{"kind 2", "slot 401 has unknown kind 2", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[slotAt(b, pl)+8:], 2)
			return b
		}},
		{"entry inside the header", "slot 401 points at ", func(b []byte) []byte {
			us := slotAt(b, snapindex.SlotOf("US"))
			o, n := binary.LittleEndian.Uint32(b[us:]), binary.LittleEndian.Uint32(b[us+4:])
			entry := bytes.Clone(b[o : o+n])
			b = reheader(t, b, func(h []byte) []byte {
				return append(append(append(h[:len(h)-1], `,"x_entry":`...), entry...), '}')
			})
			hlen := int(binary.LittleEndian.Uint16(b[6:8]))
			at := snapindex.PrefixSize + hlen - 1 - len(entry)
			if !bytes.Equal(b[at:at+len(entry)], entry) {
				t.Fatal("premise: the entry is not where it was put")
			}
			binary.LittleEndian.PutUint32(b[slotAt(b, pl):], uint32(at))
			binary.LittleEndian.PutUint32(b[slotAt(b, pl)+4:], uint32(len(entry)))
			return b
		}},
	}
	var files []string
	for _, c := range cases {
		b := c.forge(bytes.Clone(good))
		if _, err := snapindex.Parse("table.idx", b); err == nil {
			t.Fatalf("%s: premise: Go's reader takes the file", c.name)
		}
		files = append(files, writeTemp(t, "table.idx", b))
	}
	out := nodeScript(t, `
import { decideFromIndexFile, decideFromIndexFileAsync, IndexReader } from './node.mjs';
const owner = process.getuid();
const show = (d) => 'decided ' + d.country + ' ' + d.pool;
const lines = [];
for (const f of JSON.parse(process.argv[1])) {
  const o = [];
  try { o.push(show(decideFromIndexFile(f, 'PL', 'viewer-7', { owner }))); } catch (e) { o.push(e.name + ': ' + e.message); }
  try { o.push(show(await decideFromIndexFileAsync(f, 'PL', 'viewer-7', { owner }))); } catch (e) { o.push(e.name + ': ' + e.message); }
  try { o.push(show(new IndexReader(f, { owner }).decide('PL', 'viewer-7'))); } catch (e) { o.push(e.name + ': ' + e.message); }
  lines.push(o);
}
console.log(JSON.stringify(lines));
`, mustJSON(t, files))
	var got [][]string
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != len(cases) {
		t.Fatalf("node: %s", out)
	}
	for i, c := range cases {
		for j, o := range got[i] {
			if !strings.HasPrefix(o, "TableError: regiond: "+files[i]+": ") || !strings.Contains(o, c.want) {
				t.Errorf("%s, path %d: %s, want a TableError naming the file: %s", c.name, j, o, c.want)
			}
		}
	}
}

// TestGapStaleAtTheMaxAge: stale-table is added when synced_at is more
// than the max age old, as Go's reference reader (Index.Stale: now minus
// synced_at > MaxAge): a table exactly the max age old is fresh, a
// millisecond older stale; one a minute old fresh under a max age of 180
// s; a header with neither synced_at nor written_at (a KV value) stale.
// Mutants R13 (>=), R14 (the max age read in tenths of seconds), R15 (no
// time at all read as fresh).
func TestGapStaleAtTheMaxAge(t *testing.T) {
	node(t)
	t.Parallel()
	synced := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	tab := fleettest.Scenarios(t, synced)[0].Table
	b := encodeIndex(t, tab, routing.JSONHeader{WrittenAt: synced, SyncedAt: synced}, true)
	idx := writeTemp(t, "table.idx", b)
	x, err := snapindex.Parse(idx, b)
	if err != nil {
		t.Fatal(err)
	}
	type probe struct {
		MaxAge int   `json:"max_age"`
		Now    int64 `json:"now"`
	}
	var ps []probe
	var want []bool
	for _, p := range []struct {
		maxAge int
		age    time.Duration
	}{{180, 180 * time.Second}, {180, 180*time.Second + time.Millisecond}, {180, time.Minute}, {180, 20 * time.Second}, {3600, time.Hour}, {3600, time.Hour + time.Millisecond}} {
		ps = append(ps, probe{p.maxAge, synced.Add(p.age).UnixMilli()})
		x.MaxAge = time.Duration(p.maxAge) * time.Second
		want = append(want, x.Stale(synced.Add(p.age)))
	}
	out := nodeScript(t, `
import { decideFromIndexFile, isStale } from './node.mjs';
const [f, probes] = [process.argv[1], JSON.parse(process.argv[2])];
const o = probes.map(({ max_age, now }) =>
  decideFromIndexFile(f, 'PL', 'viewer-7', { owner: process.getuid(), maxAgeSeconds: max_age, now }).degraded.includes('stale-table'));
o.push(isStale({ revision: 1, epoch: 1 }, { maxAgeSeconds: 1e9 }));
console.log(JSON.stringify(o));
`, idx, mustJSON(t, ps))
	var got []bool
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != len(ps)+1 {
		t.Fatalf("node: %s", out)
	}
	for i, p := range ps {
		if got[i] != want[i] {
			t.Errorf("max age %d s, synced_at %v old: stale-table %v, Go's reader %v", p.MaxAge, time.UnixMilli(p.Now).Sub(synced), got[i], want[i])
		}
	}
	if !got[len(ps)] {
		t.Errorf("a header with neither synced_at nor written_at: not stale")
	}
}

// TestGapRandomPickWithSmallWeights: the weighted random pick is exact
// for small weights: JP's entry of a (1) and b (1) (c, 98, down) splits
// 4,000 decisions without a key about evenly. Mutants R23 (Math.round:
// b gets 3/4) and R24 (r <= 0: a gets every one): with PL's 80/20 they
// were within TestRandomPicksFollowTheWeights' two points.
func TestGapRandomPickWithSmallWeights(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	cfg, err := routing.ParseConfig([]byte(`pools:
  a: {host: a.example.net:443, residency: global, status: active}
  b: {host: b.example.net:443, residency: global, status: active}
  c: {host: c.example.net:443, residency: global, status: active}
routes:
  _default:
    targets: [{pool: a, weight: 1}, {pool: b, weight: 1}, {pool: c, weight: 98}]
`))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := routing.CompileConfig(cfg, nil, routing.CompileOptions{Now: now, Down: []string{"c"}})
	if err != nil {
		t.Fatal(err)
	}
	if e := tab.Effective("JP"); len(e.Candidates) != 2 || e.Candidates[0].Weight != 1 || e.Candidates[1].Weight != 1 {
		t.Fatalf("Go JP entry %+v: want a and b, weight 1 each", e)
	}
	const n = 4000
	out := nodeScript(t, `
import { readFileSync } from 'node:fs';
import { decideFromIndexFile } from './node.mjs';
import { kvEntry, decideEntry } from './regiond.mjs';
import { memoryKV } from './testdata/common.mjs';
const [idx, kvf, n] = [process.argv[1], process.argv[2], Number(process.argv[3])];
const kv = memoryKV(JSON.parse(readFileSync(kvf, 'utf8')));
const { header, country, entry } = await kvEntry(kv, 'JP');
const count = (f) => { const c = { a: 0, b: 0 }; for (let i = 0; i < n; i++) c[f().pool]++; return c; };
console.log(JSON.stringify([
  count(() => decideFromIndexFile(idx, 'JP', '', { owner: process.getuid() })),
  count(() => decideEntry(header, country, entry, null)),
]));
`, indexFile(t, tab, now, now), kvFile(t, tab, now, now), strconv.Itoa(n))
	var got []map[string]int
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 2 {
		t.Fatalf("node: %s", out)
	}
	for i, g := range got {
		// 8 standard deviations of a binomial(4000, 0.5): about 250.
		if sd := math.Sqrt(n * 0.25); len(g) != 2 || math.Abs(float64(g["a"])-n/2) > 8*sd {
			t.Errorf("path %d: %d decisions without a key over a (1) and b (1): %v, want about %d each", i, n, g, n/2)
		}
	}
}

// TestGapStringKeysHashAsUTF8: a sticky key given as a string (a Node
// front door's viewer id) hashes as its UTF-8 bytes, as the same key
// given as bytes and as Go's score: long keys of two- and three-byte
// characters (more bytes than the reader's 256-byte scratch holds at
// first) and U+0080 (the first character of two bytes). The package's
// sweeps give keys as bytes. Mutants R33 (the scratch grown by one byte
// per character: the key cut at 256 bytes) and R34 (U+0080 written as
// the byte 0x80).
func TestGapStringKeysHashAsUTF8(t *testing.T) {
	node(t)
	t.Parallel()
	keys := []string{strings.Repeat("ü", 200), strings.Repeat("視", 120), "\u0080viewer", "v\u0080", strings.Repeat("a", 250) + strings.Repeat("é", 30),
		strings.Repeat("ключ-", 60)}
	pools := []string{"eu-central", "pool-with-a-long-name-for-the-32-byte-stripes"}
	out := nodeScript(t, `
import { stickyScore } from './regiond.mjs';
const o = [];
for (const k of JSON.parse(process.argv[1])) for (const p of JSON.parse(process.argv[2])) {
  o.push([stickyScore(k, p, 50), stickyScore(new TextEncoder().encode(k), p, 50)]);
}
console.log(JSON.stringify(o));
`, mustJSON(t, keys), mustJSON(t, pools))
	var got [][2]float64
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != len(keys)*len(pools) {
		t.Fatalf("node: %s", out)
	}
	for i, k := range keys {
		for j, p := range pools {
			g, want := got[i*len(pools)+j], routing.StickyScore(k, p, 50)
			if g[0] != g[1] || ulps(g[0], want) > 2 {
				t.Errorf("key %q (%d bytes), pool %s: score %v as a string, %v as bytes, Go's %v", k, len(k), p, g[0], g[1], want)
			}
		}
	}
}

// TestGapStaleDecisionLeavesTheEntry: a decision marked stale-table (here
// under a max age of one second) leaves the entry it was made from as it
// was: IndexReader keeps entries across calls, and its next decision,
// under a max age the table is within, carries no stale-table. Mutant R31
// (stale-table pushed into the entry's degraded).
func TestGapStaleDecisionLeavesTheEntry(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	idx := indexFile(t, fleettest.Scenarios(t, now)[0].Table, now.Add(-time.Minute), now.Add(-time.Minute))
	out := nodeScript(t, `
import { IndexReader } from './node.mjs';
const r = new IndexReader(process.argv[1], { owner: process.getuid() });
const o = [];
for (const maxAgeSeconds of [1, 1e9, 1, 1e9]) o.push(JSON.stringify(r.decide('PL', 'viewer-7', { maxAgeSeconds }).degraded));
console.log(o.join(' '));
`, idx)
	if want := `["stale-table"] [] ["stale-table"] []` + "\n"; out != want {
		t.Fatalf("degraded under max ages 1 s, 1e9 s, 1 s, 1e9 s: %s, want %s", out, want)
	}
}

// TestGapGroupWritableIndexRefused: an index writable by its group (mode
// 0664, 0620) is refused by the three Node paths, as one writable by
// others is: a member of the group could forge it. Mutant N01 (only the
// others' write bit checked).
func TestGapGroupWritableIndexRefused(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	uid := strconv.Itoa(os.Getuid())
	for _, mode := range []os.FileMode{0o664, 0o620} {
		idx := indexFile(t, fleettest.Scenarios(t, now)[0].Table, now, now)
		if err := os.Chmod(idx, mode); err != nil {
			t.Fatal(err)
		}
		for i, o := range runOwner(t, idx, &uid) {
			if o.OK || !strings.Contains(o.Message, idx) || !strings.Contains(o.Message, fmt.Sprintf("is writable by group or others (mode %04o)", mode)) {
				t.Errorf("mode %04o, path %d: %+v, want refused as writable by group or others", mode, i, o)
			}
		}
	}
}

// TestGapOwnerAsDigits: an owner given as a string of digits (an
// environment variable, REGIOND_OWNER=998) is that uid, not a user name
// looked up in /etc/passwd (and not found there). Mutant N02.
func TestGapOwnerAsDigits(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	idx := indexFile(t, fleettest.Scenarios(t, now)[0].Table, now, now)
	out := nodeScript(t, `
import { decideFromIndexFile, decideFromIndexFileAsync, IndexReader } from './node.mjs';
const [f, owner] = process.argv.slice(1);
const o = [];
for (const d of [() => decideFromIndexFile(f, 'PL', 'v', { owner }), () => decideFromIndexFileAsync(f, 'PL', 'v', { owner }),
                 () => new IndexReader(f, { owner }).decide('PL', 'v')]) {
  try { o.push((await d()).country); } catch (e) { o.push(e.name + ': ' + e.message); }
}
console.log(o.join('\n'));
`, idx, strconv.Itoa(os.Getuid()))
	if out != "PL\nPL\nPL\n" {
		t.Fatalf("owner %q (this process's uid as a string):\n%s\nwant PL decided by the three paths", strconv.Itoa(os.Getuid()), out)
	}
}

// TestGapIndexReaderTellsFilesApart: IndexReader answers from the file the
// path names now, told apart by its inode (the file it keeps open cannot
// give its number away) and by its size and times. Another table of the
// same size renamed in within one tick of the file system's clock (so its
// modification and change times are the held file's: ext4 here, Linux
// without fine-grained timestamps; tmpfs gives them, and there the
// subtest skips) decides from the new file; and the file rewritten in
// place (same inode; here one byte longer) drops the entries read.
// Mutants N04 (the signature without the inode) and N05 (the inode
// alone).
func TestGapIndexReaderTellsFilesApart(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	a := encodeIndex(t, fleettest.Scenarios(t, now)[0].Table, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, true)
	b := bytes.ReplaceAll(a, []byte(".example.net"), []byte(".example.org")) // every host, same length
	if _, err := snapindex.Parse("b", b); err != nil || bytes.Equal(a, b) {
		t.Fatalf("premise: the second table: %v", err)
	}
	aFile, bFile := writeTemp(t, "a.idx", a), writeTemp(t, "b.idx", b)
	script := `
import { readFileSync, writeFileSync, renameSync, statSync } from 'node:fs';
import { IndexReader, decideFromIndexFile } from './node.mjs';
const [dir, mode] = process.argv.slice(1, 3);
const [A, B] = process.argv.slice(3).map((f) => readFileSync(f));
const path = dir + '/table.idx', owner = process.getuid();
const reader = new IndexReader(path, { owner });
const host = (f) => f('PL', 'viewer-7', { owner }).host;
const answer = (o) => { console.log(JSON.stringify(o)); process.exit(0); };
if (mode === 'in-place') {
  writeFileSync(path, A);
  const before = host((...a) => reader.decide(...a));
  writeFileSync(path, Buffer.concat([B, Buffer.from('\n')])); // same inode, one byte longer
  answer({ before, after: host((...a) => reader.decide(...a)), want: host((...a) => decideFromIndexFile(path, ...a)) });
}
for (let i = 0; i < 1000; i++) {
  writeFileSync(dir + '/.a', A);
  writeFileSync(dir + '/.b', B);
  renameSync(dir + '/.a', path);
  const before = host((...a) => reader.decide(...a));
  const sa = statSync(path);
  renameSync(dir + '/.b', path); // as the agent publishes
  const sb = statSync(path);
  if (sa.ino !== sb.ino && sa.size === sb.size && sa.mtimeMs === sb.mtimeMs && sa.ctimeMs === sb.ctimeMs) {
    answer({ tries: i + 1, before, after: host((...a) => reader.decide(...a)), want: host((...a) => decideFromIndexFile(path, ...a)) });
  }
}
answer({ tries: 0 });
`
	for _, mode := range []string{"same-times", "in-place"} {
		t.Run(mode, func(t *testing.T) {
			var r struct {
				Tries               int
				Before, After, Want string
			}
			out := nodeScript(t, script, t.TempDir(), mode, aFile, bFile)
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("node: %s", out)
			}
			if mode == "same-times" && r.Tries == 0 {
				t.Skip("no two files of the same times in 1,000 renames: the file system gives fine-grained timestamps")
			}
			if !strings.HasSuffix(r.Before, ".example.net:443") || !strings.HasSuffix(r.Want, ".example.org:443") || r.After != r.Want {
				t.Errorf("%s: the reader decided %s, then %s on the file replaced (%d tries), want %s (decideFromIndexFile's)", mode, r.Before, r.After, r.Tries, r.Want)
			}
		})
	}
}

// TestGapWorkerCookieAndUpstream: the worker takes the cookie named
// viewer, not one whose name ends in viewer (PHP's $_COOKIE['viewer']),
// takes a raw byte 0xFF of a Latin-1 header as that byte (as PHP does,
// and as bytes 0x80..0xFE are), and tells the origin the pool, the
// revision and a stale table (X-Regiond-Degraded: stale-table, as the
// PHP front door's response does). Mutants W03 (the name not anchored:
// "xviewer=" read as the viewer's cookie), W05 (ÿ, 0xFF, taken as no
// Latin-1: hashed as C3 BF) and W06 (no X-Regiond-Degraded).
func TestGapWorkerCookieAndUpstream(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	const viewer = "v-1"
	want, err := tab.Resolve("PL", viewer, now)
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for i := 0; other == ""; i++ {
		if d, err := tab.Resolve("PL", strconv.Itoa(i), now); err == nil && d.Pool != want.Pool {
			other = strconv.Itoa(i)
		}
	}
	kv := exportWithout(t, tab, now, nil, nil)
	cookies := []string{"viewer=" + viewer, "xviewer=" + other + "; viewer=" + viewer, "a=1; my_viewer=" + other + ";viewer=" + viewer}
	var reqs []workerRequest
	for _, c := range cookies {
		reqs = append(reqs, workerRequest{Headers: [][2]string{{"CF-IPCountry", "PL"}, {"Cookie", c}}})
	}
	got, _ := runWorker(t, kv, reqs)
	for i, c := range cookies {
		if got[i].Status != 200 || got[i].Pool != want.Pool {
			t.Errorf("Cookie %q: %+v, want viewer %s's pool %s (not key %s's)", c, got[i], viewer, want.Pool, other)
		}
	}

	raw := []string{"ff", "61ff62", "80", "e9", "fe"}
	var keys [][2]string
	if err := json.Unmarshal(runNode(t, raw, "cookie"), &keys); err != nil {
		t.Fatal(err)
	}
	for i, h := range raw {
		if keys[i][0] != h {
			t.Errorf("cookie bytes %s given as Latin-1: key %s, want the same bytes (PHP's)", h, keys[i][0])
		}
	}

	// Synced an hour ago, REGIOND_MAX_AGE 60: every decision stale-table.
	stale := kvFile(t, tab, now, now.Add(-time.Hour))
	out := nodeScript(t, `
import { readFileSync } from 'node:fs';
import w from './worker/worker.mjs';
import { memoryKV } from './testdata/common.mjs';
const kv = memoryKV(JSON.parse(readFileSync(process.argv[1], 'utf8')));
globalThis.fetch = async (req) => Response.json({ host: new URL(req.url).host, h: Object.fromEntries([...req.headers].filter(([k]) => k.startsWith('x-regiond'))) });
const r = await w.fetch(new Request('https://front.example/watch/1', { headers: { 'CF-IPCountry': 'PL', Cookie: 'viewer=v-1' } }), { REGIOND: kv, REGIOND_MAX_AGE: '60' });
console.log(r.status + ' ' + await r.text());
`, stale)
	wantOut := fmt.Sprintf(`200 {"host":%q,"h":{"x-regiond-degraded":"stale-table","x-regiond-pool":%q,"x-regiond-revision":"%d"}}`+"\n",
		strings.TrimSuffix(want.Host, ":443"), want.Pool, tab.Revision())
	if out != wantOut {
		t.Errorf("upstream request of a stale table's decision:\n%s\nwant:\n%s", out, wantOut)
	}
}

// TestGapValueAndEntryRefused: a KV value without a format member (not
// an export's value) and an index entry that is no UTF-8 (a lone byte
// 0x80 in an attr; PHP's json_decode refuses it too) are TableErrors, not
// decisions. Mutants R52 (format not required of a KV value) and R51
// (text(): the byte 0x80 taken for ASCII, decoded as U+0080).
func TestGapValueAndEntryRefused(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	pl := kvValue(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, "PL")
	b := encodeIndex(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, true)
	at := slotAt(b, snapindex.SlotOf("PL"))
	o, n := binary.LittleEndian.Uint32(b[at:]), binary.LittleEndian.Uint32(b[at+4:])
	i := bytes.Index(b[o:o+n], []byte(`"lang":"`))
	if i < 0 {
		t.Fatalf("premise: PL's entry %s has no lang attr", b[o:o+n])
	}
	b[int(o)+i+len(`"lang":"`)] = 0x80 // PL's lang's first letter
	idx := writeTemp(t, "table.idx", b)
	out := nodeScript(t, `
import { decideFromValue } from './regiond.mjs';
import { decideFromIndexFile } from './node.mjs';
const v = JSON.parse(process.argv[1]);
delete v.format;
const o = [];
for (const f of [() => decideFromValue(v, 'viewer-7'), () => decideFromIndexFile(process.argv[2], 'PL', 'viewer-7', { owner: process.getuid() })]) {
  try { const d = f(); o.push('decided ' + d.pool + ' ' + JSON.stringify(d.attrs.lang)); } catch (e) { o.push(e.name + ': ' + e.message); }
}
console.log(o.join('\n'));
`, string(pl), idx)
	if want := "TableError: regiond: KV value: no format member: not a regiond KV value\nTableError: regiond: " + idx + " slot 401: entry is not UTF-8\n"; out != want {
		t.Errorf("a KV value without format, an entry with a byte 0x80:\n%s\nwant:\n%s", out, want)
	}
}

// TestGapStaleHeaderMarksDecisions: a header that says stale adds
// stale-table to every decision, as Go's reference reader does
// (docs/snapshot-index.md, reading step 5), also when the entries do not
// carry it (the agent's do: here the header JSON alone is flipped, in a
// file without the header block). Mutant R19 (the stale member ignored:
// it passed because a stale table's entries carry stale-table already).
func TestGapStaleHeaderMarksDecisions(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	b := reheader(t, encodeIndex(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, false), func(h []byte) []byte {
		return bytes.Replace(h, []byte(`"stale":false`), []byte(`"stale":true`), 1)
	})
	x, err := snapindex.Parse("table.idx", b)
	if err != nil || !x.Header.Stale {
		t.Fatalf("premise: Go's reader: %v", err)
	}
	want, err := x.Resolve("PL", "viewer-7", now)
	if err != nil || !slices.Contains(want.Degraded, "stale-table") || slices.Contains(tab.Effective("PL").Degraded, "stale-table") {
		t.Fatalf("premise: Go's reader decides %+v (%v), want stale-table added to an entry without it", want, err)
	}
	out := nodeScript(t, `
import { decideFromIndexFile } from './node.mjs';
const d = decideFromIndexFile(process.argv[1], 'PL', 'viewer-7', { owner: process.getuid(), maxAgeSeconds: 1e9 });
console.log(d.pool + ' ' + JSON.stringify(d.degraded));
`, writeTemp(t, "table.idx", b))
	if w := want.Pool + " " + mustJSON(t, want.Degraded) + "\n"; out != w {
		t.Errorf("a header saying stale: %s, want Go's %s", out, w)
	}
}

// TestGapXXH64CarryAtTheBoundary: the 64-bit addition in 32-bit halves
// carries only past 2^32 − 1: seeds whose low half sums with a prime's to
// exactly 0xffffffff in the first addition (seed + P5 below 32 bytes;
// seed + P1, seed + P2 and seed − P1 from 32 on) hash as Go's
// cespare/xxhash does. Random inputs reach that sum once in 2^32
// additions. Mutant X03 (a carry at lo >= 0xffffffff).
func TestGapXXH64CarryAtTheBoundary(t *testing.T) {
	node(t)
	t.Parallel()
	const p1, p2, p5 = 0x9e3779b185ebca87, 0xc2b2ae3d27d4eb4f, 0x27d4eb2f165667c5
	var seeds []uint64
	for _, lo := range []uint64{0xffffffff - p5&0xffffffff, 0xffffffff - p1&0xffffffff, 0xffffffff - p2&0xffffffff, p1 & 0xffffffff} {
		seeds = append(seeds, 0x12345678<<32|lo, 0xffffffff<<32|lo)
	}
	type vec struct {
		Hex  string `json:"hex"`
		Seed string `json:"seed"`
	}
	var vs []vec
	var want []string
	for n := 0; n <= 40; n++ {
		b := bytes.Repeat([]byte{byte(n)}, n)
		for _, s := range seeds {
			vs = append(vs, vec{fmt.Sprintf("%x", b), strconv.FormatUint(s, 10)})
			d := xxhash.NewWithSeed(s)
			d.Write(b)
			want = append(want, fmt.Sprintf("%016x", d.Sum64()))
		}
	}
	var got []string
	if err := json.Unmarshal(runNode(t, vs, "xxh"), &got); err != nil || len(got) != len(want) {
		t.Fatalf("node: %v (%d hashes)", err, len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("xxh64(%s, seed %s): JS %s, Go %s", vs[i].Hex, vs[i].Seed, got[i], want[i])
		}
	}
}
