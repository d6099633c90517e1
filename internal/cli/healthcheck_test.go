package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// TestHealthCheckWithoutHeartbeatsIsChecked: turning on health_check for
// pools no heartbeat serves makes them unhealthy for the agents; the write
// that would leave countries without an eligible pool that way is refused
// (exit 1, naming the pools as unhealthy) unless --force, and allowed
// once one of them has a live health key.
func TestHealthCheckWithoutHeartbeatsIsChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	const warn = "regionctl: warning: pool %s has no live health key: with --health-check the agents count it down once their grace window ends"
	if r := e.must(ExitOK, "pool", "set", "eu-central", "--health-check"); !strings.Contains(r.stderr, fmt.Sprintf(warn, "eu-central")) {
		t.Fatalf("health_check on a pool without heartbeats, other pools serving its countries: %s; want a warning", r)
	}
	rev, n := e.fingerprint()
	r := e.run("pool", "set", "eu-west", "--health-check")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "would have no eligible pool") ||
		!strings.Contains(r.stderr, "pool-unhealthy:eu-west (health_check, no live health key") ||
		!strings.Contains(r.stderr, "pool-unhealthy:eu-central") || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("health_check on the last EU pool without heartbeats: %s; want exit 1 naming the lost countries and the unhealthy pools", r)
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatal("the refused write wrote")
	}

	// A live health key for eu-central: its pool is eligible, the write
	// is not refused.
	lease, err := testClient.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	defer testClient.Revoke(context.Background(), lease.ID)
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey(routing.HealthKey("eu-central", "fra-1")),
		`{"addr":"10.0.0.1:443"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if r := e.must(ExitOK, "pool", "set", "eu-west", "--health-check"); !strings.Contains(r.stderr, fmt.Sprintf(warn, "eu-west")) {
		t.Fatalf("health_check on eu-west without heartbeats: %s; want a warning", r)
	}
	e.must(ExitOK, "pool", "set", "eu-central", "--health-check=false", "--force")
	if r := e.must(ExitOK, "pool", "set", "eu-central", "--health-check"); len(otherWarnings(r.stderr)) > 0 {
		t.Fatalf("health_check on a pool with a live health key: %s; want no warning", r)
	}
	r = e.must(ExitOK, "resolve", "DE")
	if !strings.Contains(r.stdout, "eu-central") {
		t.Fatalf("resolve DE with eu-central's heartbeat: %s", r)
	}
}

// TestHealthKeyCountsWhateverItsValue: a health key is a live instance
// whatever its value, as the agents count it; the eligibility check counts
// it too. It used to count only values that decode, so a pool alive by a
// key holding {"addr":42} was unhealthy for the check alone: a drain the
// agents could serve was refused, and a drain of that last pool passed.
func TestHealthKeyCountsWhateverItsValue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "eu-central", "--health-check", "--force")
	lease, err := testClient.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	defer testClient.Revoke(context.Background(), lease.ID)
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey(routing.HealthKey("eu-central", "fra-1")),
		`{"addr":42}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	e.must(ExitOK, "pool", "drain", "eu-west")
	e.must(ExitOK, "pool", "drain", "eu-north") // eu-central serves: its key is live
	if r := e.must(ExitOK, "resolve", "DE"); !strings.Contains(r.stdout, "eu-central") {
		t.Fatalf("resolve DE: %s; want eu-central, alive by its health key", r)
	}
	r := e.run("pool", "drain", "eu-central")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "would have no eligible pool") {
		t.Fatalf("drain of the last EU pool alive by a health key: %s; want exit 1 naming the lost countries", r)
	}
}
