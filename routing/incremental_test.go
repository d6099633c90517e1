package routing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// TestIncrementalCompileEqualsFresh: a table compiled from the previous one
// (reusing unchanged effective entries) equals a table compiled from
// scratch, over a long random sequence of changes.
func TestIncrementalCompileEqualsFresh(t *testing.T) {
	cfg := exampleConfig(t)
	store := map[string][]byte{}
	for _, kv := range kvsOf(t, cfg) {
		store[kv.Key] = kv.Value
	}
	pools := []string{}
	for id := range cfg.Pools {
		pools = append(pools, id)
	}
	routes := []string{"PL", "DE", "KR", "JP", "US", "BR", "GB", "eu-general", "apac-general", "_default", "HU", "ZA"}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	mutations := []func(){
		func() { // reweight or repoint a route
			store[RouteKey(pick(routes))] = randomRouteValue(rng, pools)
		},
		func() { delete(store, RouteKey(pick(routes))) },
		func() { // pool status
			id := pick(pools)
			st := []string{"active", "draining", "down"}[rng.IntN(3)]
			store[PoolKey(id)] = fmt.Appendf(nil, `{"host":"%s.example.net","residency":%q,"status":%q,"attrs":{"s":"%d"}}`, id, cfg.Pools[id].Residency, st, rng.IntN(2))
		},
		func() { delete(store, PoolKey(pick(pools))) },
		func() { // an override
			store[OverrideKey(fmt.Sprint("b", rng.IntN(2)))] = fmt.Appendf(nil, `{"route":%q,"targets":[{"pool":%q,"weight":100}]}`, pick(routes), pick(pools))
		},
		func() { delete(store, OverrideKey(fmt.Sprint("b", rng.IntN(2)))) },
		func() { // policy
			if rng.IntN(2) == 0 {
				store[PolicyKey] = []byte(`{"classes":{"eu":["PL","DE","HU"],"apac":["KR"]},"unknown_country_class":"eu"}`)
			} else {
				delete(store, PolicyKey)
			}
		},
		func() { store[RouteKey(pick(routes))] = []byte(`{"targets":[{"pool":"eu-west","weight":130}]}`) }, // invalid
	}
	var prev *Table
	for step := 1; step <= 400; step++ {
		for n := rng.IntN(3) + 1; n > 0; n-- {
			mutations[rng.IntN(len(mutations))]()
		}
		var kvs []KV
		for _, k := range sortedKeys(store) {
			kvs = append(kvs, KV{Key: k, Value: store[k], ModRevision: int64(step)})
		}
		var down []string
		if rng.IntN(4) == 0 {
			down = []string{pick(pools)}
		}
		opts := CompileOptions{Now: t0, Start: t0, Down: down}
		inc := Compile(int64(step), kvs, prev, opts)
		// The fresh table must see the same last-good values: compile it
		// from the incremental table's good values.
		fresh := Compile(int64(step), goodKVs(inc), nil, opts)
		a, _ := inc.JSON(t0)
		b, _ := fresh.JSON(t0)
		if d := firstDiff(a, b); d != "" {
			t.Fatalf("step %d: incremental table differs from a fresh one: %s", step, d)
		}
		prev = inc
	}
}

// randomRouteValue is a route over two random pools with random weights
// and attrs; the same pool twice is a refused value (listed twice).
func randomRouteValue(rng *rand.Rand, pools []string) []byte {
	a, b := pools[rng.IntN(len(pools))], pools[rng.IntN(len(pools))]
	w := rng.IntN(101)
	if a == b {
		w = 100
	}
	return fmt.Appendf(nil, `{"targets":[{"pool":%q,"weight":%d},{"pool":%q,"weight":%d}],"fallback":["eu-general"],"attrs":{"n":"%d"}}`,
		a, w, b, 100-w, rng.IntN(3))
}

// goodKVs returns the values a table holds as good, as key/values.
func goodKVs(t *Table) []KV {
	var kvs []KV
	good := maps.Collect(t.good.all())
	for _, k := range sortedKeys(good) {
		kvs = append(kvs, KV{Key: k, Value: good[k].raw, ModRevision: good[k].rev})
	}
	return kvs
}

// firstDiff names the first top-level member (or effective entry) in which
// two table JSONs differ, or returns "". skipped legitimately differs
// between an incremental table and a fresh one (the fresh table never saw
// the refused values); firstDiffAll compares it too.
func firstDiff(a, b []byte) string { return tableDiff(a, b, "skipped") }

func firstDiffAll(a, b []byte) string { return tableDiff(a, b, "") }

func tableDiff(a, b []byte, ignore string) string {
	var ma, mb map[string]json.RawMessage
	json.Unmarshal(a, &ma)
	json.Unmarshal(b, &mb)
	for k := range ma {
		if k == ignore || bytes.Equal(ma[k], mb[k]) {
			continue
		}
		if k != "effective" {
			return fmt.Sprintf("%s:\n inc %.2000s\nfresh %.2000s", k, ma[k], mb[k])
		}
		var ea, eb map[string]json.RawMessage
		json.Unmarshal(ma[k], &ea)
		json.Unmarshal(mb[k], &eb)
		for cc := range ea {
			if !bytes.Equal(ea[cc], eb[cc]) {
				return fmt.Sprintf("effective %s:\n inc %s\nfresh %s", cc, ea[cc], eb[cc])
			}
		}
	}
	return ""
}

// BenchmarkCompileOneChange compiles the example fleet after one route
// changed, from the previous table: the agent's work per isolated put.
func BenchmarkCompileOneChange(b *testing.B) {
	kvs := kvsOf(b, exampleConfig(b))
	prev := Compile(1, kvs, nil, CompileOptions{Now: t0})
	i := 0
	for ; kvs[i].Key != "routes/PL"; i++ {
	}
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		w := n % 101
		kvs[i] = KV{Key: "routes/PL", Value: fmt.Appendf(nil, `{"targets":[{"pool":"eu-central","weight":%d},{"pool":"eu-west","weight":%d}]}`, w, 100-w), ModRevision: int64(n + 2)}
		prev = Compile(int64(n+2), kvs, prev, CompileOptions{Now: t0})
	}
}
