package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// edit commits one change of the stored config.
func edit(ctx context.Context, t *testing.T, s *Store, reason string, fn func(c *routing.Config)) *Result {
	t.Helper()
	res, err := s.Write(ctx, WriteRequest{Command: "test", Reason: reason, Build: func(_ context.Context, cur *State) (*Plan, error) {
		c := cur.Config.Clone()
		fn(c)
		return &Plan{Config: c}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// setPool sets one field of a pool through fn.
func setPool(id string, fn func(p *routing.Pool)) func(c *routing.Config) {
	return func(c *routing.Config) {
		p := c.Pools[id]
		fn(&p)
		c.Pools[id] = p
	}
}

// modRev is the mod revision of the routing key rel now.
func modRev(ctx context.Context, t *testing.T, s *Store, rel string) int64 {
	t.Helper()
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range st.KVs {
		if kv.Key == rel {
			return kv.ModRevision
		}
	}
	t.Fatalf("%s is not stored", rel)
	return 0
}

// TestWriteOfAndOriginOf: a key put by a regionctl commit is that
// epoch's, with its record, read at the key's revision or, once that is
// compacted, found by the record's revision in etcd's index; a key put
// around regionctl is named so, before and after compaction, also with a
// commit after it; before the oldest record kept, after compaction, it is
// unknown. OriginOf follows writes that left the property alone back to
// the one that set it, and says why it stopped when the history before is
// compacted.
func TestWriteOfAndOriginOf(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)                                                                                                         // 1
	drained := edit(ctx, t, s, "disk failure", setPool("eu-west", func(p *routing.Pool) { p.Status = routing.StatusDraining })) // 2
	hand, err := cli.Put(ctx, s.Keyspace().RoutingKey("pools/uk-london"), `{"host":"edge-lhr-1.example.net:443","residency":"uk","status":"down"}`)
	if err != nil {
		t.Fatal(err)
	}
	handRev := hand.Header.Revision
	tweak := edit(ctx, t, s, "tweak", setPool("eu-west", func(p *routing.Pool) { p.Attrs = map[string]string{"x": "1"} })) // 3
	draining := func(v []byte) bool {
		x, err := routing.DecodeValue("pools/eu-west", v)
		p, ok := x.(*routing.Pool)
		return err == nil && ok && p.Status == routing.StatusDraining
	}
	cur, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	west := modRev(ctx, t, s, "pools/eu-west")
	if west != tweak.Revision {
		t.Fatalf("eu-west's mod revision %d, want epoch 3's %d", west, tweak.Revision)
	}
	w, err := s.WriteOf(ctx, "pools/eu-west", west, cur)
	if err != nil || w.Epoch != 3 || w.Record == nil || w.Record.Reason != "tweak" || w.Record.Rewritten || w.Change == nil || w.Around {
		t.Fatalf("WriteOf(eu-west at epoch 3): %+v, %v", w, err)
	}
	o, err := s.OriginOf(ctx, "pools/eu-west", west, cur, draining, 4)
	if err != nil || !o.Set || o.Write.Epoch != 2 || o.Write.Revision != drained.Revision || o.Write.Record.Reason != "disk failure" {
		t.Fatalf("OriginOf(eu-west draining): %+v, %v; want epoch 2", o, err)
	}
	for _, c := range []*State{cur, nil} { // before epoch 3's commit: read either way
		w, err := s.WriteOf(ctx, "pools/uk-london", handRev, c)
		if err != nil || !w.Around || w.Epoch != 0 || w.Record != nil {
			t.Fatalf("WriteOf(uk-london, a hand edit): %+v, %v", w, err)
		}
	}

	// Compacted: found from the audit records alone.
	if _, err := cli.Compact(ctx, cur.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := s.keyAt(ctx, "pools/eu-west", west-1); err == nil {
		t.Fatal("the history is not compacted")
	}
	w, err = s.WriteOf(ctx, "pools/eu-west", west, nil)
	if err != nil || w.Epoch != 3 || w.Record == nil || w.Record.Reason != "tweak" || w.Around || w.Unknown != "" {
		t.Fatalf("WriteOf(eu-west at epoch 3) compacted: %+v, %v", w, err)
	}
	w, err = s.WriteOf(ctx, "pools/uk-london", handRev, nil)
	if err != nil || !w.Around || w.Epoch != 0 {
		t.Fatalf("WriteOf(uk-london, a hand edit) compacted: %+v, %v", w, err)
	}
	o, err = s.OriginOf(ctx, "pools/eu-west", west, cur, draining, 4)
	if err != nil || o.Set || o.Write.Epoch != 3 || !strings.Contains(o.Stopped, "is compacted") {
		t.Fatalf("OriginOf(eu-west draining) compacted: %+v, %v; want epoch 3, stopped by the compaction", o, err)
	}
	// Epoch 1's record gone: a key it wrote is older than the oldest
	// record kept.
	if _, err := cli.Delete(ctx, s.Keyspace().Audit(1)); err != nil {
		t.Fatal(err)
	}
	east := modRev(ctx, t, s, "pools/us-east")
	w, err = s.WriteOf(ctx, "pools/us-east", east, nil)
	if err != nil || w.Around || w.Epoch != 0 || !strings.Contains(w.Unknown, "older than the oldest audit record kept") {
		t.Fatalf("WriteOf(us-east at epoch 1) compacted, its record gone: %+v, %v", w, err)
	}
}

// TestSearchHistory: the audit trail is read newest first, page by page,
// matching records kept until the limit, as far back as the cap; a record
// put again (or deleted and put again) is marked rewritten, also across a
// page's edge.
func TestSearchHistory(t *testing.T) {
	t.Parallel()
	ctx, cli, s, _ := storeEnv(t, Options{})
	const n = 2*historyPage + 51
	ks := s.Keyspace()
	ops := []clientv3.Op{clientv3.OpPut(ks.Epoch(), fmt.Sprint(n))}
	rec := func(ep int) string {
		return fmt.Sprintf(`{"epoch":%d,"at":"2026-12-06T02:40:03Z","user":"u","host":"h","reason":"r","command":"c","changes":[{"key":"pools/p%d","op":"put","before":null,"after":{}}]}`, ep, ep%2)
	}
	for ep := 1; ep <= n; ep++ {
		ops = append(ops, clientv3.OpPut(ks.Audit(int64(ep)), rec(ep)))
	}
	if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	// Put again; deleted and put again, at the top of the second page.
	putAgain, delPut := int64(n-20), int64(n-historyPage)
	if _, err := cli.Put(ctx, ks.Audit(putAgain), rec(int(putAgain))); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, ks.Audit(delPut)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, ks.Audit(delPut), rec(int(delPut))); err != nil {
		t.Fatal(err)
	}
	all := func(AuditEntry) bool { return true }
	res, err := s.SearchHistory(ctx, all, 0, 0)
	if err != nil || len(res.Records) != n || res.Newest != n || res.Oldest != 1 || res.Capped {
		t.Fatalf("SearchHistory(all): %d records, %d..%d, capped %v, %v", len(res.Records), res.Newest, res.Oldest, res.Capped, err)
	}
	for i, r := range res.Records {
		if r.Epoch != int64(n-i) || r.Rewritten != (r.Epoch == putAgain || r.Epoch == delPut) {
			t.Fatalf("record %d: epoch %d rewritten %v", i, r.Epoch, r.Rewritten)
		}
	}
	odd := func(r AuditEntry) bool { return r.Changes[0].Key == "pools/p1" }
	res, err = s.SearchHistory(ctx, odd, 3, 0)
	if err != nil || fmt.Sprint(epochsOf(res.Records)) != fmt.Sprintf("[%d %d %d]", n, n-2, n-4) || res.Capped || res.Oldest != n-4 {
		t.Fatalf("SearchHistory(odd, limit 3): %v, oldest %d, capped %v, %v", epochsOf(res.Records), res.Oldest, res.Capped, err)
	}
	res, err = s.SearchHistory(ctx, odd, 0, historyPage+10)
	if err != nil || len(res.Records) != (historyPage+10)/2 || !res.Capped || res.Newest != n || res.Oldest != n-historyPage-9 {
		t.Fatalf("SearchHistory(odd, cap %d): %d records, %d..%d, capped %v, %v", historyPage+10, len(res.Records), res.Newest, res.Oldest, res.Capped, err)
	}
}

func epochsOf(recs []AuditEntry) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Epoch
	}
	return out
}
