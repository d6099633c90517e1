package routing

import (
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/quick"
	"time"
)

// withParallelMin runs f with parallelMin set to min and at least two
// CPUs (GOMAXPROCS), so that splitting is tried on any machine, then
// restores both. Callers must not be parallel tests: parallelMin is read
// by every compile.
func withParallelMin(min int, f func()) {
	old := parallelMin
	parallelMin = min
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	defer func() { parallelMin = old }()
	f()
}

// compileBothWays compiles kvs (over prev) with values decoded and pools
// encoded across CPUs (every input split) and in the caller (none split),
// and returns both tables' JSON.
func compileBothWays(t *testing.T, kvs []KV, prev *Table, opts CompileOptions) (split, seq []byte) {
	t.Helper()
	var err error
	withParallelMin(1, func() { split, err = Compile(7, kvs, prev, opts).JSON(opts.Now) })
	if err != nil {
		t.Fatal(err)
	}
	withParallelMin(math.MaxInt, func() { seq, err = Compile(7, kvs, prev, opts).JSON(opts.Now) })
	if err != nil {
		t.Fatal(err)
	}
	return split, seq
}

// TestParallelCompileMatchesSequential: a compile that decodes values and
// encodes pools across CPUs gives the table, skipped keys and last good
// values included, that the sequential reference gives: on random worlds,
// fresh and over a previous table, and on 5,000 pools with refused values
// and health keys.
func TestParallelCompileMatchesSequential(t *testing.T) {
	opts := CompileOptions{Now: t0, Start: t0.Add(-time.Minute), Grace: 10 * time.Second}
	check := func(w world, v world) bool {
		kvs := w.s.kvs(w.revs)
		split, seq := compileBothWays(t, kvs, nil, opts)
		if d := firstDiffAll(split, seq); d != "" {
			t.Logf("fresh: split compile differs: %s\n%s", d, w)
			return false
		}
		// Over a previous table: v's values where keys are shared, so
		// some are reused, some decoded, some refused with a last good.
		prev := v.compile()
		mixed := w.s.with(PoolKey("p0"), `{"host":"bad host","residency":"eu","status":"active"}`)
		split, seq = compileBothWays(t, mixed.kvs(w.revs), prev, opts)
		if d := firstDiffAll(split, seq); d != "" {
			t.Logf("over a previous table: split compile differs: %s\n%s", d, w)
			return false
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 300, Rand: rand.New(rand.NewSource(3))}); err != nil {
		t.Fatal(err)
	}

	r := rand.New(rand.NewSource(4))
	s := store{}
	for i := range 5000 {
		id := fmt.Sprintf("pool%04d", i)
		switch {
		case i%41 == 0:
			s[PoolKey(id)] = `{"host":"edge.example.net","residency":"eu","status":"sideways"}` // refused
		case i%53 == 0:
			s[PoolKey(id)] = `{"host":` // not JSON
		default:
			s[PoolKey(id)] = fmt.Sprintf(`{"host":"edge-%d.example.net:443","residency":%q,"status":%q,"health_check":%v,"attrs":{"shard":"%s","pad":%q}}`,
				i, worldResidencies[r.Intn(len(worldResidencies))], worldStatuses[r.Intn(len(worldStatuses))], i%3 == 0, id, strings.Repeat("x", r.Intn(40)))
		}
		if i%3 == 0 && r.Intn(2) == 0 {
			s[HealthKey(id, "i-1")] = `{"addr":"10.0.0.1:443"}`
		}
	}
	s[RouteKey("PL")] = `{"targets":[{"pool":"pool0001","weight":70},{"pool":"pool0002","weight":30}]}`
	s[RouteKey(DefaultRoute)] = `{"targets":[{"pool":"pool0004","weight":100}]}`
	kvs := s.kvs(nil)
	split, seq := compileBothWays(t, kvs, nil, opts)
	if d := firstDiffAll(split, seq); d != "" {
		t.Fatalf("5,000 pools: split compile differs: %s", d)
	}
	withParallelMin(1, func() {
		if n := len(Compile(7, kvs, nil, opts).Skipped()); n < 200 {
			t.Fatalf("5,000 pools: %d skipped keys, want the ~215 refused values", n)
		}
	})
}

