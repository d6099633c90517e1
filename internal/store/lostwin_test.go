package store

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestLostRequestWhileAnotherWriteCommits: a Txn that never reached etcd,
// while another write committed the next epoch meanwhile, is read back as
// lost to that write (a *ConflictError: nothing written, a re-run is
// safe): the audit record at its epoch is the other write's, not its own.
// Taking any record at that epoch for its own would report a write that
// never happened as committed, at the other write's revision.
func TestLostRequestWhileAnotherWriteCommits(t *testing.T) {
	t.Parallel()
	srv, cli, s, ctx := faultEnv(t)

	var armed atomic.Bool
	armed.Store(true)
	other := func(method string, _ any) (bool, bool) {
		if method == txnMethod && armed.CompareAndSwap(true, false) {
			// The request is lost; another operator's write commits.
			if _, err := s.Write(ctx, WriteRequest{Command: "boost", Build: boostPlan("other", time.Hour)}); err != nil {
				t.Errorf("the other write: %v", err)
			}
			return false, false
		}
		return true, false
	}
	faulty := New(faultClient(t, srv, other), s.Keyspace(), Options{})
	res, err := faulty.Write(ctx, WriteRequest{Command: "boost", Build: boostPlan("kr-1", time.Hour)})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("a lost write whose epoch another write took: %+v, %v; want a *ConflictError (nothing written)", res, err)
	}
	if lease, _ := boostLease(ctx, t, cli, s, "kr-1"); lease != 0 {
		t.Fatalf("boost kr-1 written by a write reported as lost (lease %x)", lease)
	}
	if rec, err := s.AuditRecord(ctx, 2); err != nil || rec.Command != "boost" {
		t.Fatalf("audit record of epoch 2: %+v %v; want the other write's", rec, err)
	}
}
