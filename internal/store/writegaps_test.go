package store

// Tests of the write path that a mutation review found no test held: the
// guards of the commit, the audit trail's pruning, lease rounding, etcd's
// limits, the read-back of an answer that may follow a commit, and the
// rebuild of a config from the audit records.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/routing"
)

// TestEpochPutForwardByHandMeanwhile: the epoch key put forward by hand
// between the read and the commit: a conflict that says so, and the
// epoch key is not moved back.
func TestEpochPutForwardByHandMeanwhile(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg) // epoch 1
	err := writeEditedMeanwhile(ctx, t, s, func() {
		if _, err := cli.Put(ctx, s.Keyspace().Epoch(), "6"); err != nil {
			t.Fatal(err)
		}
	})
	var ce *ConflictError
	if !errors.As(err, &ce) || !ce.EpochByHand || !strings.Contains(err.Error(), `the epoch key was put to "6" (from 1) around regionctl (etcdctl, a script: no audit record of epoch 2)`) {
		t.Errorf("epoch put forward 1 -> 6 by hand meanwhile: %v; want a conflict naming the hand edit (not 5 writes history would list)", err)
	}
	resp, _ := cli.Get(ctx, s.Keyspace().Epoch())
	if string(resp.Kvs[0].Value) != "6" {
		t.Errorf("epoch key after the write: %s, want 6 (not moved back)", resp.Kvs[0].Value)
	}
}

// TestEpochPutAgainByHandMeanwhile: the epoch key put again by hand with
// the same value meanwhile: a conflict that says so.
func TestEpochPutAgainByHandMeanwhile(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg) // epoch 1
	err := writeEditedMeanwhile(ctx, t, s, func() {
		if _, err := cli.Put(ctx, s.Keyspace().Epoch(), "1"); err != nil {
			t.Fatal(err)
		}
	})
	var ce *ConflictError
	if !errors.As(err, &ce) || !ce.EpochByHand || !strings.Contains(err.Error(), `the epoch key was put again ("1") around regionctl`) {
		t.Errorf("the epoch key put again by hand with its value meanwhile: %v; want a conflict naming the hand edit (not an epoch 2 history would not know)", err)
	}
}

// writeEditedMeanwhile makes a write (an attr of pool eu-west) whose first
// build runs edit, as a hand edit between its read and its commit, and
// returns its error.
func writeEditedMeanwhile(ctx context.Context, t *testing.T, s *Store, edit func()) error {
	t.Helper()
	builds := 0
	_, err := s.Write(ctx, WriteRequest{Command: "x", Build: func(_ context.Context, cur *State) (*Plan, error) {
		if builds++; builds == 1 {
			edit()
		}
		return &Plan{Config: withPool(cur.Config, "eu-west", "n", fmt.Sprint(builds))}, nil
	}})
	return err
}

// TestBoostEndedMeanwhileIsNotPutAgain: a boost whose lease ends between the read and the commit of its
// extend is not put again (resurrected) unseen.
func TestBoostEndedMeanwhileIsNotPutAgain(t *testing.T) {
	t.Parallel()
	ctx, cli, s, _ := storeEnv(t, Options{})
	put(ctx, t, s, exampleConfig(t))
	if _, err := s.Write(ctx, WriteRequest{Command: "boost", Build: boostPlan("kr", time.Hour)}); err != nil {
		t.Fatal(err)
	}
	lease, _ := boostLease(ctx, t, cli, s, "kr")
	builds := 0
	_, err := s.Write(ctx, WriteRequest{Command: "boost extend", Build: func(ctx context.Context, cur *State) (*Plan, error) {
		if builds++; builds == 1 {
			if _, err := cli.Revoke(ctx, lease); err != nil { // its lease ends
				t.Fatal(err)
			}
		}
		return boostPlan("kr", 2*time.Hour)(ctx, cur)
	}})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Key != routing.OverrideKey("kr") {
		t.Errorf("extend of a boost that ended meanwhile: %v, want a conflict naming overrides/kr", err)
	}
	if l, _ := boostLease(ctx, t, cli, s, "kr"); l != 0 {
		t.Errorf("boost kr put again after its lease ended")
	}
}

