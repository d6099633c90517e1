package php_test

// Gap tests from a mutation review of the PHP reader (RegiondTable.php,
// ThrottledLog.php): 70 mutants, each applied alone; every test here fails
// with the mutant its comment names, which the rest of the package let
// through.

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// phpScript runs the PHP code with args (after "--"), from this directory,
// failing the test when php fails; it returns stdout and stderr.
func phpScript(t *testing.T, code string, args ...string) string {
	t.Helper()
	return phpScriptWith(t, nil, code, args...)
}

// phpScriptWith is phpScript with php's -d defines.
func phpScriptWith(t *testing.T, defines []string, code string, args ...string) string {
	t.Helper()
	var a []string
	for _, d := range defines {
		a = append(a, "-d", d)
	}
	a = append(a, "-r", code, "--")
	out, err := exec.Command(php(t), append(a, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("php: %v\n%s", err, out)
	}
	return string(out)
}

// withHeader rewrites the index beside snapshot path with its header JSON
// replaced by f's, every slot's offset moved by the change in length: the
// same entries (and header block, when there is one) behind a header of
// another length, as format 1 allows (readers ignore members they do not
// know; the header is up to 65,535 bytes).
func withHeader(t *testing.T, path string, f func(h []byte) []byte) {
	t.Helper()
	idx := filepath.Join(filepath.Dir(path), "table.idx")
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	h := int(binary.LittleEndian.Uint16(b[6:8]))
	nh := f(bytes.Clone(b[snapindex.PrefixSize : snapindex.PrefixSize+h]))
	if len(nh) > math.MaxUint16 {
		t.Fatalf("header of %d bytes", len(nh))
	}
	d := len(nh) - h
	out := binary.LittleEndian.AppendUint16(bytes.Clone(b[:6]), uint16(len(nh)))
	out = append(out, nh...)
	slots := len(out)
	out = append(out, b[snapindex.PrefixSize+h:]...)
	for i := range snapindex.Slots {
		p := out[slots+i*snapindex.SlotSize:]
		binary.LittleEndian.PutUint32(p, uint32(int(binary.LittleEndian.Uint32(p))+d))
	}
	if err := os.WriteFile(idx, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// padHeader returns header JSON h with an unknown member added, n bytes long.
func padHeader(t *testing.T, h []byte, n int) []byte {
	t.Helper()
	const member = `,"x_future":""}`
	pad := n - len(h) - len(member) + 1
	if pad < 0 || h[len(h)-1] != '}' {
		t.Fatalf("cannot pad header %q to %d bytes", h, n)
	}
	out := append(bytes.Clone(h[:len(h)-1]), `,"x_future":"`...)
	out = append(out, bytes.Repeat([]byte{'a'}, pad)...)
	return append(out, `"}`...)
}

// TestGapIndexWithALongHeader: a header JSON longer than load()'s first
// read (8,448 bytes: the prefix, a header up to ~276 bytes, the slot table
// and the block) is format 1 too, as a later agent may write it (members
// the reader does not know): a header of 1,001 bytes puts the slot table
// across the end of the first read (slot 619 straddles it), one of 10,000
// bytes puts even the header past it. With and without the header block,
// every code AA..ZZ, junk and _unknown decides as Go's Resolve does, and
// Go's reference reader takes the same file. Mutants: R24 (the header's
// rest not read), R43 (a straddling slot taken from the first read), R44
// (a slot past it read 12 bytes off: another country's entry, an EU
// viewer routed by a US entry).
func TestGapIndexWithALongHeader(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	ps := allPairs()
	for _, sc := range fleettest.Scenarios(t, now)[:2] {
		for _, n := range []int{1001, 10000} {
			for _, block := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%d/block=%v", sc.Name, n, block), func(t *testing.T) {
					t.Parallel()
					path := writeSnapshot(t, sc.Table, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, true)
					if !block {
						withoutBlock(t, path)
					}
					withHeader(t, path, func(h []byte) []byte { return padHeader(t, h, n) })
					idx := filepath.Join(filepath.Dir(path), "table.idx")
					b, _ := os.ReadFile(idx)
					if x, err := snapindex.Parse(idx, b); err != nil || x.HasBlock != block {
						t.Fatalf("Go's reader: %v (block %v)", err, x != nil && x.HasBlock)
					}
					meta, got := resolvePHP(t, path, 180, ps)
					if !meta.Index || meta.Revision != sc.Table.Revision() || meta.Stale != sc.Table.Stale() {
						t.Errorf("php meta %+v", meta)
					}
					check(t, sc.Table, now, ps, got, sc.Table.Stale())
				})
			}
		}
	}
}

