package store

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/routing"
)

// resolveTimeouts is how long, in request timeouts, a write whose commit
// got no answer keeps asking etcd whether it applied.
const resolveTimeouts = 2

// readBack is what the fence of resolve found.
type readBack struct {
	committed bool  // audit/<E+1> is this write's record
	fenced    bool  // the fence applied: the write did not and never will
	rev       int64 // the write's revision when committed, else the fence's
	now       int64 // the epoch found when neither
}

// resolve learns whether a Txn that got no answer applied, and returns
// what a Txn that answered would have: its revision, or why it did not
// apply. It sends a fence,
//
//	If(mod_revision(epoch) == R_E) Then(epoch = E) Else(get audit/<E+1>, get epoch)
//
// If the fence applies, the epoch had not moved, so the lost Txn had not
// applied, and now it never will (it compares R_E too). Otherwise the Txn
// applied if audit/<E+1> is its record, byte for byte, and else lost to
// another write. When the fence gets no answer either, within
// resolveTimeouts request timeouts, the outcome stays unknown: an
// *OutcomeUnknownError.
func (s *Store) resolve(ctx context.Context, st *State, t *txnPlan, cause error) (int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resolveTimeouts*s.opts.RequestTimeout)
	defer cancel()
	b := backoff.New(50*time.Millisecond, time.Second)
	for {
		rb, err := s.fence(ctx, st, t)
		switch {
		case err == nil && rb.committed:
			s.log.Warn("the commit got no answer; read back: committed", "epoch", t.epoch, "revision", rb.rev, "err", cause)
			return rb.rev, nil
		case err == nil && rb.fenced:
			what := fmt.Sprintf("commit epoch %d got no answer; read back at revision %d: not applied, nothing written (a re-run is safe)", t.epoch, rb.rev)
			return 0, NothingWritten(s.rpcErr(what, cause))
		case err == nil:
			return 0, &ConflictError{Epoch: st.Epoch, Now: rb.now}
		}
		s.log.Info("read back a commit that got no answer: retrying", "epoch", t.epoch, "err", err)
		if b.Wait(ctx) != nil {
			return 0, &OutcomeUnknownError{Epoch: t.epoch, Endpoints: s.opts.Endpoints, Err: cause, ReadErr: err}
		}
	}
}

// fence sends resolve's fence once.
func (s *Store) fence(ctx context.Context, st *State, t *txnPlan) (readBack, error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	epochKey := s.ks.Epoch()
	resp, err := s.cli.Txn(rctx).If(clientv3.Compare(clientv3.ModRevision(epochKey), "=", st.EpochModRevision)).
		Then(clientv3.OpPut(epochKey, strconv.FormatInt(st.Epoch, 10))).
		Else(clientv3.OpGet(s.ks.Audit(t.epoch)), clientv3.OpGet(epochKey)).Commit()
	if err != nil {
		return readBack{}, fmt.Errorf("read back epoch %d: %w", t.epoch, err)
	}
	if resp.Succeeded {
		return readBack{fenced: true, rev: resp.Header.Revision}, nil
	}
	if kv := firstKV(resp.Responses[0]); kv != nil && bytes.Equal(kv.Value, t.audit) {
		return readBack{committed: true, rev: kv.ModRevision}, nil
	}
	rb := readBack{rev: resp.Header.Revision, now: st.Epoch + 1}
	if kv := firstKV(resp.Responses[1]); kv != nil {
		if n, ok := routing.ParseEpoch(kv.Value); ok && n != st.Epoch {
			rb.now = n
		}
	}
	return rb, nil
}
