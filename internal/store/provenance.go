package store

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// KeyWrite is what etcd and the audit trail say of one write (put) of a
// routing key: the regionctl commit that made it, with its epoch and
// audit record, or that none did (written around regionctl).
type KeyWrite struct {
	// Key is the key, relative to <root>/routing/.
	Key string
	// Revision is the write's revision: the key's mod revision after it.
	Revision int64
	// Epoch is the epoch whose commit made the write: 0 when none did
	// (Around) or when that is not known (Unknown).
	Epoch int64
	// Record is that epoch's audit record; nil when Epoch is 0 or the
	// record is no longer kept (only the newest AuditKeep are). Its
	// Rewritten is set when it is not what the commit wrote (its revision
	// is not Revision, or it was put again): what it says of who and why
	// may be the rewrite's.
	Record *AuditEntry
	// Change is Record's change of Key (nil: no Record, or one that does
	// not list Key, a rewritten record).
	Change *routing.Change
	// Around says no regionctl commit made the write: the epoch key was
	// not put in its Txn (etcdctl, a script with the operator role), so
	// no audit record says who, when or why.
	Around bool
	// Unknown says why neither a commit nor Around could be established
	// ("" when one was).
	Unknown string
}

// WriteOf says which write put the routing key rel at revision rev (its
// mod revision). Every regionctl write puts its keys, the epoch key and
// its audit record in one Txn, so the write is epoch N's commit when the
// epoch key's mod revision at rev is rev itself (its value is N), and a
// write around regionctl otherwise. When rev is compacted, the commit is
// found by the audit record whose mod revision is rev (etcd's index alone
// is searched: keys only, filtered by that revision); with none, the write
// went around regionctl, or, before the oldest record kept, is unknown.
// cur (optional) spares the reads for a key put after the epoch key's
// last commit (State.WrittenAround's). A read etcd refuses is a
// *PermissionError.
func (s *Store) WriteOf(ctx context.Context, rel string, rev int64, cur *State) (KeyWrite, error) {
	w := KeyWrite{Key: rel, Revision: rev}
	if cur != nil && cur.EpochModRevision > 0 && rev > cur.EpochModRevision {
		w.Around = true
		return w, nil
	}
	epoch, modRev, err := s.epochAt(ctx, rev)
	switch {
	case errors.Is(err, ErrCompacted):
		return s.writeOfByAudit(ctx, w)
	case err != nil:
		return w, err
	case modRev != rev || epoch == 0:
		w.Around = true
		return w, nil
	}
	w.Epoch = epoch
	key := s.ks.Audit(epoch)
	rctx, cancel := s.reqCtx(ctx)
	resp, err := s.cli.Get(rctx, key)
	cancel()
	if err != nil {
		return w, s.permErr(fmt.Sprintf("read the audit record of epoch %d (%s)", epoch, key), err, s.roles.ReadNeed(key))
	}
	if len(resp.Kvs) == 0 {
		return w, nil // no longer kept
	}
	s.setRecord(&w, resp.Kvs[0])
	return w, nil
}

// writeOfByAudit is WriteOf for a compacted revision: the audit record
// whose mod revision is w.Revision, if one is kept.
func (s *Store) writeOfByAudit(ctx context.Context, w KeyWrite) (KeyWrite, error) {
	prefix := s.ks.AuditPrefix()
	get := func(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
		return s.getAudit(ctx, key, opts...)
	}
	// Keys only: etcd answers from its index, without reading the records.
	resp, err := get(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithMinModRev(w.Revision), clientv3.WithMaxModRev(w.Revision))
	if err != nil {
		return w, err
	}
	if len(resp.Kvs) > 0 {
		key := string(resp.Kvs[0].Key)
		if resp, err = get(key); err != nil {
			return w, err
		}
		if len(resp.Kvs) > 0 && resp.Kvs[0].ModRevision == w.Revision {
			s.setRecord(&w, resp.Kvs[0])
			w.Epoch = w.Record.Epoch
			return w, nil
		}
	}
	oldest, err := get(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		return w, err
	}
	if len(oldest.Kvs) == 0 || oldest.Kvs[0].ModRevision > w.Revision {
		w.Unknown = fmt.Sprintf("revision %d is compacted and older than the oldest audit record kept", w.Revision)
		return w, nil
	}
	// Between records kept, and none of them its own: no commit wrote it
	// (or its record was put again since, which history names).
	w.Around = true
	return w, nil
}

