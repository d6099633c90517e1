package faultsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// The suite's world: a dozen pools in three residency classes, a dozen
// country routes, two group routes and _default. Every value the writer
// puts under a real key is valid on its own (the agents compile whatever
// etcd holds; whole-config validation is regionctl's job, not theirs), so
// routes may name missing pools, pools may be draining or down, and EU
// viewers may end up with NoRoute: all of it must be served exactly as the
// reference resolver says.
//
// Invalid values (~5% of operations) go to junk keys, which never hold a
// valid value: a refused value under a real key would be served as that
// key's last good value, which depends on what each agent happened to see
// (a relisting agent never sees values written and replaced while it was
// cut off), and then no fresh compile of etcd's state could be the
// reference. Last good values are checked by the watch and routing tests.
var (
	poolIDs    = []string{"eu-a", "eu-b", "eu-c", "eu-d", "us-a", "us-b", "us-c", "ap-a", "ap-b", "ap-c", "gl-a", "gl-b"}
	countryIDs = []string{"DE", "FR", "PL", "NO", "ES", "US", "CA", "BR", "JP", "KR", "AU", "IN"}
	groupIDs   = []string{"eu-general", "apac-general"}
	routeIDs   = append(append(append([]string{}, countryIDs...), groupIDs...), "_default")
	junkKeys   = []string{"pools/junk-1", "pools/junk-2", "routes/junk-group", "routes/GB", "bogus/key", "pools/UPPER"}
	// checkCountries are the viewers the checker asks about: the routed
	// countries, countries without a route, and garbage headers.
	checkCountries = append(append([]string{}, countryIDs...), "GB", "IT", "MX", "ZA", "", "XX", "eu", "t1", " pl ")
)

// residencyOf is the residency of a pool id.
func residencyOf(id string) string {
	switch id[:2] {
	case "eu":
		return "eu"
	case "us":
		return "us"
	case "ap":
		return "apac"
	}
	return "global"
}

// writer writes the random history.
type writer struct {
	cli    *clientv3.Client
	prefix string
	rng    *rand.Rand
	ops    int   // operations committed
	failed int   // operations that failed (cluster faults), not retried
	last   int64 // revision of the last committed write
}

func (w *writer) randTargets(n int) []routing.Target {
	ids := append([]string(nil), poolIDs...)
	w.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	if w.rng.IntN(10) == 0 {
		ids[0] = "gone-" + strconv.Itoa(w.rng.IntN(3)) // a pool that does not exist
	}
	ts := make([]routing.Target, n)
	left := 100
	for i := range ts {
		wt := left
		if i < n-1 {
			wt = w.rng.IntN(left + 1)
		}
		ts[i] = routing.Target{Pool: ids[i], Weight: wt}
		left -= wt
	}
	return ts
}

func (w *writer) poolValue(id string) string {
	statuses := []string{"active", "active", "active", "active", "draining", "down"}
	p := routing.Pool{Host: id + ".example.net:443", Region: id, Residency: residencyOf(id),
		Status: statuses[w.rng.IntN(len(statuses))], HealthCheck: w.rng.IntN(3) == 0,
		Attrs: map[string]string{"shard": strconv.Itoa(w.rng.IntN(9)), "cdn": id + ".cdn.example.net"}}
	return mustJSON(p)
}

func (w *writer) routeValue(name string) string {
	r := routing.Route{Targets: w.randTargets(1 + w.rng.IntN(3)), Affinity: "sticky",
		Attrs: map[string]string{"lang": strings.ToLower(name), "v": strconv.Itoa(w.rng.IntN(1000))}}
	if w.rng.IntN(5) == 0 {
		r.Affinity = "random"
	}
	if name != "_default" {
		fb := []string{"eu-general", "apac-general", "_default"}
		w.rng.Shuffle(len(fb), func(i, j int) { fb[i], fb[j] = fb[j], fb[i] })
		r.Fallback = fb[:w.rng.IntN(3)]
		if name == "eu-general" || name == "apac-general" {
			r.Fallback = nil // no cycles between the groups
		}
	}
	return mustJSON(r)
}

func (w *writer) policyValue() string {
	eu := []string{"DE", "FR", "PL", "NO", "ES", "IT"}
	w.rng.Shuffle(len(eu), func(i, j int) { eu[i], eu[j] = eu[j], eu[i] })
	return mustJSON(routing.Residency{Classes: map[string][]string{"eu": eu[:2+w.rng.IntN(4)], "apac": {"JP", "KR", "AU"}},
		UnknownCountryClass: []string{"eu", "apac", ""}[w.rng.IntN(3)]})
}

// junkValue returns a value that key refuses.
func (w *writer) junkValue(key string) string {
	junk := []string{`{`, `{"host":""}`, `{"host":"h","residency":"eu","status":"paused"}`,
		`{"targets":[{"pool":"eu-a","weight":10}]}`, `[]`, `"x"`, `{"route":""}`, `null`}
	for {
		if v := junk[w.rng.IntN(len(junk))]; !decodes(key, v) {
			return v
		}
	}
}