// TestGapIndexHeaderRefusedClearly: a header JSON (no header block) with
// no revision, or a synced_at that is not RFC 3339, is refused with a
// TableException naming the file (a front door's 503 and log line), not
// a TypeError (an uncaught fatal error). Mutants: R26 (revision not
// checked), R28 (synced_at not checked). An empty synced_at, as an older
// agent's, counts from written_at (docs/snapshot-index.md, Header JSON),
// not refused: mutant R27.
func TestGapIndexHeaderRefusedClearly(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Hour)}
	synced := regexpSynced
	for _, c := range []struct {
		name, want string
		edit       func(h []byte) []byte
	}{
		{"no revision", "has a malformed header", func(h []byte) []byte { return bytes.Replace(h, []byte(`"revision":`), []byte(`"revisiox":`), 1) }},
		// The PHP reader took a header without format (the Go reader
		// refuses it), or with format 2 in a file of binary version 1.
		{"no format", "has a malformed header", func(h []byte) []byte { return bytes.Replace(h, []byte(`"format":1,`), nil, 1) }},
		{"format 2", "has a malformed header", func(h []byte) []byte { return bytes.Replace(h, []byte(`"format":1,`), []byte(`"format":2,`), 1) }},
		{"no slots", "has a malformed header", func(h []byte) []byte { return bytes.Replace(h, []byte(`,"slots":677`), nil, 1) }},
		{"synced_at not a time", "written_at or synced_at is not RFC 3339", func(h []byte) []byte { return synced.ReplaceAll(h, []byte(`"synced_at":"yesterday"`)) }},
		{"synced_at a number", "written_at or synced_at is not RFC 3339", func(h []byte) []byte { return synced.ReplaceAll(h, []byte(`"synced_at":12`)) }},
	} {
		path := withoutBlock(t, writeSnapshot(t, tab, h, true))
		withHeader(t, path, c.edit)
		idx := filepath.Join(filepath.Dir(path), "table.idx")
		if m := metaPHP(t, path, 180); !strings.Contains(m.Error, "regiond: snapshot index "+idx) || !strings.Contains(m.Error, c.want) {
			t.Errorf("%s: %+v, want a TableException naming %s: %s", c.name, m, idx, c.want)
		}
	}
	path := withoutBlock(t, writeSnapshot(t, tab, h, true))
	withHeader(t, path, func(h []byte) []byte { return synced.ReplaceAll(h, []byte(`"synced_at":""`)) })
	if m := metaPHP(t, path, 60); m.Error != "" || m.Stale || m.SyncedAt != m.WrittenAt || math.Abs(m.WrittenAt-float64(now.UnixNano())/1e9) > 1e-6 {
		t.Errorf("an empty synced_at: %+v, want it loaded, counted from written_at (%f), not stale", m, float64(now.UnixNano())/1e9)
	}
}

// TestGapBlockWithoutSyncedAt: a header block without flag bit 1 (a header
// without synced_at) has synced_at 0: the reader counts staleness from
// written_at, as from a header JSON without synced_at, so a fresh table is
// not stale-table. Mutant R19 (the block's synced_at taken whatever the
// flag: 1970, every decision stale-table).
func TestGapBlockWithoutSyncedAt(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	for _, block := range []bool{true, false} {
		path := writeSnapshot(t, tab, routing.JSONHeader{WrittenAt: now}, true)
		if !block {
			withoutBlock(t, path)
		}
		m := metaPHP(t, path, 60)
		if m.Error != "" || m.Stale || m.SyncedAt != m.WrittenAt || math.Abs(m.WrittenAt-float64(now.UnixNano())/1e9) > 1e-6 {
			t.Errorf("block %v: a header without synced_at: %+v, want synced_at = written_at = %f, not stale", block, m, float64(now.UnixNano())/1e9)
		}
	}
}

