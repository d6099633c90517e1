package snapindex_test

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// TestEncoderReuseAcrossAnUpdate: entries alike in bytes share one copy
// in the file. With eu-central draining, DE and AT (same targets, same
// attrs) both fall back to eu-general alike: AT's bytes serve DE too. When
// AT's route then changes, DE's entry stays the same value, and a reused
// encoder must give DE bytes of its own again, as a fresh encoder does:
// left pointing at AT's new bytes, DE's viewers would be answered with
// AT's route by every index reader.
func TestEncoderReuseAcrossAnUpdate(t *testing.T) {
	b, err := os.ReadFile("../../examples/routing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := routing.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := cfg.Values()
	if err != nil {
		t.Fatal(err)
	}
	drained := strings.Replace(string(vals["pools/eu-central"]), `"status":"active"`, `"status":"draining"`, 1)
	if drained == string(vals["pools/eu-central"]) {
		t.Fatalf("pools/eu-central %s: no active status to drain", vals["pools/eu-central"])
	}
	vals["pools/eu-central"] = []byte(drained)
	var kvs []routing.KV
	for k, v := range vals {
		kvs = append(kvs, routing.KV{Key: k, Value: v, ModRevision: 1, CreateRevision: 1, Version: 1})
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	opts := routing.CompileOptions{Now: now}
	t1 := routing.Compile(1, kvs, nil, opts)
	h := routing.JSONHeader{WrittenAt: now}
	var enc snapindex.Encoder
	if _, err := enc.Encode(nil, t1, h); err != nil {
		t.Fatal(err)
	}
	at := strings.Replace(string(vals["routes/AT"]), `"lang":"de"`, `"lang":"de-AT"`, 1)
	if at == string(vals["routes/AT"]) {
		t.Fatalf("routes/AT %s: no lang de to change", vals["routes/AT"])
	}
	ev := routing.Event{KV: routing.KV{Key: "routes/AT", Value: []byte(at), ModRevision: 2, CreateRevision: 1, Version: 2}}
	t2 := routing.Update(t1, 2, []routing.Event{ev}, opts)
	if t2 == nil {
		t.Fatal("Update returned nil")
	}
	if t2.Effective("DE") != t1.Effective("DE") || t2.Effective("AT") == t1.Effective("AT") {
		t.Fatal("the update rebuilt DE's entry, or not AT's: the test needs DE's kept and AT's changed")
	}
	got, err := enc.Encode(nil, t2, h)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := snapindex.Encode(nil, t2, h)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, fresh) {
		t.Fatalf("after routes/AT changed, the reused encoder's file differs from a fresh encoder's (DE shared AT's bytes)")
	}
}
