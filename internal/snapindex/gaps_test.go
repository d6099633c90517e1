package snapindex_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// compile returns the table of kvs at now (revision 1).
func compile(kvs map[string]string, now time.Time) *routing.Table {
	var list []routing.KV
	for k, v := range kvs {
		list = append(list, routing.KV{Key: k, Value: []byte(v), ModRevision: 1, CreateRevision: 1, Version: 1})
	}
	return routing.Compile(1, list, nil, routing.CompileOptions{Now: now})
}

// sameEntries fails unless every slot of got reads the entry the same slot
// of want reads.
func sameEntries(t *testing.T, what string, got, want []byte) {
	t.Helper()
	g, err := snapindex.Parse("got.idx", got)
	if err != nil {
		t.Fatalf("%s: the reused encoder's file does not parse: %v", what, err)
	}
	w, err := snapindex.Parse("want.idx", want)
	if err != nil {
		t.Fatal(err)
	}
	for i := range snapindex.Slots {
		if a, b := g.Entry(i), w.Entry(i); !reflect.DeepEqual(a, b) || g.Slot(i).Kind != w.Slot(i).Kind {
			t.Fatalf("%s: slot %d (%s) reads %+v, want %+v", what, i, snapindex.SlotCode(i), a, b)
		}
	}
}

// TestEncoderReuseSharesOnlyEarlierBytes: an entry that becomes
// byte-identical to a later entry (AD loses its own route and falls to
// _default, as AE did all along) shares bytes placed in this file: a
// reused encoder that pointed AD at AE's offset from the previous file
// would send AD's viewers to whatever bytes lie there now. Every slot of
// the reused encoder's file reads what a fresh encoder's reads.
func TestEncoderReuseSharesOnlyEarlierBytes(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cs := routing.Countries()
	base := map[string]string{
		"pools/a":         `{"host":"a.example.net","residency":"global"}`,
		"pools/b":         `{"host":"b.example.net","residency":"global"}`,
		"routes/_default": `{"targets":[{"pool":"a","weight":100}]}`,
	}
	own := maps.Clone(base)
	own["routes/"+cs[0]] = `{"targets":[{"pool":"b","weight":100}],"attrs":{"own":"a route of its own, longer than the rest"}}`
	h := routing.JSONHeader{WrittenAt: now}
	var enc snapindex.Encoder
	var buf []byte
	for i, kvs := range []map[string]string{own, base, own, base} {
		tab := compile(kvs, now)
		if len(tab.Effective(cs[0]).Candidates) == 0 {
			t.Fatalf("setup: %s has no candidate", cs[0])
		}
		var err error
		if buf, err = enc.Encode(buf, tab, h); err != nil {
			t.Fatal(err)
		}
		fresh, err := snapindex.Encode(nil, tab, h)
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, "table "+string(rune('1'+i)), buf, fresh)
	}
}

// TestEntryStringsEscaped: attrs holding backslashes, quotes, control
// characters (every byte below 0x20) and non-ASCII text are written as
// valid JSON strings that read back as the table's values: an attr copied
// raw would make the entry undecodable (every reader fails for those
// countries) or decode to another value.
func TestEntryStringsEscaped(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var ctl strings.Builder // each control byte alone in plain ASCII: "c1f":"a\u001fb"
	for c := range 0x20 {
		fmt.Fprintf(&ctl, `,"c%02x":"a\u%04xb"`, c, c)
	}
	tab := compile(map[string]string{
		"pools/a": `{"host":"a.example.net","residency":"eu","attrs":{"path":"C:\\new\\x\\u","quote":"say \"hi\""` + ctl.String() +
			`,"text":"zażółć <b>&amp;</b>"}}`,
		"routes/_default": `{"targets":[{"pool":"a","weight":100}]}`,
	}, now)
	want, err := tab.Resolve("PL", "k", now)
	if err != nil || want.Attrs["path"] != `C:\new\x\u` || want.Attrs["c1f"] != "a\x1fb" {
		t.Fatalf("setup: the table decides %+v %v", want, err)
	}
	b, err := snapindex.Encode(nil, tab, routing.JSONHeader{WrittenAt: now})
	if err != nil {
		t.Fatal(err)
	}
	x, err := snapindex.Parse("table.idx", b)
	if err != nil {
		t.Fatalf("the index of attrs needing escapes does not parse: %v", err)
	}
	got, err := x.Resolve("PL", "k", now)
	if err != nil || !maps.Equal(got.Attrs, want.Attrs) {
		t.Fatalf("attrs read back %q (%v), want %q", got.Attrs, err, want.Attrs)
	}
}

