package watch

import (
	"context"
	"errors"

	"github.com/regiond/regiond/internal/lastgood"
	"github.com/regiond/regiond/routing"
)

// maxEarlierKeys bounds earlierGood's reads: refused keys looked up per
// list (each up to lastgood.MaxSteps reads).
const maxEarlierKeys = 100

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
// one per read (up to maxEarlierKeys × lastgood.MaxSteps). Keys not read
// are treated as compacted.
func (m *Mirror) earlierGood(ctx context.Context, skipped []routing.Skipped) map[string]routing.KV {
	var out map[string]routing.KV
	looked := 0
	for _, s := range skipped {
		if ctx.Err() != nil {
			break
		}
		kv, ok := m.state[s.Key]
		if !ok || kv.Version <= 1 || looked == maxEarlierKeys || !lastgood.Refused(kv) {
			continue // the incarnation's first value, or skipped for another reason
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

// earlierGoodOf reads kv's last good value (lastgood.Walk), each read
// within RequestTimeout, and logs how the walk ended. timedOut says a read
// got no answer in time.
func (m *Mirror) earlierGoodOf(ctx context.Context, kv routing.KV) (e routing.KV, ok, timedOut bool) {
	e, out, err := lastgood.Walk(ctx, m.cfg.Client, m.cfg.Prefix+kv.Key, kv, m.cfg.RequestTimeout)
	switch out {
	case lastgood.Found:
		m.log.Info("a refused key keeps its last good value, read from etcd's history",
			"key", kv.Key, "refused_revision", kv.ModRevision, "good_revision", e.ModRevision)
		return e, true, false
	case lastgood.Compacted:
		m.log.Warn("the last good value of a refused key is compacted away; keeping the table's own, if any", "key", kv.Key)
	case lastgood.Failed:
		m.log.Warn("could not read the last good value of a refused key", "key", kv.Key, "err", err)
		return routing.KV{}, false, errors.Is(err, context.DeadlineExceeded)
	case lastgood.Exhausted:
		m.log.Warn("no good value among the last versions of a refused key", "key", kv.Key, "versions_read", lastgood.MaxSteps)
	}
	return routing.KV{}, false, false
}
