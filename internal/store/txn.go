package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/regiond/regiond/routing"
)

// txnPlan is the one guarded transaction of a write, built before it is
// sent so that its audit record can be recognized when reading back.
type txnPlan struct {
	epoch int64  // the epoch it writes (E+1)
	audit []byte // its audit record, as written
	cmps  []clientv3.Cmp
	then  []clientv3.Op
}

// buildTxn builds the guarded Txn of a write: its compares are the epoch's
// mod revision, the absence of any audit record of epoch E+1 or later (an
// epoch key reset by hand must not overwrite the audit trail), no config
// key (pools/, routes/, policy/) written since the state was read (a hand
// edit meanwhile, with no epoch of its own, was overwritten unseen, and
// the audit record named the value read as the one replaced) and the mod
// revision of each replaced or cancelled boost.
func (s *Store) buildTxn(st *State, ops []op, leases map[string]clientv3.LeaseID, req WriteRequest, chg []routing.Change) (*txnPlan, error) {
	epoch := st.Epoch + 1
	audit, err := json.Marshal(routing.Audit{Epoch: epoch, At: s.opts.Now().UTC().Format(time.RFC3339),
		User: req.User, Host: req.Host, Reason: req.Reason, Command: req.Command, Changes: chg})
	if err != nil {
		return nil, fmt.Errorf("encode audit record: %w", err)
	}
	epochKey, auditKey := s.ks.Epoch(), s.ks.Audit(epoch)
	t := &txnPlan{epoch: epoch, audit: audit, then: make([]clientv3.Op, 0, len(ops)+3)}
	t.cmps = []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(epochKey), "=", st.EpochModRevision),
		clientv3.Compare(clientv3.CreateRevision(auditKey), "=", 0).WithRange(clientv3.GetPrefixRangeEnd(s.ks.AuditPrefix())),
	}
	for _, kind := range configKinds {
		dir := s.ks.RoutingKey(kind.String() + "/")
		t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(dir), "<", st.Revision+1).WithPrefix())
	}
	for _, o := range ops {
		key := s.ks.RoutingKey(o.rel)
		if o.guard {
			t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", o.modRev))
		}
		switch {
		case o.after == nil:
			t.then = append(t.then, clientv3.OpDelete(key))
		case leases[o.rel] != 0:
			t.then = append(t.then, clientv3.OpPut(key, string(o.after), clientv3.WithLease(leases[o.rel])))
		default:
			t.then = append(t.then, clientv3.OpPut(key, string(o.after)))
		}
	}
	t.then = append(t.then, clientv3.OpPut(epochKey, strconv.FormatInt(epoch, 10)), clientv3.OpPut(auditKey, string(audit)))
	if cut := epoch - s.opts.AuditKeep + 1; cut > 1 {
		t.then = append(t.then, clientv3.OpDelete(s.ks.Audit(0), clientv3.WithRange(s.ks.Audit(cut))))
	}
	return t, nil
}

// configKinds are the key kinds of the config, whose keys a write's Txn
// guards as read.
var configKinds = []routing.Kind{routing.KindPool, routing.KindRoute, routing.KindPolicy}

// runTxn sends the Txn and returns its revision. An error that may have
// come after etcd applied it (no answer) is resolved by reading back.
func (s *Store) runTxn(ctx context.Context, st *State, ops []op, t *txnPlan) (int64, error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(rctx).If(t.cmps...).Then(t.then...).
		Else(append([]clientv3.Op{clientv3.OpGet(s.ks.Epoch()), s.opFirstAuditFrom(t.epoch)}, s.opsWrittenSince(st)...)...).Commit()
	switch {
	case err != nil && isPermissionDenied(err):
		return 0, s.writeErr(fmt.Sprintf("commit epoch %d", t.epoch), err, s.roles.CommitNeeds()...)
	case err != nil && tooLarge(err):
		return 0, fmt.Errorf("commit epoch %d: refused, nothing written: %w (%s)", t.epoch, err, t.limitHint())
	case err != nil && notApplied(err):
		return 0, NothingWritten(s.rpcErr(fmt.Sprintf("commit epoch %d: refused by etcd, nothing written", t.epoch), err))
	case err != nil:
		return s.resolve(ctx, st, t, err)
	case !resp.Succeeded:
		return 0, s.guardFailed(ctx, st, ops, t, resp)
	}
	return resp.Header.Revision, nil
}

