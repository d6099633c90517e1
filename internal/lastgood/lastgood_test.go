package lastgood

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/routing"
)

const (
	prefix = "/lg/routing/"
	good1  = `{"host":"a.example","residency":"eu"}`
	good2  = `{"host":"b.example","residency":"eu"}`
	bad    = `{"host":"c.example","residency":"EU!"}`
)

// TestWalk: against a real etcd, each way a walk ends: the newest good
// value before the refused one (past refused ones), none for a key's
// first value or for one whose earlier values belong to a deleted
// incarnation, Exhausted past MaxSteps refused values, Compacted once the
// revision to read is compacted away, Failed with DeadlineExceeded when
// nothing answers within the timeout.
func TestWalk(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	ctx := context.Background()
	put := func(rel, v string) {
		t.Helper()
		if _, err := cli.Put(ctx, prefix+rel, v); err != nil {
			t.Fatal(err)
		}
	}
	current := func(rel string) routing.KV {
		t.Helper()
		resp, err := cli.Get(ctx, prefix+rel)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get %s: %v", rel, err)
		}
		kv := resp.Kvs[0]
		return routing.KV{Key: rel, Value: kv.Value, ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision, Version: kv.Version}
	}
	walk := func(rel string) (routing.KV, Outcome, error) {
		kv := current(rel)
		if !Refused(kv) {
			t.Fatalf("%s = %s is not refused", rel, kv.Value)
		}
		return Walk(ctx, cli, prefix+rel, kv, 5*time.Second)
	}

	put("pools/p", good1)
	put("pools/p", good2)
	put("pools/p", bad)
	put("pools/p", bad)
	if e, out, err := walk("pools/p"); out != Found || err != nil || string(e.Value) != good2 || e.Key != "pools/p" {
		t.Fatalf("two good values, then two refused: %v %v %q, want Found and the second good value", out, err, e.Value)
	}

	put("pools/first", bad)
	if _, out, err := walk("pools/first"); out != None || err != nil {
		t.Fatalf("a refused first value: %v %v, want None", out, err)
	}

	put("pools/again", good1)
	if _, err := cli.Delete(ctx, prefix+"pools/again"); err != nil {
		t.Fatal(err)
	}
	put("pools/again", bad)
	put("pools/again", bad)
	if _, out, err := walk("pools/again"); out != None || err != nil {
		t.Fatalf("a good value in a deleted incarnation only: %v %v, want None", out, err)
	}

	put("pools/long", good1)
	for range MaxSteps + 1 {
		put("pools/long", bad)
	}
	if _, out, err := walk("pools/long"); out != Exhausted || err != nil {
		t.Fatalf("a good value past %d refused ones: %v %v, want Exhausted", MaxSteps, out, err)
	}

	put("pools/old", good1)
	put("pools/old", bad)
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, out, err := walk("pools/old"); out != Compacted || err != nil {
		t.Fatalf("the good value's revision compacted: %v %v, want Compacted", out, err)
	}

	gone := devetcd.NewGoneClient(t)
	if _, out, err := Walk(ctx, gone, prefix+"pools/p", current("pools/p"), 200*time.Millisecond); out != Failed || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("etcd stopped: %v %v, want Failed with DeadlineExceeded", out, err)
	}
}