// TestStaleRules: a decision is stale when the header says so, or when
// synced_at (written_at in a file without it: an older agent's) is older
// than the max age, strictly (docs/snapshot-index.md, step 5).
func TestStaleRules(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	scs := fleettest.Scenarios(t, now)
	parse := func(tab *routing.Table, h routing.JSONHeader) *snapindex.Index {
		t.Helper()
		b, err := snapindex.Encode(nil, tab, h)
		if err != nil {
			t.Fatal(err)
		}
		x, err := snapindex.Parse("table.idx", b)
		if err != nil {
			t.Fatal(err)
		}
		x.MaxAge = time.Minute
		return x
	}
	x := parse(scs[0].Table, routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Hour)})
	if x.Stale(now.Add(-time.Hour).Add(time.Minute)) || !x.Stale(now.Add(-time.Hour).Add(time.Minute+time.Nanosecond)) {
		t.Errorf("synced_at exactly max age ago is not stale, a nanosecond later it is")
	}
	x = parse(scs[0].Table, routing.JSONHeader{WrittenAt: now}) // no synced_at: an older agent's file
	if x.Stale(now.Add(59*time.Second)) || !x.Stale(now.Add(61*time.Second)) {
		t.Errorf("without synced_at, staleness counts from written_at: stale at +59s %v, at +61s %v",
			x.Stale(now.Add(59*time.Second)), x.Stale(now.Add(61*time.Second)))
	}
	for _, sc := range scs {
		if sc.Name != "stale" {
			continue
		}
		x = parse(sc.Table, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
		x.MaxAge = 0
		if !x.Stale(now) {
			t.Errorf("a header saying stale, synced just now: not stale")
		}
		return
	}
	t.Fatal("no stale scenario")
}