// etcd's defaults for the size of one transaction: --max-txn-ops and
// --max-request-bytes; and the client's own limit on a request it sends.
const (
	defaultMaxTxnOps       = 128
	defaultMaxRequestBytes = 1536 * 1024
	clientMaxSendBytes     = 2 * 1024 * 1024
)

// ops is the operation count etcd checks against --max-txn-ops: that of
// the Txn's longest list.
func (t *txnPlan) ops() int { return max(len(t.cmps), len(t.then)) }

// bytes is the Txn request's encoded size.
func (t *txnPlan) bytes() int {
	r := &pb.TxnRequest{}
	for i := range t.cmps {
		r.Compare = append(r.Compare, t.cmps[i].GetCompare())
	}
	for _, o := range t.then {
		r.Success = append(r.Success, opRequest(o))
	}
	return proto.Size(r)
}

// opRequest encodes a put or a delete of the Txn as etcd receives it
// (only its size is used).
func opRequest(o clientv3.Op) *pb.RequestOp {
	if o.IsPut() {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: o.KeyBytes(), Value: o.ValueBytes()}}}
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: o.KeyBytes(), RangeEnd: o.RangeBytes()}}}
}

// overDefaults names the limits at their etcd defaults the Txn would
// exceed, "" for none.
func (t *txnPlan) overDefaults() string {
	var over []string
	if n := t.ops(); n > defaultMaxTxnOps {
		over = append(over, fmt.Sprintf("%d operations in one transaction, over etcd's default --max-txn-ops (%d)", n, defaultMaxTxnOps))
	}
	if n := t.bytes(); n > defaultMaxRequestBytes {
		over = append(over, fmt.Sprintf("%d bytes in one request, over etcd's default --max-request-bytes (%d)", n, defaultMaxRequestBytes))
	}
	return strings.Join(over, "; ")
}

// limitHint says what a Txn refused for its size was, and what to do.
func (t *txnPlan) limitHint() string {
	return fmt.Sprintf("the commit holds %d operations and %d bytes; etcd refuses more than its --max-txn-ops operations (default %d) "+
		"or --max-request-bytes (default %d), and regionctl sends at most %d bytes: raise the cluster's limits on every member, "+
		"or apply the config in parts (apply without --prune keeps what a file does not name: pools first, then routes); a re-run as it is fails alike",
		t.ops(), t.bytes(), defaultMaxTxnOps, defaultMaxRequestBytes, clientMaxSendBytes)
}

// tooLarge reports whether err refuses a Txn for its size: etcd's
// "too many operations" or "request is too large", or the client's own
// refusal to send a message over its limit (nothing was sent).
func tooLarge(err error) bool {
	if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrGRPCTooManyOps) ||
		errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
		return true
	}
	return status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "trying to send message larger than max")
}

// opFirstAuditFrom gets the first key under the audit prefix at or after
// the audit record of epoch (in key order, which is epoch order): a key
// that the Txn's audit guard refuses.
func (s *Store) opFirstAuditFrom(epoch int64) clientv3.Op {
	return clientv3.OpGet(s.ks.Audit(epoch), clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.ks.AuditPrefix())),
		clientv3.WithLimit(1), clientv3.WithKeysOnly())
}

// notApplied reports whether a Txn error certainly means the Txn did not
// apply: an answer of etcd refusing it (too many operations, no space,
// permission denied, …), or the client's "no connection" before sending.
// Any other error (no answer, a lost reply) may have come after etcd
// applied it.
func notApplied(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal, codes.DataLoss:
			return false
		}
		return true
	}
	desc := rpctypes.ErrorDesc(err)
	return desc == "there is no address available" || desc == "there is no connection available"
}

