package watch

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// TestMirrorKeepsNoHealthValues: an origin's role may write any number of
// large values under its pool's health/ (a 1000 × 60 KB flood took an
// agent from 24 to 100 MB). The mirror checks each health value as it
// arrives, by the list or by the watch, and keeps only the verdict: the key
// still counts as a live instance and a refused value is still reported,
// naming why, but its bytes are not held.
func TestMirrorKeepsNoHealthValues(t *testing.T) {
	m, cli, r0 := listedMirror(t)
	ctx := context.Background()
	pool, _ := m.Table().Pool("eu-west")
	before := pool.Instances
	big := `{"addr":"10.0.0.1:443","pad":"` + strings.Repeat("x", 60<<10) + `"}`
	notJSON := strings.Repeat("y", 200<<10)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(wctx, faultPrefix, clientv3.WithPrefix(), clientv3.WithRev(r0+1))
	if _, err := cli.Put(ctx, faultPrefix+"health/eu-west/big", big); err != nil {
		t.Fatal(err)
	}
	// Keys outside the grammar: one with a large value, one 60 KB long.
	longKey := "health/eu-west/" + strings.Repeat("k", 60<<10)
	if _, err := cli.Put(ctx, faultPrefix+"health/eu-west/not an id", big); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, faultPrefix+"health/eu-west/bad", notJSON); err != nil {
		t.Fatal(err)
	}
	// A key written as the long key's stand-in is a key of its own.
	short := routing.ShortKey([]byte(longKey))
	if _, err := cli.Put(ctx, faultPrefix+short, "{}"); err != nil {
		t.Fatal(err)
	}
	twin := routing.ShortKey([]byte(short))
	// The newest write, which the check against etcd's keys (verify)
	// compares.
	last, err := cli.Put(ctx, faultPrefix+longKey, "{}")
	if err != nil {
		t.Fatal(err)
	}
	check := func(how string) {
		t.Helper()
		for _, k := range []string{"health/eu-west/big", "health/eu-west/bad", "health/eu-west/not an id", short, twin} {
			kv, ok := m.state[k]
			if !ok {
				t.Fatalf("%s: %s not in the mirror's state", how, k)
			}
			if len(kv.Value) > 2 {
				t.Errorf("%s: the mirror keeps %d bytes of %s's value, want none (its verdict only)", how, len(kv.Value), k)
			}
		}
		p, _ := m.Table().Pool("eu-west")
		if p.Instances != before+2 {
			t.Errorf("%s: eu-west has %d live instances, want %d (a health key is live whatever its value)", how, p.Instances, before+2)
		}
		for k := range m.state {
			if len(k) > 200 {
				t.Errorf("%s: the mirror keeps a key of %d bytes, want the long key's stand-in (%d bytes)", how, len(k), len(short))
			}
		}
		why := map[string]string{}
		for _, s := range m.Table().Skipped() {
			if strings.HasPrefix(s.Key, "health/eu-west/") {
				why[s.Key] = s.Error
			}
		}
		if len(why) != 4 || why[twin] == "" || !strings.HasSuffix(why["health/eu-west/bad"], "health/eu-west/bad: value is 204800 bytes, larger than the 65536-byte limit") ||
			!strings.Contains(why["health/eu-west/not an id"], "want health/<pool>/<instance>") ||
			!strings.Contains(why[short], "want health/<pool>/<instance>") || len(why[short]) > 400 {
			t.Errorf("%s: skipped health keys %q, want health/eu-west/bad (by its size), the key not an id, the long key's stand-in and the stand-in written as a key (by their names)", how, why)
		}
		if why := m.verify(ctx); why != "" {
			t.Errorf("%s: the check of the state against etcd's keys: %s, want it passed", how, why)
		}
	}
	// By the watch.
	drainUpTo(t, m, wch, last.Header.Revision)
	check("watched")
	// By a list, into a new mirror (a compile of the whole state).
	m2, err := New(Config{Client: cli, Prefix: faultPrefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.relist(ctx, ReasonInitial); err != nil {
		t.Fatal(err)
	}
	m = m2
	check("listed")
	// A relist finding the same state keeps the table (the verdicts are
	// compared, not the values they stand for).
	kept := m.Table()
	if _, err := m.relist(ctx, ReasonError); err != nil {
		t.Fatal(err)
	}
	if m.Table() != kept {
		t.Error("a relist of the same state compiled a new table")
	}
	// A refused value replaced by another refused one at the same
	// revision (a restored backup) is another state: its verdict differs.
	other := m.state["health/eu-west/bad"]
	same := routing.Keep(routing.KV{Key: other.Key, Value: []byte(notJSON), ModRevision: other.ModRevision})
	diff := routing.Keep(routing.KV{Key: other.Key, Value: []byte("zz"), ModRevision: other.ModRevision})
	if !same.SameValue(other) || diff.SameValue(other) {
		t.Errorf("SameValue: the same refused value %v, another %v; want true, false", same.SameValue(other), diff.SameValue(other))
	}
	// The long key's delete reaches its stand-in.
	del, err := cli.Delete(ctx, faultPrefix+longKey)
	if err != nil {
		t.Fatal(err)
	}
	drainUpTo(t, m, cli.Watch(wctx, faultPrefix, clientv3.WithPrefix(), clientv3.WithRev(del.Header.Revision)), del.Header.Revision)
	if _, ok := m.state[short]; ok {
		t.Error("the long key, deleted, is still in the mirror's state")
	}
	for _, s := range m.Table().Skipped() {
		if s.Key == short {
			t.Error("the long key, deleted, is still skipped")
		}
	}
}

// drainUpTo applies wch's responses to m until m has applied rev.
func drainUpTo(t *testing.T, m *Mirror, wch clientv3.WatchChan, rev int64) {
	t.Helper()
	for m.applied < rev {
		select {
		case resp, ok := <-wch:
			if why := m.drain(wch, resp, ok); why != "" {
				t.Fatalf("drain: %s", why)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no watch response up to revision %d", rev)
		}
	}
}
