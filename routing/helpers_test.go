package routing

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// t0 is the fixed clock of the tests.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// exampleConfig parses examples/routing.yaml, the realistic fleet fixture.
func exampleConfig(t testing.TB) *Config {
	t.Helper()
	b, err := os.ReadFile("../examples/routing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		t.Fatalf("parse examples/routing.yaml: %v", err)
	}
	return cfg
}

// compileCfg compiles a config with no overrides at t0.
func compileCfg(t testing.TB, cfg *Config, opts CompileOptions) *Table {
	t.Helper()
	if opts.Now.IsZero() {
		opts.Now = t0
	}
	tbl, err := CompileConfig(cfg, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// kvsOf returns the stored values of a config as key/values at revision 1.
func kvsOf(t testing.TB, cfg *Config) []KV {
	t.Helper()
	vals, err := cfg.Values()
	if err != nil {
		t.Fatal(err)
	}
	kvs := make([]KV, 0, len(vals))
	for _, k := range sortedKeys(vals) {
		kvs = append(kvs, KV{Key: k, Value: vals[k], ModRevision: 1})
	}
	return kvs
}

// tg is a shorthand for a target list: tg("a", 70, "b", 30).
func tg(pw ...any) []Target {
	var out []Target
	for i := 0; i+1 < len(pw); i += 2 {
		out = append(out, Target{Pool: pw[i].(string), Weight: pw[i+1].(int)})
	}
	return out
}

// bigConfig returns a config in which every ISO country has a route, served
// by nPools pools spread over the residency classes eu, us, apac and latam;
// each country route has three targets allowed for its class.
func bigConfig(nPools int) *Config {
	classes := []string{"eu", "us", "apac", "latam"}
	cfg := &Config{Pools: map[string]Pool{}, Routes: map[string]Route{}}
	byClass := map[string][]string{}
	for i := 0; i < nPools; i++ {
		class := classes[i%len(classes)]
		id := fmt.Sprintf("%s-%02d", class, i)
		cfg.Pools[id] = Pool{Host: fmt.Sprintf("edge-%d.example.net:443", i), Region: class, Residency: class,
			Status: StatusActive, Attrs: map[string]string{"shard": id, "cdn": "cdn-" + class + ".example.net"}}
		byClass[class] = append(byClass[class], id)
	}
	eea := map[string]bool{}
	for _, cc := range EEA() {
		eea[cc] = true
	}
	for i, cc := range Countries() {
		class := classes[1+i%3]
		if eea[cc] {
			class = "eu"
		}
		ps := byClass[class]
		cfg.Routes[cc] = Route{
			Targets:  tg(ps[i%len(ps)], 50, ps[(i+1)%len(ps)], 30, ps[(i+2)%len(ps)], 20),
			Fallback: []string{class + "-general"},
			Affinity: AffinitySticky,
			Attrs:    map[string]string{"lang": "xx", "tokenizer": "icu"},
		}
	}
	for _, class := range classes {
		ps := byClass[class]
		cfg.Routes[class+"-general"] = Route{Targets: tg(ps[0], 50, ps[1], 50), Fallback: []string{DefaultRoute}, Affinity: AffinitySticky}
	}
	cfg.Routes[DefaultRoute] = Route{Targets: tg(byClass["eu"][0], 100), Affinity: AffinitySticky}
	return cfg
}

// residencyViolation returns why the decision for country (a raw header
// value) breaks the residency invariant of tbl, or "": a viewer of a
// residency class is given only a pool of that class (or NoRoute).
func residencyViolation(tbl *Table, country string, d Decision, err error) string {
	if err != nil {
		return ""
	}
	class := tbl.ClassOf(d.Country)
	if class == "" {
		return ""
	}
	p, ok := tbl.Pool(d.Pool)
	if !ok {
		return fmt.Sprintf("%s (class %s) went to %s, a pool the table does not have", country, class, d.Pool)
	}
	if p.Residency != class {
		return fmt.Sprintf("%s (class %s) went to %s of residency %s", country, class, d.Pool, p.Residency)
	}
	return ""
}