// TestGapIndexThatCannotBeOpened: an index that exists but cannot be
// opened (here a socket in its place: ENXIO) is an error naming it, not a
// silent read of the whole JSON beside it: the reader falls back to
// table.json only when there is no index (docs/snapshot-index.md).
// Mutant R07.
func TestGapIndexThatCannotBeOpened(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	path := writeSnapshot(t, fleettest.Scenarios(t, now)[0].Table, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, false)
	idx := filepath.Join(filepath.Dir(path), "table.idx")
	if err := syscall.Mknod(idx, syscall.S_IFSOCK|0o644, 0); err != nil {
		t.Fatal(err)
	}
	if m := metaPHP(t, path, 180); !strings.Contains(m.Error, "regiond: cannot open snapshot index "+idx+": ") {
		t.Errorf("a socket in the index's place: %+v, want an error naming the index", m)
	}
}

// TestGapForgedSlots: a slot of kind 2 (the first kind format 1 does not
// have) and a slot of length 0 are refused naming the slot, as kind 7 and
// a length past the file are (TestIndexReaderRefuses): not read as the
// unknown country (mutant R30), not a ValueError from fread (mutant R32).
func TestGapForgedSlots(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	forge := func(f func(slot []byte)) string {
		path := writeSnapshot(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, true)
		idx := filepath.Join(filepath.Dir(path), "table.idx")
		b, err := os.ReadFile(idx)
		if err != nil {
			t.Fatal(err)
		}
		at := snapindex.PrefixSize + int(binary.LittleEndian.Uint16(b[6:8])) + snapindex.SlotOf("PL")*snapindex.SlotSize
		f(b[at : at+snapindex.SlotSize])
		if err := os.WriteFile(idx, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	kind := forge(func(slot []byte) { binary.LittleEndian.PutUint32(slot[8:], 2) })
	if out := string(runPHPAllowFail(t, []byte("504c 6b\n"), "resolve", kind, "180")); !strings.Contains(out, "slot 401 (PL): unknown slot kind 2") {
		t.Errorf("a slot of kind 2: %q, want it refused naming the kind", out)
	}
	empty := forge(func(slot []byte) { binary.LittleEndian.PutUint32(slot[4:], 0) })
	if out := string(runPHPAllowFail(t, []byte("504c 6b\n"), "resolve", empty, "180")); !strings.Contains(out, "slot 401 (PL): cannot read the entry at ") {
		t.Errorf("a slot of length 0: %q, want it refused naming the slot", out)
	}
}

// TestGapEmptyKeyIsNoKey: a key "" is no key (Go's Resolve, the agent's
// /v1/resolve): a weighted random pick, not a sticky pick on "", through
// the index and the JSON, so viewers whose id is empty (example.php: a
// cookie "viewer=") spread over PL's pools (70/30) as viewers without one
// do instead of all going to one. Mutants R40 (index), R52 (JSON).
func TestGapEmptyKeyIsNoKey(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
	for _, withIndex := range []bool{true, false} {
		path := writeSnapshot(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, withIndex)
		out := phpScript(t, `require 'RegiondTable.php';
$t = \Regiond\RegiondTable::load($argv[1], 180.0, posix_geteuid());
$n = [];
for ($i = 0; $i < 400; $i++) { $p = $t->resolve('PL', '')['pool']; $n[$p] = ($n[$p] ?? 0) + 1; }
ksort($n);
echo json_encode($n);`, path)
		var n map[string]int
		if err := json.Unmarshal([]byte(out), &n); err != nil {
			t.Fatalf("php: %s", out)
		}
		if len(n) != 2 || n["eu-central"] < 200 || n["eu-west"] < 60 {
			t.Errorf("index %v: 400 decisions for PL with the key \"\": %v, want both pools, about 280 and 120", withIndex, n)
		}
	}
}

// TestGapWeightedRandomPick: with small weights the weighted random pick
// is exact: _default's targets a (1), b (1) and c (98), c down, leave JP
// (a country of no residency class) a and b at 1 each, and 4,000
// decisions without a key split about evenly, through the index and the
// JSON. Mutants R60 (random_int(0, total): b gets
// 2/3) and R61 ($r <= 0: a gets every one): a small pool (a canary) would
// get double its share, or all of it.
func TestGapWeightedRandomPick(t *testing.T) {
	php(t)
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
	tab := compile(t, cfg, routing.CompileOptions{Now: now, Down: []string{"c"}})
	if e := tab.Effective("JP"); len(e.Candidates) != 2 || e.Candidates[0].Weight != 1 || e.Candidates[1].Weight != 1 {
		t.Fatalf("Go JP entry %+v: want a and b, weight 1 each", e)
	}
	const n = 4000
	for _, withIndex := range []bool{true, false} {
		path := writeSnapshot(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, withIndex)
		out := phpScript(t, `require 'RegiondTable.php';
$t = \Regiond\RegiondTable::load($argv[1], 180.0, posix_geteuid());
$n = ['a' => 0, 'b' => 0];
for ($i = 0; $i < (int) $argv[2]; $i++) { $n[$t->resolve('JP')['pool']]++; }
echo json_encode($n);`, path, strconv.Itoa(n))
		var got map[string]int
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("php: %s", out)
		}
		// 8 standard deviations of a binomial(4000, 0.5): about 250.
		if sd := math.Sqrt(n * 0.25); len(got) != 2 || math.Abs(float64(got["a"])-n/2) > 8*sd {
			t.Errorf("index %v: %d decisions without a key over a (1) and b (1): %v, want about %d each", withIndex, n, got, n/2)
		}
	}
}

// TestGapNormalizeCountryThroughTheIndex: normalizeCountry() says what
// resolve() decides: the same code through the index as through the JSON
// and Go's NormalizeCountry, _unknown for a code that is no country (XX,
// EU, UK, T1) though its slot exists. Mutant R48 (through the index, any
// two letters were a country).
func TestGapNormalizeCountryThroughTheIndex(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
	var hs []string
	for i := range snapindex.UnknownSlot {
		hs = append(hs, snapindex.SlotCode(i))
	}
	hs = append(hs, garbage...)
	var in []string
	for _, h := range hs {
		in = append(in, hex.EncodeToString([]byte(h)))
	}
	for _, withIndex := range []bool{true, false} {
		path := writeSnapshot(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, withIndex)
		out := phpScript(t, `require 'RegiondTable.php';
$t = \Regiond\RegiondTable::load($argv[1], 180.0, posix_geteuid());
if ($t->fromIndex() !== ($argv[2] === '1')) { exit("fromIndex() is not {$argv[2]}\n"); }
$r = [];
foreach (array_slice($argv, 3) as $h) { $r[] = $t->normalizeCountry(hex2bin($h)); }
echo json_encode($r);`, append([]string{path, map[bool]string{true: "1", false: "0"}[withIndex]}, in...)...)
		var got []string
		if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != len(hs) {
			t.Fatalf("php: %v: %s", err, out)
		}
		bad := 0
		for i, h := range hs {
			if want := routing.NormalizeCountry(h); got[i] != want {
				if bad++; bad <= 5 {
					t.Errorf("index %v: normalizeCountry(%q) = %q, want %q", withIndex, h, got[i], want)
				}
			}
		}
	}
}

// TestGapParseTime: the reader's RFC 3339 parser (the agent's UTC form
// with a fraction, on a fast path; any RFC 3339 time otherwise) gives
// Go's instant for every month's first and last days, leap days, years
// around 1970, 2000 and 2100, with and without a fraction and with
// offsets: these are written_at and synced_at (header JSON, table JSON),
// which decide stale-table. Mutants R68 (January and February a year
// off: every file stale, or never), R69 (the day of the year one off in
// some months) and R71 (an offset's sign ignored).
func TestGapParseTime(t *testing.T) {
	php(t)
	t.Parallel()
	var ts []string
	for _, y := range []int{1970, 1999, 2000, 2024, 2026, 2027, 2028, 2100} {
		for m := time.January; m <= time.December; m++ {
			first := time.Date(y, m, 1, 0, 0, 0, 1, time.UTC)
			last := first.AddDate(0, 1, -1).Add(24*time.Hour - 2*time.Nanosecond)
			ts = append(ts, first.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano),
				time.Date(y, m, 15, 12, 30, 45, 123456789, time.UTC).Format(time.RFC3339Nano))
		}
	}
	ts = append(ts, "2028-02-29T23:59:59.5Z", "2026-02-28T10:00:00Z", "2026-03-01T00:00:00.000000001Z",
		"2026-12-02T10:00:00.123+05:30", "2026-12-02T10:00:00-08:00", "2026-01-01T00:30:00.25+01:00", "2026-02-28T22:00:00.1-03:00")
	out := phpScript(t, `require 'RegiondTable.php';
$p = new ReflectionMethod(\Regiond\RegiondTable::class, 'parseTime');
$r = [];
foreach (array_slice($argv, 1) as $s) { $r[] = $p->invoke(null, $s); }
echo json_encode($r);`, ts...)
	var got []*float64
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != len(ts) {
		t.Fatalf("php: %v: %s", err, out)
	}
	bad := 0
	for i, s := range ts {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		want := float64(tm.UnixNano()) / 1e9
		if y := tm.UTC().Year(); y > 2100 || y < 1970 { // UnixNano holds 1678..2262
			t.Fatalf("%s out of range", s)
		}
		if got[i] == nil || math.Abs(*got[i]-want) > 2e-6 {
			if bad++; bad <= 10 {
				g := "null"
				if got[i] != nil {
					g = strconv.FormatFloat(*got[i], 'f', 6, 64)
				}
				t.Errorf("parseTime(%s) = %s, want %f", s, g, want)
			}
		}
	}
}

