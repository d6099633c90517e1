package store

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/routing"
)

// errReplyLost is the network fault the interceptors inject: what a client
// sees when the connection breaks before the reply arrives.
var errReplyLost = status.Error(codes.Unavailable, "connection reset: reply lost (injected network fault)")

// fault decides, for each unary call, whether to send it to etcd and
// whether to drop its reply.
type fault func(method string, req any) (send, dropReply bool)

// faultClient returns a client of srv whose unary calls go through f: a
// real network fault between a real client and a real etcd (a call that is
// sent really applies), not a mock.
func faultClient(t *testing.T, srv *devetcd.Server, f fault) *clientv3.Client {
	t.Helper()
	ic := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		send, drop := f(method, req)
		if !send {
			return errReplyLost
		}
		err := invoke(ctx, method, req, reply, cc, opts...)
		if err == nil && drop {
			return errReplyLost
		}
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(ic)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

const txnMethod = "/etcdserverpb.KV/Txn"

// boostPlan puts boost id on route KR for ttl.
func boostPlan(id string, ttl time.Duration) func(context.Context, *State) (*Plan, error) {
	return func(context.Context, *State) (*Plan, error) {
		ov := routing.Override{Route: "KR", Targets: []routing.Target{{Pool: "kr-music", Weight: 100}}, Reason: "test"}
		return &Plan{PutOverrides: []OverridePut{{ID: id, Override: ov, TTL: ttl}}}, nil
	}
}

// boostLease returns the lease of a live boost and its remaining TTL; 0, 0
// when the boost key is gone.
func boostLease(ctx context.Context, t *testing.T, cli *clientv3.Client, s *Store, id string) (clientv3.LeaseID, time.Duration) {
	t.Helper()
	resp, err := cli.Get(ctx, s.Keyspace().RoutingKey(routing.OverrideKey(id)))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	ttl, err := cli.TimeToLive(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	return lease, time.Duration(ttl.TTL) * time.Second
}

// faultEnv is the fault tests' set-up: an etcd, a client and a store of
// it, the example config written.
func faultEnv(t *testing.T) (*devetcd.Server, *clientv3.Client, *Store, context.Context) {
	t.Helper()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	s := newStore(t, cli, Options{})
	ctx := context.Background()
	put(ctx, t, s, exampleConfig(t))
	return srv, cli, s, ctx
}

// onNextTxn is a fault that acts on the next Txn only, while armed.
func onNextTxn(armed *atomic.Bool, send, drop bool) fault {
	return func(method string, _ any) (bool, bool) {
		if method == txnMethod && armed.CompareAndSwap(true, false) {
			return send, drop
		}
		return true, false
	}
}

// TestLostReplyOfCommittedExtend: a boost extend whose Txn applied but
// whose reply was lost is read back as committed: the boost lives on under
// its new lease and the write reports its real epoch and revision.
func TestLostReplyOfCommittedExtend(t *testing.T) {
	t.Parallel()
	srv, cli, s, ctx := faultEnv(t)
	if _, err := s.Write(ctx, WriteRequest{Command: "boost", Build: boostPlan("kr-1", time.Hour)}); err != nil {
		t.Fatal(err)
	}
	oldLease, _ := boostLease(ctx, t, cli, s, "kr-1")

	var armed atomic.Bool
	armed.Store(true)
	faulty := New(faultClient(t, srv, onNextTxn(&armed, true, true)), s.Keyspace(), Options{})
	res, err := faulty.Write(ctx, WriteRequest{Command: "boost extend", Build: boostPlan("kr-1", 3*time.Hour)})
	if err != nil || armed.Load() {
		t.Fatalf("extend with a lost reply: %v (fault used: %v)", err, !armed.Load())
	}
	rec, err := s.AuditRecord(ctx, 3)
	if err != nil || res.Epoch != 3 || res.Revision != rec.Revision || rec.Command != "boost extend" {
		t.Fatalf("result epoch %d revision %d, audit %+v %v", res.Epoch, res.Revision, rec, err)
	}
	lease, ttl := boostLease(ctx, t, cli, s, "kr-1")
	if lease == 0 || lease == oldLease || ttl <= time.Hour {
		t.Fatalf("boost after the extend: lease %x (old %x), ttl %s: the committed extend was undone", lease, oldLease, ttl)
	}
	if old, err := cli.TimeToLive(ctx, oldLease); err != nil || old.TTL > 0 {
		t.Fatalf("old lease still live (ttl %d, %v)", old.TTL, err)
	}
}

// TestLostRequestNotCommitted: a boost whose Txn never reached etcd is
// read back as not applied: the fence makes sure it never will be, its
// lease is revoked, the error says nothing was written, and the next write
// goes through.
func TestLostRequestNotCommitted(t *testing.T) {
	t.Parallel()
	srv, cli, s, ctx := faultEnv(t)

	var armed atomic.Bool
	armed.Store(true)
	faulty := New(faultClient(t, srv, onNextTxn(&armed, false, false)), s.Keyspace(), Options{})
	_, err := faulty.Write(ctx, WriteRequest{Command: "boost", Build: boostPlan("kr-1", time.Hour)})
	var ue *UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "not applied, nothing written") || !ue.NothingWritten ||
		strings.Count(err.Error(), "nothing") != 1 {
		t.Fatalf("want unreachable, nothing written (said once): %v (NothingWritten %v)", err, ue != nil && ue.NothingWritten)
	}
	if lease, _ := boostLease(ctx, t, cli, s, "kr-1"); lease != 0 {
		t.Fatalf("boost written by a write reported as not applied (lease %x)", lease)
	}
	leases, err := cli.Leases(ctx)
	if err != nil || len(leases.Leases) != 0 {
		t.Fatalf("leases left behind: %v %v", leases, err)
	}
	st, err := s.Load(ctx)
	if err != nil || st.Epoch != 1 {
		t.Fatalf("epoch after the fence: %d %v", st.Epoch, err)
	}
	if res, err := faulty.Write(ctx, WriteRequest{Command: "boost", Build: boostPlan("kr-1", time.Hour)}); err != nil || res.Epoch != 2 {
		t.Fatalf("write after the fence: %+v %v", res, err)
	}
}

// TestOutcomeUnknownKeepsLease: when neither the commit nor the read-back
// gets an answer, the error says the outcome is unknown and the new lease
// is not revoked (here the Txn did apply: revoking would end the boost).
func TestOutcomeUnknownKeepsLease(t *testing.T) {
	t.Parallel()
	srv, cli, s, ctx := faultEnv(t)

	var txns atomic.Int32
	f := func(method string, _ any) (bool, bool) {
		if method != txnMethod {
			return true, false
		}
		first := txns.Add(1) == 1
		return first, first // the commit applies, its reply and every read-back are lost
	}
	faulty := New(faultClient(t, srv, f), s.Keyspace(), Options{RequestTimeout: 200 * time.Millisecond})
	_, err := faulty.Write(ctx, WriteRequest{Command: "boost", Build: boostPlan("kr-1", time.Hour)})
	var oe *OutcomeUnknownError
	if !errors.As(err, &oe) || oe.Epoch != 2 || !strings.Contains(err.Error(), "regionctl history 2") || txns.Load() < 2 {
		t.Fatalf("want outcome unknown for epoch 2 after a read-back: %v (%d Txns)", err, txns.Load())
	}
	if strings.Contains(NothingWritten(err).Error(), "nothing") { // never said of an unknown outcome
		t.Fatalf("an unknown outcome said nothing was written: %v", err)
	}
	if lease, ttl := boostLease(ctx, t, cli, s, "kr-1"); lease == 0 || ttl <= 0 {
		t.Fatalf("the applied boost lost its lease: lease %x ttl %s", lease, ttl)
	}
}

// TestFleetReadErrors: a status read that fails is an error, not a fleet
// at epoch 0.
func TestFleetReadErrors(t *testing.T) {
	t.Parallel()
	srv, _, s, ctx := faultEnv(t)
	epochKey := s.Keyspace().Epoch()
	f := func(_ string, req any) (bool, bool) {
		r, ok := req.(*pb.RangeRequest)
		return !ok || string(r.Key) != epochKey || len(r.RangeEnd) != 0, false
	}
	faulty := New(faultClient(t, srv, f), s.Keyspace(), Options{RequestTimeout: 300 * time.Millisecond})
	fleet, err := faulty.Fleet(ctx)
	var ue *UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "read "+epochKey+" at revision") {
		t.Fatalf("Fleet with the epoch read failing: %+v %v", fleet, err)
	}
	if fleet, err := s.Fleet(ctx); err != nil || fleet.Epoch != 1 {
		t.Fatalf("Fleet: %+v %v", fleet, err)
	}
}

