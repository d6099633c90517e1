package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/routing"
)

// WriteRequest is one operator write.
type WriteRequest struct {
	// Command, Reason, User and Host go into the audit record.
	Command, Reason, User, Host string
	// Build returns the proposed change from the current state. It is
	// called again on every retry, with the newly read state.
	Build func(ctx context.Context, cur *State) (*Plan, error)
	// DryRun validates and computes the changes but writes nothing.
	DryRun bool
	// Retry is how many times a conflicting write is re-read, re-built and
	// re-tried before a *ConflictError is returned.
	Retry int
}

// Result is the outcome of a write.
type Result struct {
	// PrevEpoch is the epoch the write was built on; Epoch is the new one
	// (equal to PrevEpoch for a no-op; the would-be epoch for a dry run).
	PrevEpoch, Epoch int64
	// Revision is the etcd revision of the commit (of the read for a no-op
	// or a dry run).
	Revision int64
	// Changes are the keys written, relative to <root>/routing/, in order.
	Changes  []routing.Change
	NoOp     bool
	DryRun   bool
	Attempts int
	// State is the state the write was built on.
	State *State
}

// Write reads the state, builds and validates the proposal and commits it
// in one Txn guarded by the epoch. See the package doc.
func (s *Store) Write(ctx context.Context, req WriteRequest) (*Result, error) {
	for attempt := 1; ; attempt++ {
		res, err := s.writeOnce(ctx, req)
		if res != nil {
			res.Attempts = attempt
		}
		var ce *ConflictError
		if !errors.As(err, &ce) || attempt > req.Retry {
			return res, err
		}
		s.log.Info("write conflict, retrying", "attempt", attempt, "epoch_was", ce.Epoch, "epoch_now", ce.Now)
		if err := backoff.Sleep(ctx, retryDelay(attempt)); err != nil {
			return nil, err
		}
	}
}

// retryDelay is a jittered delay growing with the attempt, capped at 1s.
func retryDelay(attempt int) time.Duration {
	d := min(time.Duration(attempt)*20*time.Millisecond, time.Second)
	return d/2 + rand.N(d/2+1)
}

func (s *Store) writeOnce(ctx context.Context, req WriteRequest) (*Result, error) {
	st, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	plan, err := req.Build(ctx, st)
	if err != nil {
		return nil, err
	}
	ops, err := s.prepare(st, plan)
	if err != nil {
		return nil, err
	}
	res := &Result{PrevEpoch: st.Epoch, Epoch: st.Epoch, Revision: st.Revision, Changes: changes(ops), State: st}
	switch {
	case len(ops) == 0:
		res.NoOp = true
		return res, nil
	case req.DryRun:
		res.DryRun, res.Epoch = true, st.Epoch+1
		return res, nil
	}
	rev, err := s.commit(ctx, st, ops, req, res.Changes)
	if err != nil {
		return nil, err
	}
	res.Epoch, res.Revision = st.Epoch+1, rev
	return res, nil
}

// commit grants the leases of new boosts, runs the guarded Txn and, once it
// succeeded, revokes the leases of replaced or cancelled boosts.
func (s *Store) commit(ctx context.Context, st *State, ops []op, req WriteRequest, chg []routing.Change) (int64, error) {
	leases, err := s.grantLeases(ctx, ops)
	if err != nil {
		return 0, err
	}
	rev, err := s.txn(ctx, st, ops, leases, req, chg)
	if err != nil {
		for _, id := range leases {
			s.revoke(ctx, id)
		}
		return 0, err
	}
	for _, o := range ops {
		if o.oldLease != 0 {
			s.revoke(ctx, clientv3.LeaseID(o.oldLease))
		}
	}
	return rev, nil
}

// txn runs the one guarded transaction of a write.
func (s *Store) txn(ctx context.Context, st *State, ops []op, leases map[string]clientv3.LeaseID, req WriteRequest, chg []routing.Change) (int64, error) {
	epoch := st.Epoch + 1
	audit, err := json.Marshal(routing.Audit{Epoch: epoch, At: s.opts.Now().UTC().Format(time.RFC3339),
		User: req.User, Host: req.Host, Reason: req.Reason, Command: req.Command, Changes: chg})
	if err != nil {
		return 0, fmt.Errorf("encode audit record: %w", err)
	}
	epochKey := s.ks.Epoch()
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(epochKey), "=", st.EpochModRevision)}
	then := make([]clientv3.Op, 0, len(ops)+3)
	for _, o := range ops {
		key := s.ks.RoutingKey(o.rel)
		if o.guard {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", o.modRev))
		}
		switch {
		case o.after == nil:
			then = append(then, clientv3.OpDelete(key))
		case leases[o.rel] != 0:
			then = append(then, clientv3.OpPut(key, string(o.after), clientv3.WithLease(leases[o.rel])))
		default:
			then = append(then, clientv3.OpPut(key, string(o.after)))
		}
	}
	then = append(then, clientv3.OpPut(epochKey, strconv.FormatInt(epoch, 10)), clientv3.OpPut(s.ks.Audit(epoch), string(audit)))
	if cut := epoch - s.opts.AuditKeep + 1; cut > 1 {
		then = append(then, clientv3.OpDelete(s.ks.Audit(0), clientv3.WithRange(s.ks.Audit(cut))))
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(rctx).If(cmps...).Then(then...).Else(clientv3.OpGet(epochKey)).Commit()
	if err != nil {
		// The Txn may have been applied even though no answer came back:
		// say so (a re-run is safe, the epoch guard refuses a double write).
		return 0, s.rpcErr(fmt.Sprintf("commit epoch %d: outcome unknown, check `regionctl history` before re-running", epoch), err)
	}
	if !resp.Succeeded {
		return 0, s.conflict(st, ops, resp)
	}
	return resp.Header.Revision, nil
}

// conflict describes a failed guard: the epoch moved, or a guarded boost
// changed under the same epoch (it expired).
func (s *Store) conflict(st *State, ops []op, resp *clientv3.TxnResponse) error {
	now := st.Epoch
	if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
		now, _ = strconv.ParseInt(string(rr.Kvs[0].Value), 10, 64)
		if rr.Kvs[0].ModRevision != st.EpochModRevision && now == st.Epoch {
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

// grantLeases grants one lease per boost put, keyed by relative key.
func (s *Store) grantLeases(ctx context.Context, ops []op) (map[string]clientv3.LeaseID, error) {
	leases := map[string]clientv3.LeaseID{}
	for _, o := range ops {
		if o.after == nil || o.ttl <= 0 {
			continue
		}
		secs := int64((o.ttl + time.Second - 1) / time.Second)
		rctx, cancel := s.reqCtx(ctx)
		resp, err := s.cli.Grant(rctx, secs)
		cancel()
		if err != nil {
			for _, id := range leases {
				s.revoke(ctx, id)
			}
			return nil, s.rpcErr(fmt.Sprintf("grant %ds lease for %s", secs, o.rel), err)
		}
		leases[o.rel] = resp.ID
	}
	return leases, nil
}

// revoke revokes a lease, logging failures (an unrevoked lease still ends
// with its TTL).
func (s *Store) revoke(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := s.reqCtx(context.WithoutCancel(ctx))
	defer cancel()
	if _, err := s.cli.Revoke(rctx, id); err != nil {
		s.log.Warn("revoke lease", "lease", fmt.Sprintf("%x", int64(id)), "err", err)
	}
}