// TestParallelSplitsListsNotChanges: inParallel covers [0, n) in disjoint
// chunks, one per CPU, once n reaches parallelMin, and runs in the caller
// below it; a compile of 3,000 pools splits (decoding and encoding), one of
// 3,000 health keys does not decode in parallel, and a change to one pool
// of 3,000 re-encodes it without splitting.
func TestParallelSplitsListsNotChanges(t *testing.T) {
	withParallelMin(2048, func() {
		mu := make(chan struct{}, 1)
		var chunks [][2]int
		inParallel(5000, func(lo, hi int) {
			mu <- struct{}{}
			chunks = append(chunks, [2]int{lo, hi})
			<-mu
		})
		slices.SortFunc(chunks, func(a, b [2]int) int { return a[0] - b[0] })
		if len(chunks) != runtime.GOMAXPROCS(0) || chunks[0][0] != 0 || chunks[len(chunks)-1][1] != 5000 {
			t.Fatalf("5,000 items: chunks %v, want %d covering [0, 5000)", chunks, runtime.GOMAXPROCS(0))
		}
		for i := 1; i < len(chunks); i++ {
			if chunks[i][0] != chunks[i-1][1] {
				t.Fatalf("chunks %v are not contiguous and disjoint", chunks)
			}
		}
		before := splitCalls.Load()
		inParallel(2047, func(lo, hi int) {
			if lo != 0 || hi != 2047 {
				t.Errorf("2,047 items: chunk [%d, %d), want one [0, 2047)", lo, hi)
			}
		})
		if splitCalls.Load() != before {
			t.Error("2,047 items split")
		}

		pools, health := store{}, store{}
		for i := range 3000 {
			id := fmt.Sprintf("p%04d", i)
			pools[PoolKey(id)] = fmt.Sprintf(`{"host":"edge-%d.example.net","residency":"eu","status":"active"}`, i)
			health[HealthKey("p0", fmt.Sprint("i-", i))] = `{"addr":"10.0.0.1:443"}`
		}
		opts := CompileOptions{Now: t0}
		if pre := predecode(health.with(PoolKey("p0"), pools[PoolKey("p0000")]).kvs(nil), nil); pre != nil {
			t.Error("3,000 health keys and one pool: predecode split")
		}
		before = splitCalls.Load()
		tab := Compile(5, pools.kvs(nil), nil, opts)
		if _, err := tab.JSON(t0); err != nil {
			t.Fatal(err)
		}
		if got := splitCalls.Load() - before; got != 2 {
			t.Errorf("a list of 3,000 pools: %d split calls, want 2 (decode, encode)", got)
		}
		before = splitCalls.Load()
		next := Update(tab, 6, []Event{{KV: KV{Key: PoolKey("p0007"), ModRevision: 6,
			Value: []byte(`{"host":"edge-7.example.net","residency":"eu","status":"draining"}`)}}}, opts)
		js, err := next.JSON(t0)
		if err != nil {
			t.Fatal(err)
		}
		if got := splitCalls.Load() - before; got != 0 {
			t.Errorf("one changed pool of 3,000: %d split calls, want 0", got)
		}
		fresh, _ := Compile(6, goodKVs(next), nil, opts).JSON(t0)
		if d := firstDiff(js, fresh); d != "" {
			t.Errorf("after the change: %s", d)
		}
	})
}

// TestCompileWithDecodedMatchesCompile: values decoded ahead, page by page
// as the mirror reads a list (health keys among them, refused values, a
// value changed after it was decoded), give the table Compile builds by
// itself.
func TestCompileWithDecodedMatchesCompile(t *testing.T) {
	var kvs []KV
	add := func(key, val string) {
		kvs = append(kvs, KV{Key: key, Value: []byte(val), ModRevision: int64(len(kvs) + 2), CreateRevision: 2, Version: 1})
	}
	add("epoch", `7`)
	for i := range 300 {
		add(fmt.Sprintf("health/p%03d/i-1", i%40), `{"addr":"10.0.0.1:443"}`)
	}
	add("health/p001/bad", `[1]`)
	for i := range 40 {
		add(fmt.Sprintf("pools/p%03d", i), fmt.Sprintf(`{"host":"p%d.example.net","residency":"eu","health_check":%v,"attrs":{"n":"%d"}}`, i, i%2 == 0, i))
	}
	add("pools/zbad", `{"host":"","residency":"eu"}`)
	add("routes/PL", `{"targets":[{"pool":"p001","weight":60},{"pool":"p002","weight":40}]}`)
	add("routes/_default", `{"targets":[{"pool":"p003","weight":100}]}`)
	d := new(Decoded)
	for lo := 0; lo < len(kvs); lo += 77 { // pages
		d.Decode(kvs[lo:min(lo+77, len(kvs))], nil)
	}
	// A value replaced after it was decoded is decoded again, not taken;
	// so is one whose key changed, its bytes the same (found in review:
	// another kind's value was taken, and Compile panicked).
	kvs[len(kvs)-1].Value = []byte(`{"targets":[{"pool":"p004","weight":100}]}`)
	kvs[len(kvs)-3].Key = "pools/zbae" // a refused value under another key
	kvs[len(kvs)-4].Key = "routes/US"  // a pool's bytes under a route's key
	want := Compile(500, kvs, nil, CompileOptions{Now: t0})
	same := func(what string, got, want *Table) {
		t.Helper()
		a, _ := got.JSON(t0)
		b, _ := want.JSON(t0)
		if d := firstDiffAll(a, b); d != "" || !reflect.DeepEqual(got.Skipped(), want.Skipped()) {
			t.Fatalf("%s: %s; skipped %v, want %v", what, d, got.Skipped(), want.Skipped())
		}
	}
	for range 2 { // of resets its cursor: a second compile with it (Earlier) reads it again
		same("compiled with values decoded ahead", Compile(500, kvs, nil, CompileOptions{Now: t0, Decoded: d}), want)
	}
	// A relist: the values the previous table holds are not decoded ahead
	// (Compile reuses them), the others are.
	next := slices.Clone(kvs)
	for i := range next {
		if i%3 == 0 && strings.HasPrefix(next[i].Key, "pools/p") {
			next[i].Value = []byte(`{"host":"moved.example.net","residency":"eu"}`)
		}
	}
	d = new(Decoded)
	d.Decode(next, want)
	if len(d.idx) == 0 || len(d.idx) >= 40 {
		t.Fatalf("%d values decoded ahead of a relist that changed 14 pools", len(d.idx))
	}
	same("a relist compiled with values decoded ahead", Compile(501, next, want, CompileOptions{Now: t0, Decoded: d}),
		Compile(501, next, want, CompileOptions{Now: t0}))
}
