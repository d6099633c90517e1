package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/etcddiag"
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
	Changes []routing.Change
	// NoOp: the state held what was asked, nothing to write; DryRun:
	// asked to write nothing (set for a no-op too).
	NoOp, DryRun bool
	// Forced, for a plan with Force, names the countries the write leaves
	// with no eligible pool, and why: what a write without Force refuses
	// ("" for none).
	Forced string
	// ResidencyChanged, for a plan with AllowResidencyChange, names the
	// codes the write takes out of their residency class, and the routes
	// that may then send their viewers to pools of another residency:
	// what a write without it refuses ("" for none).
	ResidencyChanged string
	// Attempts is how many times the write was built and tried: 1, plus
	// one per conflict retried.
	Attempts int
	// Limits, for a dry run, names the etcd limits its commit would pass
	// at their defaults (a cluster may have raised them): etcd refuses a
	// Txn of more than --max-txn-ops operations (128) or one request of
	// more than --max-request-bytes (1.5 MiB). "" when within both.
	Limits string
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

// writeOnce reads, builds and commits the write once. Until commit sends
// the Txn, nothing can be written: an etcd unreachable meanwhile is said
// so (NothingWritten).
func (s *Store) writeOnce(ctx context.Context, req WriteRequest) (*Result, error) {
	st, err := s.Load(ctx)
	if err != nil {
		return nil, NothingWritten(err)
	}
	plan, err := req.Build(ctx, st)
	if err != nil {
		return nil, NothingWritten(err)
	}
	ops, eff, err := s.prepare(st, plan)
	if err != nil {
		return nil, NothingWritten(err)
	}
	res := &Result{PrevEpoch: st.Epoch, Epoch: st.Epoch, Revision: st.Revision, Changes: changes(ops), State: st,
		Forced: eff.forced, ResidencyChanged: eff.residency}
	switch {
	case len(ops) == 0:
		res.NoOp, res.DryRun = true, req.DryRun
		return res, nil
	case req.DryRun:
		if err := s.auditGuard(ctx, st); err != nil {
			return nil, NothingWritten(err)
		}
		if err := s.AlarmRaised(ctx, "dry run"); err != nil {
			return nil, NothingWritten(err)
		}
		res.DryRun, res.Epoch = true, st.Epoch+1
		if t, err := s.buildTxn(st, ops, nil, req, res.Changes); err == nil {
			res.Limits = t.overDefaults()
		}
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
// committed, revokes the leases of replaced or cancelled boosts. New leases
// are revoked only when the Txn certainly did not apply; when its outcome
// stays unknown they are left to end with their TTL.
func (s *Store) commit(ctx context.Context, st *State, ops []op, req WriteRequest, chg []routing.Change) (int64, error) {
	leases, err := s.grantLeases(ctx, ops)
	if err != nil { // before the Txn: a lease granted unanswered ends with its TTL
		return 0, NothingWritten(err)
	}
	t, err := s.buildTxn(st, ops, leases, req, chg)
	if err != nil {
		s.revokeAll(ctx, leases)
		return 0, NothingWritten(err)
	}
	rev, err := s.runTxn(ctx, st, ops, t)
	var unknown *OutcomeUnknownError
	switch {
	case errors.As(err, &unknown):
		return 0, err
	case err != nil:
		s.revokeAll(ctx, leases)
		return 0, err
	}
	for _, o := range ops {
		if o.oldLease != 0 {
			s.revoke(ctx, clientv3.LeaseID(o.oldLease))
		}
	}
	return rev, nil
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
			s.revokeAll(ctx, leases)
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

func (s *Store) revokeAll(ctx context.Context, leases map[string]clientv3.LeaseID) {
	for _, id := range leases {
		s.revoke(ctx, id)
	}
}

// auditGuard checks, for a dry run, what the Txn's audit guard would: an
// audit record of epoch E+1 or later (the epoch key reset by hand) refuses
// the write, so the dry run does not promise it.
func (s *Store) auditGuard(ctx context.Context, st *State) error {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.ks.Audit(st.Epoch+1), clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.ks.AuditPrefix())),
		clientv3.WithLimit(1), clientv3.WithKeysOnly(), clientv3.WithRev(st.Revision))
	if err != nil {
		return s.permErr("read the audit records after epoch "+strconv.FormatInt(st.Epoch, 10), err, s.roles.ReadNeed(s.ks.AuditPrefix()))
	}
	if len(resp.Kvs) > 0 {
		return s.epochReset(ctx, st, st.EpochModRevision == 0, string(resp.Kvs[0].Key))
	}
	return nil
}

// AlarmRaised refuses what, a dry run or a diff, while an etcd alarm
// refuses writes (its NOSPACE alarm: it would promise a write etcd
// refuses). Listing the alarms needs no permission beyond a login; a
// failure to list is not a refusal (the write itself would tell).
func (s *Store) AlarmRaised(ctx context.Context, what string) error {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.AlarmList(rctx)
	if err != nil {
		s.log.Debug(what+": could not list etcd's alarms", "err", err)
		return nil
	}
	for _, a := range resp.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE {
			return fmt.Errorf("%s: etcd would refuse the write, nothing written (member %x): %s", what, a.MemberID, etcddiag.NoSpaceHint)
		}
	}
	return nil
}