// TestGapCacheAfterAnInPlaceRewrite: the JSON reader's parse cache (kept
// across load()s for a long-running worker's life) is keyed on the file's
// times too: a file read when its mtime was already old (not racy), then
// rewritten with another table of the same size at the same inode (an
// inode number reused by a later rename, as ext4 does at once; here in
// place) and a new mtime, is read again. Mutant R63 (the signature without
// mtime and ctime: the old table served for the worker's life).
func TestGapCacheAfterAnInPlaceRewrite(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	kvs := fleetKVs(t)
	dir := t.TempDir()
	var files []string
	for _, rev := range []int64{11, 12} {
		b, err := routing.Compile(rev, kvs, nil, routing.CompileOptions{Now: now}).JSONWith(nil, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, fmt.Sprintf("rev%d.json", rev))
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if a, b := fileSize(t, files[0]), fileSize(t, files[1]); a != b {
		t.Fatalf("tables of %d and %d bytes, want the same size", a, b)
	}
	work := filepath.Join(t.TempDir(), "table.json")
	out := phpScript(t, `require 'RegiondTable.php';
[, $path, $a, $b] = $argv;
$rev = fn () => \Regiond\RegiondTable::load($path, 180.0, posix_geteuid())->revision();
file_put_contents($path, file_get_contents($a));
touch($path, time() - 100);
$r = [$rev(), $rev()];
$fh = fopen($path, 'r+b');
fwrite($fh, file_get_contents($b));
fclose($fh);
touch($path, time() - 50);
$r[] = $rev();
echo json_encode($r);`, work, files[0], files[1])
	if strings.TrimSpace(out) != "[11,11,12]" {
		t.Errorf("revisions loaded: %s, want [11,11,12] (the rewritten table read again)", out)
	}
}

// regexpSynced is the header JSON's synced_at member.
var regexpSynced = regexp.MustCompile(`"synced_at":"[^"]*"`)

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestGapTableWithoutUnknownRefused: a table JSON whose effective has no
// _unknown entry is refused at load() naming it, not read until a viewer
// of an unknown country meets an undefined key. Mutant R67.
func TestGapTableWithoutUnknownRefused(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	path := writeTable(t, compile(t, fleet(t), routing.CompileOptions{Now: now}), now)
	b, _ := os.ReadFile(path)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m["effective"].(map[string]any), routing.Unknown)
	b, _ = json.Marshal(m)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := metaPHP(t, path, 180); !strings.Contains(got.Error, "effective has no _unknown entry") {
		t.Errorf("a table without _unknown: %+v, want it refused", got)
	}
}

