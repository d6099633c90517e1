package store

import (
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/routing"
)

// TestLastGoodNotesEachRefusedKey: LastGood gives each refused key's last
// good value from etcd's history, with a note naming the revision; when a
// read fails (etcd gone meanwhile) it notes that, and the keys after it
// as not looked up, and returns without failing: the decision goes on
// without those values, as the agents' does (the diff review: a failed
// read failed the whole resolve or export).
func TestLastGoodNotesEachRefusedKey(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)
	for _, rel := range []string{routing.PolicyKey, "pools/eu-west"} {
		if _, err := cli.Put(ctx, s.Keyspace().RoutingKey(rel), `{"classes":{"eu":["pl"]}}`); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	earlier, notes := s.LastGood(ctx, st)
	if len(earlier) != 2 || len(notes) != 2 || !strings.Contains(strings.Join(notes, "\n"), "policy/residency: refused (") ||
		!strings.Contains(notes[0], "decided with its last good value, of revision") {
		t.Fatalf("two refused keys: last good values %v, notes %q; want both, each named", earlier, notes)
	}

	gone := devetcd.NewGoneClient(t)
	cut := New(gone, s.Keyspace(), Options{RequestTimeout: 200 * time.Millisecond})
	earlier, notes = cut.LastGood(ctx, st)
	joined := strings.Join(notes, "\n")
	if len(earlier) != 0 || len(notes) != 2 || !strings.Contains(joined, "its last good value could not be read") || !strings.Contains(joined, "not looked up") {
		t.Fatalf("etcd gone: last good values %v, notes %q; want none, the failed read and the key not looked up named", earlier, notes)
	}
}
