// Package fleettest puts the example fleet (examples/routing.yaml) into a
// real etcd for integration tests, the way regionctl apply would store it,
// and holds what the cross-checks of the PHP and JS readers with Go share:
// tables of the fleet with drained, down, unhealthy and boosted pools
// (Scenarios), the headers and keys of a sweep, the decoding of the test
// drivers' sweeps and their decision-by-decision comparison with
// routing.Table.Resolve (Expect.Compare), and the JS driver's runner (SweepJS).
package fleettest

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// Path returns the path of examples/routing.yaml.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "routing.yaml")
}

// Config parses the example fleet.
func Config(t testing.TB) *routing.Config {
	t.Helper()
	b, err := os.ReadFile(Path())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := routing.ParseConfig(b)
	if err != nil {
		t.Fatalf("parse %s: %v", Path(), err)
	}
	return cfg
}

// Load writes the example fleet under routingPrefix ("<root>/routing/") in
// one Txn with epoch 1, and returns the revision of the write.
func Load(t testing.TB, cli *clientv3.Client, routingPrefix string) int64 {
	t.Helper()
	vals, err := Config(t).Values()
	if err != nil {
		t.Fatal(err)
	}
	ops := []clientv3.Op{clientv3.OpPut(routingPrefix+routing.EpochKey, "1")}
	for k, v := range vals {
		ops = append(ops, clientv3.OpPut(routingPrefix+k, string(v)))
	}
	resp, err := cli.Txn(context.Background()).Then(ops...).Commit()
	if err != nil {
		t.Fatalf("load the example fleet: %v", err)
	}
	return resp.Header.Revision
}