// TestGapDirectoryWritableByGroup: a snapshot directory writable by its
// group (0775: the package's group regiond holds www-data, so every PHP
// site on the host) is refused before any open, as one writable by others
// is: a group member could put a forged table or a FIFO there. Through the
// index and the JSON. Mutant R14 (only others' write bit checked).
func TestGapDirectoryWritableByGroup(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
	for _, withIndex := range []bool{true, false} {
		path := writeSnapshot(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, withIndex)
		dir := filepath.Dir(path)
		if err := os.Chmod(dir, 0o775); err != nil {
			t.Fatal(err)
		}
		want := "regiond: snapshot directory " + dir + " is writable by group or others (mode 0775): refusing"
		if m := metaPHP(t, path, 180); !strings.HasPrefix(m.Error, want) {
			t.Errorf("index %v: a directory 0775: %+v, want %q", withIndex, m, want)
		}
	}
}

// TestGapDefaultOwnerForNull: load()'s owner null is the default owner
// (the package's user, regiond), as documented, never "any owner": a
// front door passing null (an unset setting) reads no table of another
// user. Mutant R02 (null read as the empty owner, any owner's).
func TestGapDefaultOwnerForNull(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	path := writeTable(t, compile(t, fleet(t), routing.CompileOptions{Now: now}), now)
	out := phpScript(t, `require 'RegiondTable.php';
try { \Regiond\RegiondTable::load($argv[1], 180.0, null); echo "loaded\n"; }
catch (\Regiond\TableException $e) { echo $e->getMessage(), "\n"; }`, path)
	if want := defaultOwnerRefusal(t, filepath.Dir(path), os.Geteuid()); !strings.Contains(out, want) {
		t.Errorf("load() with owner null on a table of uid %d: %q, want %q", os.Geteuid(), out, want)
	}
}

