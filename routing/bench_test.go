package routing

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// benchViewers are 1024 (country, sticky key) pairs: every country in
// turn, with keys of realistic length (a viewer or session id). The loop
// indexes them with a mask, so the benchmark measures Resolve, not its own
// modulo arithmetic.
func benchViewers() *[1024]viewer {
	var vs [1024]viewer
	ccs := Countries()
	for i := range vs {
		vs[i].country = ccs[i%len(ccs)]
		vs[i].key = "viewer-" + strconv.Itoa(i*7919+12345)
	}
	return &vs
}

type viewer struct{ country, key string }

// BenchmarkResolve resolves viewers of every country against a table in
// which every ISO country has a route of three targets, over 50 pools.
func BenchmarkResolve(b *testing.B) {
	cfg := bigConfig(50)
	if errs := Validate(cfg); len(errs) > 0 {
		b.Fatal(errs)
	}
	tbl := compileCfg(b, cfg, CompileOptions{})
	vs := benchViewers()
	b.Run("sticky", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			v := &vs[i&1023]
			if _, err := tbl.Resolve(v.country, v.key, t0); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("random", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := tbl.Resolve(vs[i&1023].country, "", t0); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkCompile compiles 10,000 keys (pools, a route for every
// country, health keys) from scratch, and again with the previous table
// (the agent's case: unchanged values are not decoded again).
func BenchmarkCompile(b *testing.B) {
	kvs := compileKVs(b, 10000)
	b.Run(fmt.Sprintf("keys=%d", len(kvs)), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Compile(100, kvs, nil, CompileOptions{Now: t0})
		}
	})
	prev := Compile(100, kvs, nil, CompileOptions{Now: t0})
	b.Run(fmt.Sprintf("keys=%d/prev", len(kvs)), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Compile(101, kvs, prev, CompileOptions{Now: t0})
		}
	})
}

// compileKVs returns about n key/values: the pools and routes of a config
// with a route for every country, and health keys for the rest.
func compileKVs(tb testing.TB, n int) []KV {
	cfg := bigConfig(200)
	for id, p := range cfg.Pools {
		p.HealthCheck = true
		cfg.Pools[id] = p
	}
	kvs := kvsOf(tb, cfg)
	ids := sortedKeys(cfg.Pools)
	for i := 0; len(kvs) < n; i++ {
		id := ids[i%len(ids)]
		kvs = append(kvs, KV{Key: HealthKey(id, fmt.Sprintf("i-%05d", i)), Value: []byte(`{"addr":"10.0.0.1:443","since":"2026-03-01T12:00:00Z"}`), ModRevision: int64(i + 2)})
	}
	return kvs
}

// BenchmarkCompilePools compiles and renders 10,000 pool keys and nothing
// else (the change-path harness's sync, bench/README.md): the first table an agent writes.
func BenchmarkCompilePools(b *testing.B) {
	kvs := harnessPools(10000)
	b.ReportAllocs()
	for b.Loop() {
		t := Compile(10001, kvs, nil, CompileOptions{Now: t0})
		if _, err := t.JSON(t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileDecodedPools is BenchmarkCompilePools' compile alone,
// its values decoded ahead (as the mirror decodes a list's pages while it
// reads them): what the agent does between the list and the first write.
func BenchmarkCompileDecodedPools(b *testing.B) {
	kvs := harnessPools(10000)
	d := new(Decoded)
	d.Decode(kvs, nil)
	b.ReportAllocs()
	for b.Loop() {
		Compile(10001, kvs, nil, CompileOptions{Now: t0, Decoded: d})
	}
}

// BenchmarkDecodePools decodes 10,000 pool values of the change-path
// harness's shape, as the mirror decodes a list's pages while it reads
// them (across CPUs): what the sync spends most of its CPU on.
func BenchmarkDecodePools(b *testing.B) {
	kvs := harnessPools(10000)
	b.ReportAllocs()
	for b.Loop() {
		new(Decoded).Decode(kvs, nil)
	}
}

// harnessPools returns n pool keys with values of the change-path
// harness's shape (~200 bytes).
func harnessPools(n int) []KV {
	kvs := make([]KV, 0, n)
	pad := strings.Repeat("x", 100)
	for i := range n {
		kvs = append(kvs, KV{Key: fmt.Sprintf("pools/init%06d", i), ModRevision: int64(i + 2), CreateRevision: int64(i + 2), Version: 1,
			Value: fmt.Appendf(nil, `{"host":"bench.example.net","region":"bench","residency":"global","status":"active","attrs":{"m":"QI%06dQ","pad":"%s"}}`, i, pad)})
	}
	return kvs
}
