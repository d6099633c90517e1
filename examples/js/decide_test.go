package js_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// sweepKeys is how many keys every header is decided with on every path
// (besides no key); see fleettest.JSFullKeys for how many of them read the
// file or KV per decision. About 30 of each kind fleettest.Keys makes
// (arbitrary bytes, long, UTF-8, one byte), each compared exactly with
// Go; more cost CI minutes, not cases.
const sweepKeys = 300

// compareGo fails t unless every decision of every sweep is Go's on x,
// naming the first that differ with every sweep's answer.
func compareGo(t *testing.T, x fleettest.Expect, sweeps ...*fleettest.Sweep) fleettest.Counts {
	t.Helper()
	n, bad, msgs, err := x.Compare(sweeps...)
	if err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Fatalf("%d of %d decisions differ from Go's; the first:\n  %s", bad, n.Decisions, strings.Join(msgs, "\n  "))
	}
	return n
}

// kvFile writes tab's KV export (cloudflare format) with synced_at.
func kvFile(t testing.TB, tab *routing.Table, now, synced time.Time) string {
	t.Helper()
	vs, err := snapindex.KVValues(tab, routing.JSONHeader{WrittenAt: now, SyncedAt: synced})
	if err != nil {
		t.Fatal(err)
	}
	b, err := snapindex.AppendKV(nil, vs, snapindex.KVFormatCloudflare)
	if err != nil {
		t.Fatal(err)
	}
	return writeTemp(t, "kv.json", b)
}

// kvValue is tab's KV export value of key (a country code or _unknown)
// under header h, as `regionctl export kv` makes it.
func kvValue(t testing.TB, tab *routing.Table, h routing.JSONHeader, key string) []byte {
	t.Helper()
	vs, err := snapindex.KVValues(tab, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Key == key {
			return v.Value
		}
	}
	t.Fatalf("the KV export has no key %s", key)
	return nil
}

// indexFile writes tab's index (snapindex.Encode, the agent's encoder).
func indexFile(t testing.TB, tab *routing.Table, now, synced time.Time) string {
	t.Helper()
	b, err := snapindex.Encode(nil, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: synced})
	if err != nil {
		t.Fatal(err)
	}
	return writeTemp(t, "table.idx", b)
}

// Max ages given to the JS reader: the fresh checks must not turn stale
// however long the test runs (a busy machine), and a synced_at an hour old
// must be stale.
const (
	freshAge = 1 << 30
	oldAge   = 30 * 60
)

// TestDecisionsMatchGo: through the KV export (a Workers KV namespace in
// memory) and through the index file (sync and async reads, and an
// IndexReader's, which keeps the entries it read), every header
// (AA..ZZ, junk, _unknown) without a key and × 1,000 keys decides as
// routing.Table.Resolve on every scenario of fleettest.Scenarios (drained, down,
// unhealthy, boosted, NoRoute, stale), decision by decision (pool, host,
// attrs, reasons, NoRoute body, revision, epoch); a synced_at older than
// the max age adds stale-table (on the fleet, × 20 keys). Each path runs
// in one node process per scenario (see fleettest.JSFullKeys for which
// decisions read the file or KV each).
func TestDecisionsMatchGo(t *testing.T) {
	node(t)
	now := time.Now()
	hs, ks := fleettest.Headers(), fleettest.Keys(sweepKeys)
	modes := []string{"kv", "idx", "idx-async", "idx-cached"}
	// run sweeps tab through every mode and compares them all with Go.
	run := func(t *testing.T, tab *routing.Table, synced time.Time, maxAge int, withStale bool, ks []string) fleettest.Counts {
		kv, idx := kvFile(t, tab, now, synced), indexFile(t, tab, now, synced)
		var sweeps []*fleettest.Sweep
		for _, mode := range modes {
			file := idx
			if mode == "kv" {
				file = kv
			}
			sweeps = append(sweeps, fleettest.SweepJS(t, mode, file, maxAge, hs, ks))
		}
		n := compareGo(t, fleettest.Expect{Table: tab, Now: now, WithStale: withStale}, sweeps...)
		t.Logf("%s equal on each of %v", n, modes)
		return n
	}
	var (
		mu    sync.Mutex
		total fleettest.Counts
	)
	add := func(n fleettest.Counts) {
		mu.Lock()
		defer mu.Unlock()
		total.Decisions += n.Decisions
		total.Sticky += n.Sticky
		total.Random += n.Random
		total.NoRoute += n.NoRoute
	}
	t.Run("scenarios", func(t *testing.T) {
		for _, sc := range fleettest.Scenarios(t, now) {
			t.Run(sc.Name, func(t *testing.T) {
				t.Parallel()
				add(run(t, sc.Table, now, freshAge, sc.Table.Stale(), ks))
			})
		}
		// The fleet synced an hour ago: stale-table from synced_at, which
		// no key changes; the keys all go through the whole path.
		tab := fleettest.Scenarios(t, now)[0].Table
		t.Run("old-sync", func(t *testing.T) {
			t.Parallel()
			run(t, tab, now.Add(-time.Hour), oldAge, true, ks[:fleettest.JSFullKeys])
		})
	})
	t.Logf("in all, per mode: %s", total)
	if want := 6 * len(hs) * sweepKeys / 2; !t.Failed() && (total.NoRoute == 0 || total.Random == 0 || total.Sticky < want) {
		t.Errorf("compared %s per mode: want NoRoute, random and ≥ %d sticky decisions", total, want)
	}
}