// TestRandomPick: with affinity random the key does not pin the pool
// (routing.Table.Resolve picks at random whatever the key), and the
// weighted random pick follows the weights.
func TestRandomPick(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pools := map[string]string{
		"pools/a": `{"host":"a.example.net","residency":"eu"}`,
		"pools/b": `{"host":"b.example.net","residency":"eu"}`,
	}
	index := func(route string) *snapindex.Index {
		t.Helper()
		kvs := maps.Clone(pools)
		kvs["routes/_default"] = route
		tab := compile(kvs, now)
		if n := len(tab.Effective("PL").Candidates); n != 2 {
			t.Fatalf("setup: %d candidates, want 2", n)
		}
		b, err := snapindex.Encode(nil, tab, routing.JSONHeader{WrittenAt: now})
		if err != nil {
			t.Fatal(err)
		}
		x, err := snapindex.Parse("table.idx", b)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	x := index(`{"targets":[{"pool":"a","weight":50},{"pool":"b","weight":50}],"affinity":"random"}`)
	seen := map[string]int{}
	for range 200 {
		d, _ := x.Resolve("PL", "viewer-1", now)
		seen[d.Pool]++
	}
	if len(seen) != 2 {
		t.Errorf("affinity random, one key, 200 decisions: pools %v, want both", seen)
	}
	// Weights 1 and 99: a picks about 200 of 20,000 (σ 14); an
	// off-by-one in the draw gives it about 400.
	x = index(`{"targets":[{"pool":"a","weight":1},{"pool":"b","weight":99}],"affinity":"random"}`)
	n := 0
	for range 20000 {
		if d, _ := x.Resolve("PL", "", now); d.Pool == "a" {
			n++
		}
	}
	if n < 100 || n > 300 {
		t.Errorf("weight 1 of 100 picked %d times of 20,000, want about 200", n)
	}
}

// withHeader returns index file b with its header JSON replaced by hj,
// every slot's offset moved by the difference.
func withHeader(t *testing.T, b []byte, hj string) []byte {
	t.Helper()
	h := int(binary.LittleEndian.Uint16(b[6:]))
	d := len(hj) - h
	out := append(append(bytes.Clone(b[:6]), 0, 0), hj...)
	binary.LittleEndian.PutUint16(out[6:], uint16(len(hj)))
	out = append(out, b[8+h:]...)
	for i := range snapindex.Slots {
		p := out[8+len(hj)+12*i:]
		binary.LittleEndian.PutUint32(p, uint32(int(binary.LittleEndian.Uint32(p))+d))
	}
	return out
}

// TestParseRefusesMore: the reference reader refuses what the format does
// not allow, beyond TestParseRefuses' cases, and reads an older agent's
// empty synced_at as none.
func TestParseRefusesMore(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	good, err := snapindex.Encode(nil, fleettest.Scenarios(t, now)[0].Table, routing.JSONHeader{WrittenAt: now})
	if err != nil {
		t.Fatal(err)
	}
	noBlock, err := snapindex.WithoutBlock(good)
	if err != nil {
		t.Fatal(err)
	}
	h := int(binary.LittleEndian.Uint16(good[6:]))
	slot := func(b []byte, i int) []byte { return b[8+h+12*i : 8+h+12*i+12] }
	pl, xx := int('P'-'A')*26+int('L'-'A'), int('X'-'A')*26+int('X'-'A')
	edit := func(b []byte, f func(b []byte) []byte) []byte { return f(bytes.Clone(b)) }
	first := 0 // the slot whose entry comes first: more entries follow it
	for i := range snapindex.Slots {
		if binary.LittleEndian.Uint32(slot(good, i)) < binary.LittleEndian.Uint32(slot(good, first)) {
			first = i
		}
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"kind 1 slot not _unknown's entry", edit(good, func(b []byte) []byte { copy(slot(b, xx)[:8], slot(b, pl)[:8]); return b }), "is not _unknown's entry"},
		{"slots member", edit(good, func(b []byte) []byte { return bytes.Replace(b, []byte(`"slots":677`), []byte(`"slots":678`), 1) }), "slots member"},
		{"revision missing", edit(noBlock, func(b []byte) []byte { return bytes.Replace(b, []byte(`"revision":`), []byte(`"revisiox":`), 1) }), "revision or epoch missing"},
		{"data after the entry", edit(good, func(b []byte) []byte {
			binary.LittleEndian.PutUint32(slot(b, first)[4:], uint32(len(b))-binary.LittleEndian.Uint32(slot(b, first)))
			return b
		}), "data after the JSON object"},
		{"degraded missing", edit(good, func(b []byte) []byte { return bytes.Replace(b, []byte(`"degraded":[`), []byte(`"degradex":[`), 1) }), "candidates or degraded missing"},
		{"candidate without pool", edit(good, func(b []byte) []byte { return bytes.Replace(b, []byte(`{"pool":"`), []byte(`{"poox":"`), 1) }), "pool or attrs missing"},
	} {
		_, err := snapindex.Parse("/dev/shm/regiond/table.idx", c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "/dev/shm/regiond/table.idx") {
			t.Errorf("%s: %v, want an error naming the file and %q", c.name, err, c.want)
		}
	}
	hj := string(noBlock[8 : 8+h])
	older := withHeader(t, noBlock, strings.Replace(hj, `"stale":`, `"synced_at":"","stale":`, 1))
	x, err := snapindex.Parse("older.idx", older)
	if err != nil || !x.Header.SyncedAt.IsZero() {
		t.Fatalf("an older agent's empty synced_at: %v (synced_at %v), want it read as none", err, x)
	}
}

// TestBlockFlagBits: the header block's flags are bit 0 stale, bit 1
// synced_at present, as the format says (docs/snapshot-index.md), read
// from the bytes rather than through the package's constants: the PHP
// reader's tests hold them too, but only where php is installed.
func TestBlockFlagBits(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, sc := range fleettest.Scenarios(t, now) {
		for _, synced := range []bool{false, true} {
			h := routing.JSONHeader{WrittenAt: now}
			want := uint32(0)
			if sc.Table.Stale() {
				want |= 1
			}
			if synced {
				h.SyncedAt = now.Add(-time.Second)
				want |= 2
			}
			b, err := snapindex.Encode(nil, sc.Table, h)
			if err != nil {
				t.Fatal(err)
			}
			at := 8 + int(binary.LittleEndian.Uint16(b[6:])) + 677*12
			if string(b[at:at+4]) != "RGHB" {
				t.Fatalf("%s: no header block at %d", sc.Name, at)
			}
			if got := binary.LittleEndian.Uint32(b[at+4:]); got != want {
				t.Errorf("%s (synced_at %v): flags %#x, want %#x", sc.Name, synced, got, want)
			}
		}
	}
}