// guardFailed explains a Txn whose guard failed: the epoch moved or a
// guarded boost changed (a *ConflictError), or an audit record of the new
// epoch or a later one exists while the epoch did not move (an
// *EpochResetError: the epoch key was reset by hand).
func (s *Store) guardFailed(ctx context.Context, st *State, ops []op, t *txnPlan, resp *clientv3.TxnResponse) error {
	epochKV := firstKV(resp.Responses[0])
	var epochRev int64
	if epochKV != nil {
		epochRev = epochKV.ModRevision
	}
	if audit := firstKV(resp.Responses[1]); audit != nil && epochRev == st.EpochModRevision {
		return s.epochReset(ctx, st, epochKV == nil, string(audit.Key))
	}
	if _, ok := routing.ParseEpoch(epochKV.GetValue()); epochKV != nil && !ok && epochRev != st.EpochModRevision {
		// Put by hand to a value that is no epoch: refused as a re-run
		// would be, with the etcdctl put that restores it (exit 1), not
		// a conflict whose "re-run" meets that refusal (the diff review).
		e := s.epochReset(ctx, st, false, "")
		e.Malformed = epochKV.Value
		return e
	}
	// The epoch key changed with no record of the next epoch: written
	// around regionctl (put forward, put again, deleted), no write of it.
	// (Put back below the epoch read, it is named as the epoch going back:
	// as likely another cluster or history answering.)
	byHand := epochRev != st.EpochModRevision && firstKV(resp.Responses[1]) == nil && !epochBelow(epochKV, st.Epoch)
	if byHand && epochKV == nil {
		// Deleted: a re-run would be refused by the audit guard while
		// records are kept; say what that re-run would, the etcdctl put
		// that restores the key (exit 1), not "re-run" (3).
		if r := s.epochReset(ctx, st, true, ""); r.Newest > 0 {
			return r
		}
	}
	ce := s.conflict(st, ops, epochKV, byHand)
	if ce.Epoch == ce.Now && !byHand {
		// The epoch did not move: a guarded key did. A config key written
		// since the read is in the Txn's own answer (its Else).
		for _, r := range resp.Responses[2:] {
			if kv := firstKV(r); kv != nil {
				rel, _ := s.ks.Rel(string(kv.Key))
				ce.Key, ce.Outside = rel, true
				break
			}
		}
	}
	return ce
}

// opsWrittenSince are the reads, one per config kind, of the first key
// written since st was read: a Txn whose config compares failed names
// the hand edit it met from its own answer (a second read could fail,
// and blame a boost).
func (s *Store) opsWrittenSince(st *State) []clientv3.Op {
	ops := make([]clientv3.Op, 0, len(configKinds))
	for _, kind := range configKinds {
		dir := s.ks.RoutingKey(kind.String() + "/")
		ops = append(ops, clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithMinModRev(st.Revision+1), clientv3.WithKeysOnly(), clientv3.WithLimit(1)))
	}
	return ops
}

// epochReset returns the *EpochResetError of a write refused by its audit
// guard, naming the newest key under the audit prefix (found is the one
// the guard met, named when the newest cannot be read).
func (s *Store) epochReset(ctx context.Context, st *State, missing bool, found string) *EpochResetError {
	e := &EpochResetError{EpochKey: s.ks.Epoch(), Epoch: st.Epoch, Missing: missing, AuditKey: found}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.ks.AuditPrefix(), append(clientv3.WithLastKey(), clientv3.WithKeysOnly())...)
	if err != nil {
		e.auditErr = err
	} else if len(resp.Kvs) > 0 {
		e.AuditKey = string(resp.Kvs[0].Key)
	}
	e.Newest, _ = s.ks.ParseAudit(e.AuditKey)
	return e
}

// epochBelow reports whether the epoch key kv holds an epoch below
// epoch.
func epochBelow(kv *mvccpb.KeyValue, epoch int64) bool {
	if kv == nil {
		return false
	}
	n, ok := routing.ParseEpoch(kv.Value)
	return ok && n < epoch
}

// conflict describes a failed guard: the epoch moved, or a guarded boost
// changed under the same epoch (it expired). epochKV is the epoch key as
// the Txn found it (nil: absent); byHand says it was written around
// regionctl (no record of the next epoch).
func (s *Store) conflict(st *State, ops []op, epochKV *mvccpb.KeyValue, byHand bool) *ConflictError {
	if byHand {
		ce := &ConflictError{Epoch: st.Epoch, Now: st.Epoch, EpochByHand: true, EpochDeleted: epochKV == nil}
		if epochKV != nil {
			ce.EpochValue = string(epochKV.Value)
		}
		return ce
	}
	now := st.Epoch
	if epochKV != nil {
		now, _ = routing.ParseEpoch(epochKV.Value)
		if epochKV.ModRevision != st.EpochModRevision && now == st.Epoch {
			now = st.Epoch + 1 // rewritten by hand; still a conflict
		}
	}
	ce := &ConflictError{Epoch: st.Epoch, Now: now}
	if now == st.Epoch {
		for _, o := range ops {
			if o.guard {
				ce.Key = o.rel
				break
			}
		}
	}
	return ce
}

// firstKV returns the first key of a Txn's range response; nil when none.
func firstKV(r *pb.ResponseOp) *mvccpb.KeyValue {
	rr := r.GetResponseRange()
	if rr == nil || len(rr.Kvs) == 0 {
		return nil
	}
	return rr.Kvs[0]
}