// TestAuditKeepBoundary: the newest AuditKeep are kept from the first write past them.
func TestAuditKeepBoundary(t *testing.T) {
	t.Parallel()
	ctx, _, s, cfg := storeEnv(t, Options{AuditKeep: 5})
	for i := range 6 {
		put(ctx, t, s, withPool(cfg, "eu-west", "n", fmt.Sprint(i)))
	}
	recs, _ := s.History(ctx, 0)
	var epochs []int64
	for _, r := range recs {
		epochs = append(epochs, r.Epoch)
	}
	if fmt.Sprint(epochs) != "[6 5 4 3 2]" {
		t.Errorf("after 6 writes, keep 5: %v", epochs)
	}
}

// TestAuditPruneAfterEpochJump: the oldest records are all deleted beyond the newest AuditKeep,
// not one per write (an epoch key put forward by hand).
func TestAuditPruneAfterEpochJump(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{AuditKeep: 5})
	for i := range 3 {
		put(ctx, t, s, withPool(cfg, "eu-west", "n", fmt.Sprint(i)))
	}
	if _, err := cli.Put(ctx, s.Keyspace().Epoch(), "20"); err != nil {
		t.Fatal(err)
	}
	put(ctx, t, s, withPool(cfg, "eu-west", "n", "x"))
	recs, _ := s.History(ctx, 0)
	var epochs []int64
	for _, r := range recs {
		epochs = append(epochs, r.Epoch)
	}
	if fmt.Sprint(epochs) != "[21]" {
		t.Errorf("epoch 21, keep 5: records %v, want [21] (1-3 older than the newest 5)", epochs)
	}
}

// TestBoostLeaseRoundedUp: a boost's lease is granted in whole seconds rounded up.
func TestBoostLeaseRoundedUp(t *testing.T) {
	t.Parallel()
	ctx, cli, s, _ := storeEnv(t, Options{})
	put(ctx, t, s, exampleConfig(t))
	if _, err := s.Write(ctx, WriteRequest{Command: "boost", Build: boostPlan("kr", 10500*time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	lease, _ := boostLease(ctx, t, cli, s, "kr")
	ttl, err := cli.TimeToLive(ctx, lease)
	if err != nil || ttl.GrantedTTL != 11 {
		t.Errorf("boost of 10.5s: lease granted %ds (%v), want 11", ttl.GrantedTTL, err)
	}
}

// TestTxnLimitsBoundary: a Txn of exactly etcd's default --max-txn-ops (128) is within it.
func TestTxnLimitsBoundary(t *testing.T) {
	t.Parallel()
	ctx, _, s, _ := storeEnv(t, Options{})
	for _, tc := range []struct {
		pools int
		over  bool
	}{{125, false}, {126, true}} {
		var b strings.Builder
		b.WriteString("pools:\n")
		for i := range tc.pools {
			fmt.Fprintf(&b, "  p%03d: {host: p%03d.example.net, residency: eu, status: active}\n", i, i)
		}
		b.WriteString("routes:\n  _default: {targets: [{pool: p000, weight: 100}]}\n")
		cfg, err := routing.ParseConfig([]byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Write(ctx, WriteRequest{DryRun: true, Build: func(context.Context, *State) (*Plan, error) { return &Plan{Config: cfg}, nil }})
		if err != nil || (res.Limits != "") != tc.over {
			t.Errorf("dry run of %d pools (%d changes): limits %q, %v", tc.pools, len(res.Changes), res.Limits, err)
		}
	}
}

// TestEtcdTimeoutIsReadBack: "etcdserver: request timed out" (Unavailable, from etcd) after
// the Txn was sent may have applied: it is read back.
func TestEtcdTimeoutIsReadBack(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	s := newStore(t, cli, Options{})
	ctx := context.Background()
	put(ctx, t, s, exampleConfig(t))
	var armed atomic.Bool
	armed.Store(true)
	ic := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoke(ctx, method, req, reply, cc, opts...)
		if err == nil && method == txnMethod && armed.CompareAndSwap(true, false) {
			return rpctypes.ErrGRPCTimeout
		}
		return err
	}
	fc, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(ic)}})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	faulty := New(fc, s.Keyspace(), Options{})
	res, err := faulty.Write(ctx, WriteRequest{Command: "x", Build: func(_ context.Context, cur *State) (*Plan, error) {
		return &Plan{Config: withPool(cur.Config, "eu-west", "n", "1")}, nil
	}})
	if err != nil || res.Epoch != 2 {
		t.Errorf("a commit answered 'request timed out' that applied: %v, want it read back as committed (epoch 2)", err)
	}
}