// throttledLog runs PHP code after requiring ThrottledLog.php, with its
// state under tmp (sys_temp_dir) and error_log() to stderr, APCu on or
// off; it returns the output.
func throttledLog(t *testing.T, tmp string, apcu bool, code string, args ...string) string {
	t.Helper()
	defines := []string{"sys_temp_dir=" + tmp, "log_errors=1", "error_log=", "display_errors=stderr"}
	if apcu {
		defines = append(defines, "apc.enable_cli=1", "apc.use_request_time=0")
	} else {
		defines = append(defines, "apc.enable_cli=0")
	}
	return phpScriptWith(t, defines, "require 'ThrottledLog.php';\n"+code, args...)
}

// cliHasAPCu says whether the CLI loads APCu.
func cliHasAPCu(t *testing.T) bool {
	out, err := exec.Command(php(t), "-m").Output()
	return err == nil && bytes.Contains(out, []byte("\napcu\n"))
}

// TestGapThrottledLogMessagesApart: each message has its own window, with
// APCu and with the state file: a front door that logs one message (the
// JSON fallback's, on every request) still logs another (the table
// cannot be read, stale-table) at once. Mutant L04 (one key for every
// message: the first silenced the others for the period).
func TestGapThrottledLogMessagesApart(t *testing.T) {
	php(t)
	t.Parallel()
	for _, apcu := range []bool{false, true} {
		if apcu && !cliHasAPCu(t) {
			t.Log("php-cli has no APCu (php-apcu): the APCu variant is not run")
			continue
		}
		out := throttledLog(t, t.TempDir(), apcu, `\Regiond\ThrottledLog::error('regiond: first message');
\Regiond\ThrottledLog::error('regiond: second message');
\Regiond\ThrottledLog::error('regiond: first message');`)
		if strings.Count(out, "regiond: first message") != 1 || strings.Count(out, "regiond: second message") != 1 {
			t.Errorf("apcu %v: two messages, the first twice: %q, want one line of each", apcu, out)
		}
	}
}