// TestMalformedEpochMessages: an epoch key holding no epoch is refused
// with the fix the audit trail allows: its newest epoch; none when it
// holds no record; and, when the trail cannot be read or its newest key is
// no record, no epoch guessed (it said "etcdctl put … 0" then, which the
// audit guard refuses in turn).
func TestMalformedEpochMessages(t *testing.T) {
	const key = "/r/routing/epoch"
	for _, tc := range []struct {
		name string
		e    EpochResetError
		want string
	}{
		{"records", EpochResetError{AuditKey: "/r/audit/0000000012", Newest: 12}, "The audit trail goes up to epoch 12 (/r/audit/0000000012). A retry cannot fix this: restore the epoch key, then re-run: etcdctl put " + key + " 12"},
		{"none", EpochResetError{}, "No audit record was found under the audit prefix, so no write of regionctl's came before: restore the key, then re-run: etcdctl put " + key + " 0"},
		{"unreadable", EpochResetError{auditErr: errors.New("permission denied")}, "The audit trail could not be read (permission denied), so the epoch to restore is not known: regionctl history names the newest"},
		{"stray", EpochResetError{AuditKey: "/r/audit/junk"}, "The newest key under the audit prefix, /r/audit/junk, is not an audit record, so the epoch to restore is not known: remove it (etcdctl del /r/audit/junk)"},
	} {
		tc.e.EpochKey, tc.e.Malformed = key, []byte("abc")
		got := tc.e.Error()
		if !strings.HasPrefix(got, `refused, nothing written: the epoch key `+key+` holds "abc", not an epoch`) || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %s\nwant %q", tc.name, got, tc.want)
		}
		if tc.name != "records" && tc.name != "none" && strings.Contains(got, "etcdctl put "+key+" 0") {
			t.Errorf("%s: %s\nguesses epoch 0", tc.name, got)
		}
	}
}
