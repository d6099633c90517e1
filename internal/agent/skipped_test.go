package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// TestStatusKeyNamesSkippedKeys: an agent serving a refused value says so
// in its status key (skipped: the count; skipped_keys: the first
// routing.MaxStatusSkippedKeys, those it may serve otherwise than another
// agent first; skipped_alike: how many every agent serves alike, health
// keys and keys outside the grammar), and re-puts it as the refused keys
// come and go with regionctl's writes, with no tick of the publisher's
// check and no time passing on its clock: the change itself brings the
// put.
func TestStatusKeyNamesSkippedKeys(t *testing.T) {
	srv, cli := exampleEtcd(t)
	clock := newFakeClock()
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, "node-1")
	cfg.StatusTTL = 2 * time.Second
	h := runAgent(t, dir, cfg, clock.install, quietHour)
	waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })
	waitFor(t, "status key", func() bool { _, v, _ := statusKV(t, cli, "node-1"); return v > 0 })
	st, _, from := statusKV(t, cli, "node-1")
	if st.Skipped != 0 || st.SkippedKeys != nil {
		t.Fatalf("status before any refused value: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, "/regiond/v1/agents/node-1", clientv3.WithRev(from+1))
	put := func(ops ...clientv3.Op) int64 {
		t.Helper()
		rev, _ := regionctlWrite(t, cli, ops...)
		return rev
	}
	at := func(rev int64) func(routing.AgentStatus) bool {
		return func(st routing.AgentStatus) bool { return st.Revision >= rev }
	}

	// One refused value.
	rev := put(clientv3.OpPut(prefix+"pools/eu-west", `{"host":"","residency":"EU","status":"sleeping"}`))
	if st := nextStatus(t, wch, at(rev)); st.Skipped != 1 || !slices.Equal(st.SkippedKeys, []string{"pools/eu-west"}) {
		t.Fatalf("status with one refused value: skipped %d %q, want 1 [pools/eu-west]", st.Skipped, st.SkippedKeys)
	}
	// Fifteen, three of them served alike (health keys live whatever
	// their value, a key outside the grammar): the count says so, the
	// keys named are the first ten, the twelve to fix first, sorted.
	routes := []string{"NL", "FR", "BE", "AT", "CZ", "ES", "PT", "IT", "IE", "SE", "FI"}
	var ops []clientv3.Op
	for _, cc := range routes {
		ops = append(ops, clientv3.OpPut(prefix+"routes/"+cc, `{"targets":5}`))
	}
	ops = append(ops, clientv3.OpPut(prefix+"health/eu-central/by-hand", "up"), clientv3.OpPut(prefix+"health/eu-west/by-hand", "up"),
		clientv3.OpPut(prefix+"bogus/key", "{}"))
	rev = put(ops...)
	want := []string{"pools/eu-west"}
	for _, cc := range routes {
		want = append(want, "routes/"+cc)
	}
	slices.Sort(want)
	if st := nextStatus(t, wch, at(rev)); st.Skipped != 15 || st.SkippedAlike != 3 || !slices.Equal(st.SkippedKeys, want[:routing.MaxStatusSkippedKeys]) {
		t.Fatalf("status with 15 refused values, 3 alike: skipped %d (%d alike) %q, want 15 (3 alike) %q", st.Skipped, st.SkippedAlike, st.SkippedKeys, want[:routing.MaxStatusSkippedKeys])
	}
	// The keys to fix gone, those served alike are named, still counted.
	ops = ops[:0]
	for _, cc := range routes {
		ops = append(ops, clientv3.OpDelete(prefix+"routes/"+cc))
	}
	rev = put(append(ops, clientv3.OpPut(prefix+"pools/eu-west", `{"host":"edge-ams-1.example.net:443","residency":"eu"}`))...)
	if st := nextStatus(t, wch, at(rev)); st.Skipped != 3 || st.SkippedAlike != 3 ||
		!slices.Equal(st.SkippedKeys, []string{"bogus/key", "health/eu-central/by-hand", "health/eu-west/by-hand"}) {
		t.Fatalf("status with 3 refused values served alike: skipped %d (%d alike) %q", st.Skipped, st.SkippedAlike, st.SkippedKeys)
	}
	// All fixed (deleted, or a good value): none.
	rev = put(clientv3.OpDelete(prefix+"health/eu-central/by-hand"), clientv3.OpDelete(prefix+"health/eu-west/by-hand"),
		clientv3.OpDelete(prefix+"bogus/key"))
	if st := nextStatus(t, wch, at(rev)); st.Skipped != 0 || st.SkippedKeys != nil {
		t.Fatalf("status once every value is good: skipped %d %q, want none", st.Skipped, st.SkippedKeys)
	}
}