// setRecord decodes the audit record kv into w.
func (s *Store) setRecord(w *KeyWrite, kv *mvccpb.KeyValue) {
	e, err := s.decodeAudit(string(kv.Key), kv.Value, kv.ModRevision, kv.Version)
	if err != nil {
		w.Unknown = err.Error()
		return
	}
	if e.Revision != w.Revision {
		e.Rewritten = true
	}
	w.Record = &e
	for i := range e.Changes {
		if e.Changes[i].Key == w.Key {
			w.Change = &e.Changes[i]
			break
		}
	}
}

// KeyOrigin is the write that gave a key its property, or the oldest
// write traced to find it.
type KeyOrigin struct {
	// Write is the write.
	Write KeyWrite
	// Set says the key did not have the property before Write. When
	// false, it had it before Write too, and the writes before were not
	// traced: Stopped says why.
	Set bool
	// Stopped says why the trace stopped before the write that set the
	// property ("" when Set).
	Stopped string
}

// OriginOf follows the writes of the routing key rel back from its
// current value (mod revision rev), newest first, to the one before which
// had(value) was false (a value the key did not hold: nil): the write
// that gave the key the property the caller asks about (a pool's status).
// Each write's value before it is its audit record's "before" (a commit
// whose record is sound), else the key read at the revision before it,
// which also gives the write before; at most maxWrites writes are
// followed, each a few reads (WriteOf's, and one for the value before).
func (s *Store) OriginOf(ctx context.Context, rel string, rev int64, cur *State, had func(value []byte) bool, maxWrites int) (KeyOrigin, error) {
	var o KeyOrigin
	for i := 0; ; i++ {
		w, err := s.WriteOf(ctx, rel, rev, cur)
		if err != nil {
			return o, err
		}
		o.Write = w
		if w.Record != nil && !w.Record.Rewritten && w.Change != nil && !had(beforeValue(w.Change.Before)) {
			o.Set = true
			return o, nil
		}
		prev, err := s.keyAt(ctx, rel, rev-1)
		switch {
		case errors.Is(err, ErrCompacted):
			o.Stopped = fmt.Sprintf("the history of %s before revision %d is compacted", rel, rev)
			return o, nil
		case err != nil:
			return o, err
		case prev == nil || !had(prev.Value):
			o.Set = true
			return o, nil
		case i+1 >= maxWrites:
			o.Stopped = fmt.Sprintf("only the newest %d writes of %s are traced", maxWrites, rel)
			return o, nil
		}
		rev = prev.ModRevision
	}
}

// beforeValue is an audit change's "before" as a stored value: nil for
// JSON null (the key was absent). A stored value that was not JSON is
// recorded as a JSON string, which no value's decoder takes.
func beforeValue(raw []byte) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// keyAt reads the routing key rel at revision rev: nil when it did not
// exist then, ErrCompacted when rev is compacted.
func (s *Store) keyAt(ctx context.Context, rel string, rev int64) (*mvccpb.KeyValue, error) {
	if rev < 1 {
		return nil, nil
	}
	key := s.ks.RoutingKey(rel)
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, key, clientv3.WithRev(rev))
	if errors.Is(err, rpctypes.ErrCompacted) {
		return nil, fmt.Errorf("read %s at revision %d: %w", key, rev, ErrCompacted)
	}
	if err != nil {
		return nil, s.permErr(fmt.Sprintf("read %s at revision %d", key, rev), err, s.roles.ReadNeed(key))
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0], nil
}

