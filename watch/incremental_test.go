package watch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// TestMirrorEqualsCompileOfEtcd: the mirror updates its table event by
// event (routing.Update); after a random sequence of puts, deletes,
// multi-key transactions and lease-bound health keys coming and going,
// its table equals a table compiled afresh from a Get at the same
// revision. Health is compared an hour ahead, when every grace window is
// over for both.
func TestMirrorEqualsCompileOfEtcd(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	m := startMirror(t, cli, watch.Config{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	pools := []string{"eu-central", "eu-west", "eu-north", "us-east", "apac-tokyo", "latam-sao"}
	routes := []string{"PL", "DE", "US", "JP", "BR", "ZA", "AD", "apac-general", "_default"}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	ops := []func() clientv3.Op{
		func() clientv3.Op {
			a, b := pick(pools), pick(pools)
			w := rng.IntN(101)
			if a == b { // every value valid: the fresh compile has no last good value to keep
				return clientv3.OpPut(prefix+routing.RouteKey(pick(routes)), fmt.Sprintf(
					`{"targets":[{"pool":%q,"weight":100}],"fallback":["eu-general"]}`, a))
			}
			return clientv3.OpPut(prefix+routing.RouteKey(pick(routes)), fmt.Sprintf(
				`{"targets":[{"pool":%q,"weight":%d},{"pool":%q,"weight":%d}],"fallback":["eu-general"]}`, a, w, b, 100-w))
		},
		func() clientv3.Op {
			r := pick(routes)
			if r == routing.DefaultRoute {
				r = "ZA"
			}
			return clientv3.OpDelete(prefix + routing.RouteKey(r))
		},
		func() clientv3.Op {
			id := pick(pools)
			res := map[bool]string{true: "eu", false: "us"}[id[:3] == "eu-"]
			if id == "apac-tokyo" || id == "latam-sao" {
				res = map[string]string{"apac-tokyo": "apac", "latam-sao": "latam"}[id]
			}
			return clientv3.OpPut(prefix+routing.PoolKey(id), fmt.Sprintf(`{"host":"%s.example.net:443","residency":%q,"status":%q,"health_check":%v}`,
				id, res, pick([]string{"active", "active", "draining"}), rng.IntN(4) > 0))
		},
		func() clientv3.Op {
			return clientv3.OpPut(prefix+fmt.Sprintf("health/%s/i%d", pick(pools), rng.IntN(3)), `{"addr":"10.0.0.1:443"}`, clientv3.WithLease(lease.ID))
		},
		func() clientv3.Op {
			return clientv3.OpDelete(prefix + fmt.Sprintf("health/%s/i%d", pick(pools), rng.IntN(3)))
		},
		func() clientv3.Op {
			return clientv3.OpPut(prefix+routing.OverrideKey(fmt.Sprint("boost-", rng.IntN(2))),
				fmt.Sprintf(`{"route":%q,"targets":[{"pool":%q,"weight":100}]}`, pick(routes), pick(pools)))
		},
		func() clientv3.Op {
			return clientv3.OpDelete(prefix + routing.OverrideKey(fmt.Sprint("boost-", rng.IntN(2))))
		},
		func() clientv3.Op { return clientv3.OpPut(prefix+routing.EpochKey, fmt.Sprint(rng.IntN(1000))) },
	}
	ops = append(ops, ops[3], ops[4]) // health keys come and go often
	compared, unhealthy := 0, 0
	for step := 1; step <= 200; step++ {
		var batch []clientv3.Op
		seen := map[string]bool{}
		for n := rng.IntN(3) + 1; n > 0; n-- {
			op := ops[rng.IntN(len(ops))]()
			if k := string(op.KeyBytes()); !seen[k] { // a txn may not touch a key twice
				seen[k] = true
				batch = append(batch, op)
			}
		}
		if _, err := cli.Txn(ctx).Then(batch...).Commit(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if step%10 != 0 {
			continue
		}
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		rev := resp.Header.Revision
		tb := waitUntil(t, m, fmt.Sprintf("revision %d", rev), func(tb *routing.Table) bool { return tb.Revision() >= rev })
		if tb.Revision() != rev {
			continue // something else moved on; compare at the next step
		}
		var kvs []routing.KV
		for _, kv := range resp.Kvs {
			kvs = append(kvs, routing.KV{Key: string(kv.Key[len(prefix):]), Value: kv.Value, ModRevision: kv.ModRevision})
		}
		later := time.Now().Add(time.Hour)
		fresh := routing.Compile(rev, kvs, nil, routing.CompileOptions{Now: time.Now(), ClusterID: resp.Header.ClusterId})
		for _, sk := range fresh.Skipped() {
			if !strings.HasSuffix(sk.Error, "the override is not applied") {
				t.Fatalf("step %d: the generator wrote a refused value: %v", step, sk)
			}
		}
		a, _ := tb.JSON(later)
		b, _ := fresh.JSON(later)
		if !bytes.Equal(a, b) {
			t.Fatalf("step %d, revision %d: the mirror's table differs from a fresh compile of etcd's state: %s", step, rev, jsonDiff(a, b))
		}
		compared++
		for _, id := range fresh.PoolIDs() {
			if p, _ := fresh.Pool(id); p.HealthCheck && p.Instances == 0 {
				unhealthy++
			}
		}
	}
	if compared < 15 || unhealthy < 10 {
		t.Fatalf("compared at %d revisions only, seeing %d pools without health keys", compared, unhealthy)
	}
}

// jsonDiff names the first path at which two JSON documents differ.
func jsonDiff(a, b []byte) string {
	var va, vb any
	json.Unmarshal(a, &va)
	json.Unmarshal(b, &vb)
	var walk func(path string, x, y any) string
	walk = func(path string, x, y any) string {
		mx, okx := x.(map[string]any)
		my, oky := y.(map[string]any)
		if !okx || !oky {
			if fmt.Sprint(x) != fmt.Sprint(y) {
				return fmt.Sprintf("%s: %v vs %v", path, x, y)
			}
			return ""
		}
		for _, k := range slices.Sorted(maps.Keys(mx)) {
			if d := walk(path+"."+k, mx[k], my[k]); d != "" {
				return d
			}
		}
		for k := range my {
			if _, ok := mx[k]; !ok {
				return fmt.Sprintf("%s.%s: missing vs %v", path, k, my[k])
			}
		}
		return ""
	}
	return walk("", va, vb)
}
