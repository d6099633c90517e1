package watch

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// Bounds of earlierGood's reads: refused keys looked up per list, and
// earlier versions read per key.
const (
	maxEarlierKeys  = 100
	maxEarlierSteps = 16
)

// earlierGood reads, for each listed key whose value is refused, the newest
// good value written before it to the same incarnation of the key, from
// etcd's history (a Get at the revision before each refused write). An
// agent updated event by event kept that value as the key's last good one;
// one that relists after missing events, or starts again, finds it here,
// so both serve the same. History that was compacted away is not there:
// the key then keeps the table's own last good value of that incarnation,
// if any, and a warning says so.
//
// The listed table is published after these reads, so the first read that
// gets no answer within RequestTimeout ends them: an etcd that stops
// answering after the list holds the table back by one timeout, not by
// one per read (up to maxEarlierKeys × maxEarlierSteps). Keys not read
// are treated as compacted.
func (m *Mirror) earlierGood(ctx context.Context, skipped []routing.Skipped) map[string]routing.KV {
	var out map[string]routing.KV
	looked := 0
	for _, s := range skipped {
		if ctx.Err() != nil {
			break
		}
		kv, ok := m.state[s.Key]
		if !ok || kv.Version <= 1 || looked == maxEarlierKeys {
			continue // the incarnation's first value: nothing was written before it
		}
		if k, err := routing.ParseKey(kv.Key); err != nil || k.Kind == routing.KindHealth {
			continue // health values are never decoded: no last good value
		}
		if _, err := routing.DecodeValue(kv.Key, kv.Value); err == nil {
			continue // skipped for another reason (an override's missing route)
		}
		looked++
		e, ok, timedOut := m.earlierGoodOf(ctx, kv)
		if ok {
			if out == nil {
				out = map[string]routing.KV{}
			}
			out[kv.Key] = e
		}
		if timedOut {
			m.log.Warn("etcd did not answer a read of a refused key's history in time; the rest keep the table's own last good value, if any",
				"timeout", m.cfg.RequestTimeout, "keys_read", looked)
			break
		}
	}
	return out
}

// earlierGoodOf walks kv's key back through history from the write before
// kv, within its incarnation, to the first value that decodes, each read
// within RequestTimeout. timedOut says a read got no answer in time.
func (m *Mirror) earlierGoodOf(ctx context.Context, kv routing.KV) (e routing.KV, ok, timedOut bool) {
	at := kv.ModRevision - 1
	for range maxEarlierSteps {
		gctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
		resp, err := m.cfg.Client.Get(gctx, m.cfg.Prefix+kv.Key, clientv3.WithRev(at))
		timedOut = gctx.Err() == context.DeadlineExceeded
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrCompacted):
			m.log.Warn("the last good value of a refused key is compacted away; keeping the table's own, if any",
				"key", kv.Key, "revision", at)
			return routing.KV{}, false, false
		case err != nil:
			m.log.Warn("could not read the last good value of a refused key", "key", kv.Key, "revision", at, "err", err)
			return routing.KV{}, false, timedOut
		case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != kv.CreateRevision:
			return routing.KV{}, false, false
		}
		y := resp.Kvs[0]
		e := routing.KV{Key: kv.Key, Value: y.Value, ModRevision: y.ModRevision, CreateRevision: y.CreateRevision, Version: y.Version}
		if _, err := routing.DecodeValue(e.Key, e.Value); err == nil {
			m.log.Info("a refused key keeps its last good value, read from etcd's history",
				"key", kv.Key, "refused_revision", kv.ModRevision, "good_revision", e.ModRevision)
			return e, true, false
		}
		if y.Version <= 1 {
			return routing.KV{}, false, false
		}
		at = y.ModRevision - 1
	}
	m.log.Warn("no good value among the last versions of a refused key", "key", kv.Key, "versions_read", maxEarlierSteps)
	return routing.KV{}, false, false
}
