package routing

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// structJSON is the table JSON encoded the plain way, through tableJSON and
// encoding/json: the reference the hand-assembled JSON must equal.
func structJSON(t testing.TB, tb *Table) []byte {
	t.Helper()
	tb = tb.At(t0)
	out := tableJSON{Revision: tb.revision, Epoch: tb.epoch, WrittenAt: t0.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"),
		Stale: tb.stale, Pools: map[string]poolJSON{}, Routes: tb.routes, Policy: policyJSON{Residency: tb.policy},
		Effective: map[string]*Effective{}, Skipped: tb.skipped, Overrides: tb.overrides}
	if out.Skipped == nil {
		out.Skipped = []Skipped{}
	}
	for id, p := range tb.pools.all() {
		out.Pools[id] = poolJSON{Pool: *p.Pool, Healthy: tb.healthy(p, t0) && !p.down}
	}
	for id, e := range tb.eff {
		name := Unknown
		if id < len(countries) {
			name = countries[id]
		}
		out.Effective[name] = e
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTableJSONEqualsStructEncoding(t *testing.T) {
	cfg := exampleConfig(t)
	kvs := kvsOf(t, cfg)
	kvs = append(kvs, KV{Key: "overrides/kr-week", Value: []byte(`{"route":"KR","targets":[{"pool":"kr-music","weight":100}]}`), ModRevision: 2},
		KV{Key: "routes/XX", Value: []byte(`{}`), ModRevision: 2})
	first := Compile(2, kvs, nil, CompileOptions{Now: t0, Down: []string{"eu-west"}})
	for name, tb := range map[string]*Table{
		"fresh":         first,
		"recompiled":    Compile(3, kvs, first, CompileOptions{Now: t0}),
		"with revision": first.WithRevision(9),
	} {
		got, err := tb.JSON(t0)
		if err != nil {
			t.Fatal(err)
		}
		if want := structJSON(t, tb); !bytes.Equal(got, want) {
			t.Errorf("%s: hand-assembled table JSON differs from encoding/json's:\n got %.300s…\nwant %.300s…", name, got, want)
		}
	}
}

func TestUnchangedEffectiveEntriesAreReused(t *testing.T) {
	cfg := exampleConfig(t)
	kvs := kvsOf(t, cfg)
	a := Compile(1, kvs, nil, CompileOptions{Now: t0})
	for i := range kvs {
		if kvs[i].Key == "routes/JP" {
			kvs[i] = KV{Key: "routes/JP", Value: []byte(`{"targets":[{"pool":"apac-singapore","weight":100}]}`), ModRevision: 2}
		}
	}
	b := Compile(2, kvs, a, CompileOptions{Now: t0})
	if b.Effective("PL") != a.Effective("PL") {
		t.Error("PL's entry did not change but was not reused")
	}
	if b.Effective("JP") == a.Effective("JP") || b.Effective("JP").Candidates[0].Pool != "apac-singapore" {
		t.Errorf("JP's entry changed but was reused: %+v", b.Effective("JP"))
	}
}

// BenchmarkTableJSON renders the example fleet's table JSON into a new
// buffer, with written_at and synced_at, as /v1/table does.
func BenchmarkTableJSON(b *testing.B) {
	cfg := exampleConfig(b)
	tb := Compile(1, kvsOf(b, cfg), nil, CompileOptions{Now: t0})
	h := JSONHeader{WrittenAt: t0, SyncedAt: t0.Add(-time.Second)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tb.JSONWith(nil, h); err != nil {
			b.Fatal(err)
		}
	}
}

func TestClusterIDRoundTrip(t *testing.T) {
	tb := Compile(7, kvsOf(t, exampleConfig(t)), nil, CompileOptions{Now: t0, ClusterID: 0xcafe1234})
	b, err := tb.JSON(t0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"cluster_id":"cafe1234"`)) {
		t.Fatalf("table JSON lacks the cluster id: %.200s", b)
	}
	back, _, err := LoadTableJSON(b)
	if err != nil || back.ClusterID() != 0xcafe1234 || back.WithRevision(8).ClusterID() != 0xcafe1234 {
		t.Fatalf("loaded cluster id = %x (%v), want cafe1234", back.ClusterID(), err)
	}
}

// TestConcurrentRendersAgree: the first render of a table encodes its pools
// and routes lazily; renders racing for it (the API and the snapshot
// writer) all see the same, complete document.
func TestConcurrentRendersAgree(t *testing.T) {
	kvs := kvsOf(t, exampleConfig(t))
	prev := Compile(1, kvs, nil, CompileOptions{Now: t0})
	if _, err := prev.JSON(t0); err != nil {
		t.Fatal(err)
	}
	tb := Compile(2, kvs, prev, CompileOptions{Now: t0})
	want := structJSON(t, tb)
	out := make(chan []byte, 8)
	for range 8 {
		go func() {
			b, _ := tb.JSON(t0)
			out <- b
		}()
	}
	for range 8 {
		if b := <-out; !bytes.Equal(b, want) {
			t.Fatalf("a concurrent render differs: %.200s", b)
		}
	}
}

// TestTargetUnknownFieldsInTable: unknown fields inside a route's targets
// are kept through the table JSON (the snapshot) and back, and the
// effective entries answer as without them.
func TestTargetUnknownFieldsInTable(t *testing.T) {
	kvs := kvsOf(t, exampleConfig(t))
	for i := range kvs {
		if kvs[i].Key == "routes/PL" {
			kvs[i].Value = []byte(`{"targets":[{"pool":"eu-central","weight":70,"zone":"fra-1"},{"pool":"eu-west","weight":30}],"fallback":["eu-general"]}`)
		}
	}
	tb := Compile(1, kvs, nil, CompileOptions{Now: t0})
	if len(tb.Skipped()) > 0 {
		t.Fatalf("skipped: %v", tb.Skipped())
	}
	b, err := tb.JSON(t0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`{"pool":"eu-central","weight":70,"zone":"fra-1"}`)) {
		t.Fatal("the table JSON lost the unknown target field")
	}
	loaded, _, err := LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := loaded.Route("PL"); string(r.Targets[0].Extra["zone"]) != `"fra-1"` {
		t.Fatalf("loaded route PL targets: %+v", r.Targets)
	}
	if e := tb.Effective("PL"); len(e.Candidates) != 2 || e.Candidates[0].Pool != "eu-central" || e.Candidates[0].Weight != 70 {
		t.Fatalf("PL entry: %+v", e)
	}
}

// TestSyncedAtInHeader: synced_at is rendered right after written_at, in
// UTC with sub-second precision, and is the only change to the bytes of
// the table JSON; the segments carry it in their header; it is read back;
// a JSON without it (written before it existed) loads with a zero
// SyncedAt, and a malformed one is refused, naming the member.
func TestSyncedAtInHeader(t *testing.T) {
	tb := Compile(7, kvsOf(t, exampleConfig(t)), nil, CompileOptions{Now: t0, ClusterID: 0xcafe})
	synced := t0.Add(-79*time.Second + 123456789).In(time.FixedZone("CEST", 2*3600))
	h := JSONHeader{WrittenAt: t0, SyncedAt: synced}
	plain, err := tb.JSON(t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tb.JSONWith(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	member := `,"synced_at":"` + synced.UTC().Format(time.RFC3339Nano) + `"`
	if !strings.Contains(member, ".123456789Z") {
		t.Fatalf("synced_at %s lacks its sub-second digits or is not UTC", member)
	}
	wa := bytes.Index(plain, []byte(`,"stale":`))
	want := append(append(slices.Clip(plain[:wa]), member...), plain[wa:]...)
	if !bytes.Equal(got, want) {
		t.Fatalf("with synced_at the JSON differs from the JSON without it by more than the member:\n got %.200s\nwant %.200s", got, want)
	}
	segs, _, err := tb.JSONSegmentsWith(nil, nil, h)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.Join(segs, nil), got) || !bytes.Contains(segs[0], []byte(member)) {
		t.Fatalf("segments: header %q, or their concatenation differs from JSONWith", segs[0])
	}
	_, back, err := LoadTableJSONHeader(got)
	if err != nil {
		t.Fatal(err)
	}
	if !back.WrittenAt.Equal(t0) || !back.SyncedAt.Equal(synced) {
		t.Fatalf("read back %+v, want written_at %v and synced_at %v", back, t0, synced)
	}
	if _, old, err := LoadTableJSONHeader(plain); err != nil || !old.SyncedAt.IsZero() || !old.WrittenAt.Equal(t0) {
		t.Fatalf("a JSON without synced_at: %+v, %v; want a zero SyncedAt", old, err)
	}
	bad := bytes.Replace(got, []byte(member), []byte(`,"synced_at":"yesterday"`), 1)
	if _, _, err := LoadTableJSONHeader(bad); err == nil || !strings.Contains(err.Error(), "synced_at") {
		t.Fatalf("a malformed synced_at: err %v, want one naming synced_at", err)
	}
}

// TestSyncedAtAddsNoAllocations: rendering the segments with synced_at
// into reused storage allocates no more than rendering them without it.
func TestSyncedAtAddsNoAllocations(t *testing.T) {
	tb := Compile(7, kvsOf(t, exampleConfig(t)), nil, CompileOptions{Now: t0})
	segs, scratch, _ := tb.JSONSegmentsWith(nil, nil, JSONHeader{WrittenAt: t0, SyncedAt: t0})
	render := func(h JSONHeader) float64 {
		return testing.AllocsPerRun(200, func() { segs, scratch, _ = tb.JSONSegmentsWith(segs, scratch, h) })
	}
	without, with := render(JSONHeader{WrittenAt: t0}), render(JSONHeader{WrittenAt: t0, SyncedAt: t0.Add(-time.Second)})
	if with > without {
		t.Fatalf("segments with synced_at: %v allocations per render, without: %v", with, without)
	}
	t.Logf("allocations per render: %v without synced_at, %v with", without, with)
}