// decodes reports whether the agents accept value under key.
func decodes(key, value string) bool {
	_, err := routing.DecodeValue(key, []byte(value))
	return err == nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// op is one planned operation: a Txn of puts and deletes (leases granted
// first for health keys and boosts).
type op struct {
	kind string
	puts map[string]string
	ttl  map[string]int64 // key → lease TTL in seconds
	dels []string
}

// next plans a random operation.
func (w *writer) next() op {
	o := op{puts: map[string]string{}, ttl: map[string]int64{}}
	switch n := w.rng.IntN(100); {
	case n < 20:
		id := poolIDs[w.rng.IntN(len(poolIDs))]
		o.kind, o.puts["pools/"+id] = "pool", w.poolValue(id)
	case n < 44:
		name := routeIDs[w.rng.IntN(len(routeIDs))]
		o.kind, o.puts["routes/"+name] = "route", w.routeValue(name)
	case n < 50:
		o.kind = "delete"
		if w.rng.IntN(2) == 0 {
			o.dels = append(o.dels, "pools/"+poolIDs[w.rng.IntN(len(poolIDs))])
		} else {
			o.dels = append(o.dels, "routes/"+routeIDs[w.rng.IntN(len(routeIDs))])
		}
	case n < 60:
		o.kind = "txn"
		for range 2 + w.rng.IntN(4) {
			sub := w.next()
			for k, v := range sub.puts {
				if _, ok := sub.ttl[k]; !ok && !strings.HasPrefix(k, "pools/junk") {
					o.puts[k] = v
				}
			}
		}
		for _, k := range []string{"pools/" + poolIDs[w.rng.IntN(len(poolIDs))]} {
			if _, ok := o.puts[k]; !ok && w.rng.IntN(3) == 0 {
				o.dels = append(o.dels, k)
			}
		}
		o.puts[routing.EpochKey] = strconv.Itoa(1 + w.rng.IntN(1000))
	case n < 76:
		id := poolIDs[w.rng.IntN(len(poolIDs))]
		k := fmt.Sprintf("health/%s/i%d", id, w.rng.IntN(3))
		o.kind, o.puts[k], o.ttl[k] = "health", mustJSON(map[string]string{"addr": "10.0.0.1:443", "since": "2026-12-01T00:00:00Z"}), 1+w.rng.Int64N(3)
	case n < 82:
		k := fmt.Sprintf("overrides/b%d", w.rng.IntN(4))
		ov := routing.Override{Route: routeIDs[w.rng.IntN(len(routeIDs))], Reason: "suite"}
		if w.rng.IntN(2) == 0 {
			ov.Targets = w.randTargets(1 + w.rng.IntN(2))
		} else {
			ov.Attrs = map[string]string{"boost": strconv.Itoa(w.rng.IntN(9))}
		}
		if w.rng.IntN(8) == 0 {
			ov.Route = "zz-none" // a boost of a route that does not exist: skipped
		}
		o.kind, o.puts[k], o.ttl[k] = "boost", mustJSON(ov), 1+w.rng.Int64N(4)
	case n < 85:
		o.kind, o.puts["policy/residency"] = "policy", w.policyValue()
		if w.rng.IntN(4) == 0 {
			o.puts, o.dels = map[string]string{}, []string{"policy/residency"}
		}
	case n < 90:
		o.kind, o.puts[routing.EpochKey] = "epoch", strconv.Itoa(1+w.rng.IntN(1000))
	case n < 95:
		k := junkKeys[w.rng.IntN(len(junkKeys))]
		o.kind, o.puts[k] = "junk", w.junkValue(k)
	default:
		o.kind, o.dels = "junk-delete", []string{junkKeys[w.rng.IntN(len(junkKeys))]}
	}
	return o
}

// apply commits o, retrying briefly while the cluster has no leader. It
// returns false when the operation failed for good (counted, not fatal:
// the recorder, not the writer, is the reference).
func (w *writer) apply(ctx context.Context, o op) bool {
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		if err := w.commit(ctx, o); err == nil {
			w.ops++
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(50*(attempt+1)) * time.Millisecond):
		}
	}
	w.failed++
	return false
}

func (w *writer) commit(ctx context.Context, o op) error {
	for k, v := range o.puts {
		if junk := slices.Contains(junkKeys, k); decodes(k, v) == junk {
			// A generator bug: junk keys must only ever hold refused values,
			// real keys only valid ones (see the comment at the top).
			panic(fmt.Sprintf("writer: value for %s (junk key: %v) accepted by the agents: %v: %s", k, junk, !junk, v))
		}
	}
	// A second per attempt: an attempt sent to a member that cannot commit
	// (partitioned, or its leader just killed) hangs until this timeout,
	// and apply tries again; a commit takes milliseconds otherwise (tens
	// under -race on a loaded machine). With 3 s, half the writers' time
	// went to such hung attempts, not to the history. An attempt that
	// times out may still commit: the recorder, not the writer, is the
	// reference.
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var ops []clientv3.Op
	for k, v := range o.puts {
		var opts []clientv3.OpOption
		if ttl := o.ttl[k]; ttl > 0 {
			lease, err := w.cli.Grant(cctx, ttl)
			if err != nil {
				return err
			}
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		ops = append(ops, clientv3.OpPut(w.prefix+k, v, opts...))
	}
	for _, k := range o.dels {
		ops = append(ops, clientv3.OpDelete(w.prefix+k))
	}
	resp, err := w.cli.Txn(cctx).Then(ops...).Commit()
	if err != nil {
		return err
	}
	w.last = resp.Header.Revision
	return nil
}
