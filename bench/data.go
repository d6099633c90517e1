package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// loadExample reads examples/routing.yaml.
func loadExample(path string) (*routing.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := routing.ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// configValues returns the values of cfg plus the epoch, keyed by relative
// key, each compact JSON.
func configValues(cfg *routing.Config, epoch int64) (map[string][]byte, error) {
	vals, err := cfg.Values()
	if err != nil {
		return nil, err
	}
	vals[routing.EpochKey] = []byte(strconv.FormatInt(epoch, 10))
	return vals, nil
}

// putAll writes vals under prefix in transactions of at most 100 keys and
// returns the revision of the last one.
func putAll(ctx context.Context, cli *clientv3.Client, prefix string, vals map[string][]byte) (int64, error) {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var rev int64
	for len(keys) > 0 {
		n := min(100, len(keys))
		ops := make([]clientv3.Op, 0, n)
		for _, k := range keys[:n] {
			ops = append(ops, clientv3.OpPut(prefix+k, string(vals[k])))
		}
		keys = keys[n:]
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cli.Txn(tctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return 0, fmt.Errorf("load keys under %s: %w", prefix, err)
		}
		rev = resp.Header.Revision
	}
	return rev, nil
}

// routeVariants returns the two values a latency or burst put alternates
// between for route name: the route as in the example, with targets
// [a 70, b 30] and then [a 30, b 70].
func routeVariants(cfg *routing.Config, name, a, b string) ([2][]byte, error) {
	var out [2][]byte
	r, ok := cfg.Routes[name]
	if !ok {
		return out, fmt.Errorf("route %s is not in the example config", name)
	}
	for i, w := range [2]int{70, 30} {
		r.Targets = []routing.Target{{Pool: a, Weight: w}, {Pool: b, Weight: 100 - w}}
		v, err := json.Marshal(r)
		if err != nil {
			return out, err
		}
		out[i] = v
	}
	return out, nil
}

// flipKey finds a sticky key that PL viewers resolve to a different pool
// under each variant, and returns it with the pool of each variant, so the
// resolve poller can check the decision itself, not only its revision.
func flipKey(cfg *routing.Config, route string, variants [2][]byte) (string, [2]string, error) {
	base, err := configValues(cfg, 1)
	if err != nil {
		return "", [2]string{}, err
	}
	var tables [2]*routing.Table
	for i, v := range variants {
		kvs := make([]routing.KV, 0, len(base))
		for k, val := range base {
			if k == routing.RouteKey(route) {
				val = v
			}
			kvs = append(kvs, routing.KV{Key: k, Value: val, ModRevision: 1})
		}
		tables[i] = routing.Compile(1, kvs, nil, routing.CompileOptions{})
		if sk := tables[i].Skipped(); len(sk) > 0 {
			return "", [2]string{}, fmt.Errorf("variant %d of route %s refused: %v", i, route, sk)
		}
	}
	now := time.Now()
	for n := 0; n < 10000; n++ {
		key := "viewer-" + strconv.Itoa(n)
		d0, err0 := tables[0].Resolve(route, key, now)
		d1, err1 := tables[1].Resolve(route, key, now)
		if err0 == nil && err1 == nil && d0.Pool != d1.Pool {
			return key, [2]string{d0.Pool, d1.Pool}, nil
		}
	}
	return "", [2]string{}, fmt.Errorf("no sticky key flips between the variants of route %s", route)
}

// syncDataset returns a realistic store of exactly n keys: the example
// fleet, pools across the same residency classes with health checks, a
// route for every ISO country, and health keys (one per live instance)
// for the rest.
func syncDataset(cfg *routing.Config, n, extraPools int) (map[string][]byte, error) {
	c := cfg.Clone()
	classes := []struct{ residency, region, fallback string }{
		{"eu", "eu", "eu-general"}, {"us", "us", "na-general"}, {"latam", "latam", "latam-general"},
		{"apac", "apac", "apac-general"}, {"uk", "uk", "eu-general"},
	}
	byClass := map[string][]string{}
	var hc []string
	for i := 0; i < extraPools; i++ {
		cl := classes[i%len(classes)]
		id := fmt.Sprintf("%s-edge-%03d", cl.region, i)
		c.Pools[id] = routing.Pool{
			Host: fmt.Sprintf("edge-%s-%03d.example.net:443", cl.region, i), Region: cl.region,
			Residency: cl.residency, Status: routing.StatusActive, HealthCheck: true,
			Attrs: map[string]string{"shard": fmt.Sprintf("%s-%d", cl.region, i), "cdn": "cdn-" + cl.region + ".example.net", "max_rps": "500"},
		}
		byClass[cl.residency] = append(byClass[cl.residency], id)
		hc = append(hc, id)
	}
	eea := map[string]bool{}
	for _, cc := range routing.EEA() {
		eea[cc] = true
	}
	for i, cc := range routing.Countries() {
		if _, ok := c.Routes[cc]; ok {
			continue
		}
		cl := classes[1+i%3]
		if eea[cc] {
			cl = classes[0]
		}
		ps := byClass[cl.residency]
		c.Routes[cc] = routing.Route{
			Targets: []routing.Target{{Pool: ps[i%len(ps)], Weight: 50}, {Pool: ps[(i+1)%len(ps)], Weight: 30},
				{Pool: ps[(i+2)%len(ps)], Weight: 20}},
			Fallback: []string{cl.fallback}, Affinity: routing.AffinitySticky,
			Attrs: map[string]string{"lang": "en", "tokenizer": "icu"},
		}
	}
	if errs := routing.Validate(c); len(errs) > 0 {
		return nil, fmt.Errorf("generated sync config is invalid: %w", errs)
	}
	vals, err := configValues(c, 1)
	if err != nil {
		return nil, err
	}
	if len(vals) >= n {
		return nil, fmt.Errorf("-sync-keys %d: the config alone has %d keys", n, len(vals))
	}
	for i := 0; len(vals) < n; i++ {
		pool := hc[i%len(hc)]
		v, err := json.Marshal(routing.Health{Addr: fmt.Sprintf("10.%d.%d.%d:443", i>>16&255, i>>8&255, i&255),
			Since: "2026-03-01T12:00:00Z"})
		if err != nil {
			return nil, err
		}
		vals[routing.HealthKey(pool, fmt.Sprintf("i-%05d", i))] = v
	}
	return vals, nil
}