// TestGapThrottledLogPeriodZero: a period of 0 or less (REGIOND_LOG_EVERY
// "0", or a value that is no number) is 1 s: with APCu the second failure
// 2 s after the first is logged. Mutant L01 (the period kept at 0: APCu's
// TTL 0 never expires, and the message was never logged again).
func TestGapThrottledLogPeriodZero(t *testing.T) {
	php(t)
	t.Parallel()
	if !cliHasAPCu(t) {
		t.Skip("php-cli has no APCu (php-apcu)")
	}
	out := throttledLog(t, t.TempDir(), true, `\Regiond\ThrottledLog::error('regiond: zero period', 0);
usleep(2200000);
\Regiond\ThrottledLog::error('regiond: zero period', 0);`)
	if n := strings.Count(out, "regiond: zero period"); n != 2 {
		t.Errorf("two failures 2.2 s apart with a period of 0: %d lines, want 2:\n%s", n, out)
	}
}

// TestGapThrottledLogClockStepBack: a state file whose window starts in
// the future (the clock stepped back, e.g. an NTP correction) does not
// silence the message until then: it is logged at once. Mutant L06.
func TestGapThrottledLogClockStepBack(t *testing.T) {
	php(t)
	t.Parallel()
	out := throttledLog(t, t.TempDir(), false, `$dir = sys_get_temp_dir() . '/regiond-front-log-' . posix_geteuid();
mkdir($dir, 0700);
$key = 'regiond-front-log:' . hash('xxh64', 'regiond: after a step back');
file_put_contents($dir . '/regiond-front-log.' . getmypid(), json_encode([$key => [time() + 3600, 0]]));
\Regiond\ThrottledLog::error('regiond: after a step back');`)
	if strings.Count(out, "regiond: after a step back") != 1 {
		t.Errorf("a window an hour ahead: %q, want the message logged", out)
	}
}

// TestGapThrottledLogKeepsCountsOfOthers: a message whose window is over
// with repeats left out keeps its count while another message is logged,
// so its next line says how many were left out. Mutant L08 (forgotten:
// its next line said none were).
func TestGapThrottledLogKeepsCountsOfOthers(t *testing.T) {
	php(t)
	t.Parallel()
	// Started 50 ms into a second: a and its repeats fall in one second.
	out := throttledLog(t, t.TempDir(), false, `usleep(1050000 - (int) (fmod(microtime(true), 1.0) * 1e6));
$a = 'regiond: message a';
\Regiond\ThrottledLog::error($a, 1);
for ($i = 0; $i < 3; $i++) { \Regiond\ThrottledLog::error($a, 1); }
usleep(1100000);
\Regiond\ThrottledLog::error('regiond: message b', 1);
\Regiond\ThrottledLog::error($a, 1);`)
	if !strings.Contains(out, "regiond: message a (3 more of this message not logged since the last line") {
		t.Errorf("a, 3 repeats, then b after its window, then a: %q, want a's second line to count the 3", out)
	}
}

// TestGapThrottledLogWithoutState: with no state to count in (the state
// directory writable by its group or others: not used), failures are
// sampled, one in 100: of 2,000, some are logged (none: a silent front
// door) and not all (a flood). Mutants L09, L10, and L12 (a
// group-writable state directory used: its group could plant a count that
// silences the log; the planted file is left as it was).
func TestGapThrottledLogWithoutState(t *testing.T) {
	php(t)
	t.Parallel()
	for _, mode := range []string{"0770", "0777"} {
		out := throttledLog(t, t.TempDir(), false, `$dir = sys_get_temp_dir() . '/regiond-front-log-' . posix_geteuid();
mkdir($dir, 0700);
$f = $dir . '/regiond-front-log.' . getmypid();
file_put_contents($f, '{"planted":[1,0]}');
chmod($dir, octdec($argv[1]));
for ($i = 0; $i < 2000; $i++) { \Regiond\ThrottledLog::error('regiond: sampled'); }
echo 'state: ', file_get_contents($f), "\n";`, mode)
		n := strings.Count(out, "regiond: sampled")
		if n < 1 || n > 100 {
			t.Errorf("state directory %s: 2,000 failures logged %d lines, want about 20 (one in 100)", mode, n)
		}
		if !strings.Contains(out, `state: {"planted":[1,0]}`) {
			t.Errorf("state directory %s: the planted state file was used: %q", mode, out[strings.LastIndex(out, "state: "):])
		}
	}
}
