package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// kvValue is a value of export kv, with its entry kept as bytes.
type kvValue struct {
	Format    int    `json:"format"`
	Revision  int64  `json:"revision"`
	Epoch     int64  `json:"epoch"`
	WrittenAt string `json:"written_at"`
	SyncedAt  string `json:"synced_at"`
	// ValidUntil: the first instant the clock changes the entry.
	ValidUntil string          `json:"valid_until"`
	Stale      bool            `json:"stale"`
	Country    string          `json:"country"`
	Entry      json.RawMessage `json:"entry"`
}

// indexEntries compiles the test's stored state at rev as an agent does
// and returns the entry bytes of the index the agent's encoder makes of it,
// by key (the codes of kind 0, and _unknown).
func (e *tenv) indexEntries(rev int64, now time.Time) map[string][]byte {
	e.t.Helper()
	cur, err := store.New(testClient, e.ks, store.Options{}).LoadAt(context.Background(), rev)
	if err != nil {
		e.t.Fatal(err)
	}
	tab := routing.Compile(cur.Revision, cur.KVs, nil, routing.CompileOptions{Now: now, Start: now.Add(-routing.DefaultHealthGrace)})
	b, err := snapindex.Encode(nil, tab, routing.JSONHeader{WrittenAt: now})
	if err != nil {
		e.t.Fatal(err)
	}
	h := int(binary.LittleEndian.Uint16(b[6:8]))
	out := map[string][]byte{}
	for i := range snapindex.Slots {
		s := b[8+h+12*i:]
		off, n, kind := binary.LittleEndian.Uint32(s), binary.LittleEndian.Uint32(s[4:]), binary.LittleEndian.Uint32(s[8:])
		if kind == snapindex.KindCountry || i == snapindex.UnknownSlot {
			out[snapindex.SlotCode(i)] = b[off : off+n]
		}
	}
	return out
}

// checkKVExport checks that vs holds every country and _unknown, each
// value of the spec's shape and its entry byte for byte the index's.
func (e *tenv) checkKVExport(vs map[string]kvValue) {
	e.t.Helper()
	want := append(slices.Clone(routing.Countries()), routing.Unknown)
	if len(vs) != len(want) {
		e.t.Fatalf("export kv: %d keys, want %d (every country and _unknown)", len(vs), len(want))
	}
	var rev int64
	for _, v := range vs {
		rev = v.Revision
		break
	}
	entries := e.indexEntries(rev, time.Now())
	for _, k := range want {
		v, ok := vs[k]
		if !ok {
			e.t.Fatalf("export kv: no key %s", k)
		}
		if v.Format != 1 || v.Country != k || v.Revision != rev || v.Epoch == 0 || v.Stale ||
			!strings.HasSuffix(v.WrittenAt, "Z") || v.SyncedAt == "" {
			e.t.Errorf("export kv %s: %+v", k, v)
		}
		if !bytes.Equal(v.Entry, entries[k]) {
			e.t.Errorf("export kv %s: entry\n  %s\nindex entry\n  %s", k, v.Entry, entries[k])
		}
	}
}

// TestExportKV: export kv prints, in both formats and to --out, a value for
// every country and _unknown whose entry is the index entry of the stored
// state (a drained pool and a boost included); a bad --format is a usage
// error.
func TestExportKV(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "drain", "eu-central", "--reason", "test")
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--attr", "campaign=x", "--ttl", "1h", "--reason", "test")

	var bulk []struct{ Key, Value string }
	mustJSON(t, e.must(ExitOK, "export", "kv").stdout, &bulk)
	vs := map[string]kvValue{}
	for _, kv := range bulk {
		var v kvValue
		if err := json.Unmarshal([]byte(kv.Value), &v); err != nil {
			t.Fatalf("value of %s is not JSON: %v", kv.Key, err)
		}
		vs[kv.Key] = v
	}
	e.checkKVExport(vs)
	if v := vs["KR"]; !bytes.Contains(v.Entry, []byte(`"pool":"kr-music"`)) || !bytes.Contains(v.Entry, []byte(`"campaign":"x"`)) {
		t.Errorf("KR entry does not carry the boost: %s", v.Entry)
	}
	if v := vs["DE"]; bytes.Contains(v.Entry, []byte(`"pool":"eu-central"`)) || !bytes.Contains(v.Entry, []byte("pool-draining:eu-central")) {
		t.Errorf("DE entry does not show the drain: %s", v.Entry)
	}
	// The boost ends by its expires_at, about an hour away: KR's value
	// says so; DE's, which the boost does not change, has no valid_until.
	if end, err := time.Parse(time.RFC3339Nano, vs["KR"].ValidUntil); err != nil || time.Until(end) < 50*time.Minute || time.Until(end) > 61*time.Minute {
		t.Errorf("KR's valid_until %q (%v): want the boost's expires_at, about an hour away", vs["KR"].ValidUntil, err)
	}
	if u := vs["DE"].ValidUntil; u != "" {
		t.Errorf("DE's valid_until %q: want none", u)
	}

	m := map[string]kvValue{}
	mustJSON(t, e.must(ExitOK, "export", "kv", "--format", "map").stdout, &m)
	e.checkKVExport(m)

	out := filepath.Join(t.TempDir(), "kv.json")
	if r := e.must(ExitOK, "export", "kv", "--format", "map", "--out", out); r.stdout != "" {
		t.Errorf("export kv --out printed %q", r.stdout)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	clear(m)
	mustJSON(t, string(b), &m)
	e.checkKVExport(m)

	if r := e.must(ExitUsage, "export", "kv", "--format", "csv"); !strings.Contains(r.stderr, `--format "csv"`) {
		t.Errorf("bad --format: %s", r)
	}
	// A typo in --out's directory is refused, and nothing is created.
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	if r := e.must(ExitUsage, "export", "kv", "--out", filepath.Join(missing, "kv.json")); !strings.Contains(r.stderr, "directory "+missing+" does not exist") {
		t.Errorf("--out in a missing directory: %s", r)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("export kv --out created %s: %v", missing, err)
	}
}