// TestBadBoostFixedMeanwhileIsNotDeleted: cancelling a boost key whose value does not decode does not delete
// a value put there meanwhile unseen.
func TestBadBoostFixedMeanwhileIsNotDeleted(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)
	key := s.Keyspace().RoutingKey(routing.OverrideKey("bad"))
	if _, err := cli.Put(ctx, key, "{"); err != nil {
		t.Fatal(err)
	}
	good := `{"route":"KR","targets":[{"pool":"kr-music","weight":100}],"expires_at":"2099-01-01T00:00:00Z"}`
	builds := 0
	_, err := s.Write(ctx, WriteRequest{Command: "boost cancel bad", Build: func(_ context.Context, cur *State) (*Plan, error) {
		if builds++; builds == 1 {
			if _, err := cli.Put(ctx, key, good); err != nil {
				t.Fatal(err)
			}
		}
		return &Plan{DeleteOverrides: []string{"bad"}}, nil
	}})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Key != routing.OverrideKey("bad") {
		t.Errorf("cancel of a bad boost fixed meanwhile: %v, want a conflict", err)
	}
	if resp, _ := cli.Get(ctx, key); len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != good {
		t.Errorf("the value put meanwhile was deleted")
	}
}

// TestBrokenBoostDoesNotRefuse: a live boost already broken by the current config does not refuse
// an unrelated config write.
func TestBrokenBoostDoesNotRefuse(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)
	key := s.Keyspace().RoutingKey(routing.OverrideKey("broken"))
	if _, err := cli.Put(ctx, key, `{"route":"KR","targets":[{"pool":"nope","weight":100}],"expires_at":"2099-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Load(ctx); st == nil || st.Overrides["broken"].Override.Route != "KR" {
		t.Fatalf("set-up: the broken boost is not loaded as live")
	}
	if _, err := s.Write(ctx, WriteRequest{Command: "x", Build: func(_ context.Context, cur *State) (*Plan, error) {
		return &Plan{Config: withPool(cur.Config, "eu-west", "n", "1")}, nil
	}}); err != nil {
		t.Errorf("a write beside a boost already broken: %v", err)
	}
}

// TestLiveHealthCounts: a pool with health_check and a live health key is not counted
// unhealthy by the write's eligibility check.
func TestLiveHealthCounts(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	c := cfg.Clone()
	for _, id := range []string{"eu-west", "eu-central"} {
		p := c.Pools[id]
		p.HealthCheck = true
		c.Pools[id] = p
	}
	put(ctx, t, s, c, func(r *WriteRequest) {
		r.Build = func(context.Context, *State) (*Plan, error) { return &Plan{Config: c, Prune: true, Force: true}, nil }
	})
	if _, err := cli.Put(ctx, s.Keyspace().RoutingKey(routing.HealthKey("eu-west", "i-1")), `{"addr":"10.0.0.1:443"}`); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(checkedWithoutHealth(st, st.Config)); got != "[eu-central]" {
		t.Errorf("pools with health_check and no live health key: %s, want [eu-central]", got)
	}
}

// TestRebuildThroughRewrittenRefuses: a rebuild through a record put again after its commit refuses.
func TestRebuildThroughRewrittenRefuses(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)
	put(ctx, t, s, withPool(cfg, "eu-west", "v", "2"))
	res := put(ctx, t, s, withPool(cfg, "eu-west", "v", "3"))
	key := s.Keyspace().Audit(2)
	resp, _ := cli.Get(ctx, key)
	if _, err := cli.Put(ctx, key, string(resp.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	resp, _ = cli.Get(ctx, "x")
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	_ = res
	cur, _ := s.Load(ctx)
	if _, _, err := s.ConfigAt(ctx, 1, cur); err == nil || !strings.Contains(err.Error(), "put again after its commit") {
		t.Errorf("rebuild of 1 through a rewritten record 2: %v, want a refusal", err)
	}
}

// TestRebuildIgnoresBoosts: a rebuild leaves boosts alone: the cancel of a boost key that did
// not decode does not stop it.
func TestRebuildIgnoresBoosts(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg) // 1
	if _, err := cli.Put(ctx, s.Keyspace().RoutingKey(routing.OverrideKey("bad")), "{"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, WriteRequest{Command: "boost cancel bad", Build: func(context.Context, *State) (*Plan, error) {
		return &Plan{DeleteOverrides: []string{"bad"}}, nil
	}}); err != nil { // 2
		t.Fatal(err)
	}
	res := put(ctx, t, s, withPool(cfg, "eu-west", "v", "3")) // 3
	if _, err := cli.Compact(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	cur, _ := s.Load(ctx)
	if _, _, err := s.ConfigAt(ctx, 1, cur); err != nil {
		t.Errorf("rebuild of 1 through a cancelled bad boost: %v", err)
	}
}

// TestEpochDeletedMeanwhileIsRefused: the epoch key deleted by hand
// between the read and the commit, with audit records kept: refused (an
// *EpochResetError, exit 1) naming the etcdctl put that restores it, as a
// re-run would be, not a conflict whose "re-run" meets that refusal; an
// epoch key put again as "1\n" (etcdctl put KEY < file) is "put again".
func TestEpochDeletedMeanwhileIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg) // epoch 1
	err := writeEditedMeanwhile(ctx, t, s, func() {
		if _, err := cli.Put(ctx, s.Keyspace().Epoch(), "1\n"); err != nil {
			t.Fatal(err)
		}
	})
	if !strings.Contains(fmt.Sprint(err), `the epoch key was put again ("1\n") around regionctl`) {
		t.Errorf("the epoch key put again as 1 and a newline meanwhile: %v; want it named as put again", err)
	}
	err = writeEditedMeanwhile(ctx, t, s, func() {
		if _, err := cli.Delete(ctx, s.Keyspace().Epoch()); err != nil {
			t.Fatal(err)
		}
	})
	var re *EpochResetError
	if !errors.As(err, &re) || !re.Missing || !strings.Contains(err.Error(), "etcdctl put "+s.Keyspace().Epoch()+" 1") {
		t.Errorf("the epoch key deleted meanwhile: %v; want an *EpochResetError naming etcdctl put KEY 1", err)
	}
}

// TestEpochPutToNoEpochMeanwhileIsRefused: the epoch key put by hand to a
// value that is no epoch ("-3") between the read and the commit: refused
// as the re-run would be (an *EpochResetError naming the etcdctl put that
// restores it), not a conflict saying "re-run", nor the epoch going back
// (the diff review). A value with spaces around an epoch is the epoch.
func TestEpochPutToNoEpochMeanwhileIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg) // epoch 1
	for _, bad := range []string{"-3", "9007199254740992"} {
		err := writeEditedMeanwhile(ctx, t, s, func() {
			if _, err := cli.Put(ctx, s.Keyspace().Epoch(), bad); err != nil {
				t.Fatal(err)
			}
		})
		var re *EpochResetError
		if !errors.As(err, &re) || string(re.Malformed) != bad || !strings.Contains(err.Error(), "etcdctl put "+s.Keyspace().Epoch()+" 1") {
			t.Errorf("the epoch key put to %q meanwhile: %v; want an *EpochResetError naming etcdctl put KEY 1", bad, err)
		}
		if _, err := cli.Put(ctx, s.Keyspace().Epoch(), "1"); err != nil { // restored, as the error says
			t.Fatal(err)
		}
	}
	err := writeEditedMeanwhile(ctx, t, s, func() {
		if _, err := cli.Put(ctx, s.Keyspace().Epoch(), " 7\n"); err != nil {
			t.Fatal(err)
		}
	})
	var ce *ConflictError
	if !errors.As(err, &ce) || !ce.EpochByHand || !strings.Contains(err.Error(), `the epoch key was put to " 7\n" (from 1) around regionctl`) {
		t.Errorf("the epoch key put forward to \" 7\\n\" meanwhile: %v; want a conflict naming the hand edit", err)
	}
}
