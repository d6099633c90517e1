package lastgood

import (
	"context"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/routing"
)

// TestWalkReadsMaxStepsVersions protects the walk's bounds and what it
// returns: it starts at the version before the refused one and reads
// MaxSteps versions, so a good value MaxSteps versions back is found (and
// one further back is not), with that value's own revisions and version
// (the agents log, and regionctl names, the good value's revision).
func TestWalkReadsMaxStepsVersions(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	ctx := context.Background()
	walk := func(rel string, refused int) (routing.KV, routing.KV, Outcome) {
		t.Helper()
		put, err := cli.Put(ctx, prefix+rel, good1)
		if err != nil {
			t.Fatal(err)
		}
		for range refused {
			if _, err := cli.Put(ctx, prefix+"other", good2); err != nil { // revisions between the key's
				t.Fatal(err)
			}
			if _, err := cli.Put(ctx, prefix+rel, bad); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := cli.Get(ctx, prefix+rel)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get %s: %v", rel, err)
		}
		y := resp.Kvs[0]
		kv := routing.KV{Key: rel, Value: y.Value, ModRevision: y.ModRevision, CreateRevision: y.CreateRevision, Version: y.Version}
		e, out, err := Walk(ctx, cli, prefix+rel, kv, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		return routing.KV{Key: rel, Value: []byte(good1), ModRevision: put.Header.Revision, CreateRevision: put.Header.Revision, Version: 1}, e, out
	}
	want, e, out := walk("pools/edge", MaxSteps)
	if out != Found {
		t.Fatalf("a good value %d versions back: %v, want Found", MaxSteps, out)
	}
	if string(e.Value) != string(want.Value) || e.Key != want.Key || e.ModRevision != want.ModRevision ||
		e.CreateRevision != want.CreateRevision || e.Version != want.Version {
		t.Fatalf("found %+v, want %+v", e, want)
	}
	if _, _, out := walk("pools/past", MaxSteps+1); out != Exhausted {
		t.Fatalf("a good value %d versions back: %v, want Exhausted", MaxSteps+1, out)
	}
}

// TestRefusedOnlyForItsOwnValue protects Refused's exclusions: a health
// key whatever its value, and a key outside the grammar, have no last
// good value to look for; a pool whose value does not decode does, and
// one that decodes does not.
func TestRefusedOnlyForItsOwnValue(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		want       bool
	}{
		{"pools/p", bad, true},
		{"pools/p", good1, false},
		{"health/fra/i-1", "not json", false},
		{"health/fra/i-1", `{"addr":1}`, false},
		{"no/such/kind", "not json", false},
	} {
		if got := Refused(routing.KV{Key: tc.key, Value: []byte(tc.value)}); got != tc.want {
			t.Errorf("Refused(%s = %s) = %v, want %v", tc.key, tc.value, got, tc.want)
		}
	}
}