// HistorySearch is what SearchHistory found.
type HistorySearch struct {
	// Records are the matching records, newest first.
	Records []AuditEntry
	// Newest and Oldest are the epochs searched, newest and oldest (0, 0:
	// no audit record is kept).
	Newest, Oldest int64
	// Capped says the search stopped at its cap with older records kept
	// unsearched.
	Capped bool
	// Missing are the runs of epochs searched with no record kept, oldest
	// first: regionctl deletes only the oldest records, so these were
	// deleted around it (by hand).
	Missing []EpochRange
}

// historyPage is how many epochs SearchHistory reads per request.
const historyPage = 100

// SearchHistory reads the audit trail newest first, in pages of epochs at
// one revision, and returns the records for which match is true, until
// limit of them (0: no limit) or maxEpochs epochs back from the newest
// record (0: no cap), whichever comes first. Rewritten is set as History
// sets it.
func (s *Store) SearchHistory(ctx context.Context, match func(AuditEntry) bool, limit, maxEpochs int64) (HistorySearch, error) {
	var out HistorySearch
	prefix := s.ks.AuditPrefix()
	get := func(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
		return s.getAudit(ctx, key, opts...)
	}
	// The newest and oldest keys, from etcd's index (keys only).
	newest, err := get(prefix, append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly()}, clientv3.WithLastKey()...)...)
	if err != nil || len(newest.Kvs) == 0 {
		return out, err
	}
	rev := newest.Header.Revision
	oldest, err := get(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1), clientv3.WithRev(rev))
	if err != nil || len(oldest.Kvs) == 0 {
		return out, err
	}
	hi, err1 := s.ks.ParseAudit(string(newest.Kvs[0].Key))
	lo, err2 := s.ks.ParseAudit(string(oldest.Kvs[0].Key))
	if err1 != nil || err2 != nil {
		return out, fmt.Errorf("audit keys under %s: %w", prefix, errors.Join(err1, err2))
	}
	floor := lo
	if maxEpochs > 0 && hi-maxEpochs+1 > floor {
		floor = hi - maxEpochs + 1
		out.Capped = true
	}
	out.Newest, out.Oldest = hi, floor
	var prevRev int64 // the revision of the record read before (newer)
	first := true
	prev := hi + 1 // the epoch of the record read before
	for top := hi; top >= floor; top -= historyPage {
		bottom := max(floor, top-historyPage+1)
		resp, err := get(s.ks.Audit(bottom), clientv3.WithRange(s.ks.Audit(top+1)), clientv3.WithRev(rev))
		if err != nil {
			return out, err
		}
		for i := len(resp.Kvs) - 1; i >= 0; i-- {
			kv := resp.Kvs[i]
			if n, err := s.ks.ParseAudit(string(kv.Key)); err == nil {
				if n < prev-1 {
					out.Missing = append([]EpochRange{{n + 1, prev - 1}}, out.Missing...) // oldest first
				}
				prev = n
			}
			e, err := s.decodeAudit(string(kv.Key), kv.Value, kv.ModRevision, kv.Version)
			if err != nil {
				s.log.Warn("skip audit record", "key", string(kv.Key), "err", err)
				continue
			}
			// Newest first: each record was committed before the next
			// epoch's.
			if first {
				e.Rewritten = e.Rewritten || s.pastItsCommit(ctx, e)
				first = false
			} else if e.Revision > prevRev {
				e.Rewritten = true
			}
			prevRev = e.Revision
			if match(e) {
				out.Records = append(out.Records, e)
				if limit > 0 && int64(len(out.Records)) >= limit {
					out.Oldest = e.Epoch
					out.Capped = false
					return out, nil
				}
			}
		}
	}
	if prev > floor {
		out.Missing = append([]EpochRange{{floor, prev - 1}}, out.Missing...)
	}
	return out, nil
}

// getAudit reads key (under the audit prefix) with opts, bounded by a
// request timeout; a refusal names the audit prefix and the grant.
func (s *Store) getAudit(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	prefix := s.ks.AuditPrefix()
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, key, opts...)
	if err != nil {
		return nil, s.permErr("read the audit records "+prefix, err, s.roles.ReadNeed(prefix))
	}
	return resp, nil
}
