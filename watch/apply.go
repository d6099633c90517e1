package watch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// drain applies a watch response and every response already queued behind
// it, then compiles one table for all of them: under a burst of writes the
// mirror compiles once per backlog, not once per revision. Each revision
// is still applied whole. It returns a reason when the watch must be
// replaced.
func (m *Mirror) drain(wch clientv3.WatchChan, resp clientv3.WatchResponse, ok bool) string {
	began := time.Now()
	dirty, advanced, confirmed := false, false, false
	why := ""
	responses, events := 0, len(m.pending)
	for {
		if !ok {
			why = ReasonClosed
			break
		}
		var c change
		responses++
		why, c = m.handle(resp)
		dirty = dirty || c == changed
		advanced = advanced || c == advancedOnly
		confirmed = confirmed || c == confirmedOnly
		if why != "" {
			break
		}
		select {
		case resp, ok = <-wch:
			continue
		default:
		}
		break
	}
	switch {
	case why == ReasonOutOfOrder || why == ReasonCluster:
	case dirty:
		events = len(m.pending) - events
		m.recompile()
		m.markSyncedAt(began) // current as of the responses, once served
		took := time.Since(began)
		m.metrics.apply.Observe(took.Seconds())
		m.announce()
		if m.log.Enabled(context.Background(), slog.LevelDebug) {
			m.log.Debug("applied", "responses", responses, "events", events, "revision", m.applied, "took", took, "with_write", time.Since(began))
		}
	case advanced:
		// Synced first: a Status that shows the later revision shows the
		// time it was confirmed (the state is the same, so the table
		// served is current as of now either way).
		m.markSynced()
		m.advance(m.applied)
	case confirmed:
		m.markSynced()
	}
	return why
}

// change is what a watch response did to the state.
type change int

const (
	unchanged     change = iota
	advancedOnly         // a progress notification: same state, later revision
	confirmedOnly        // a progress notification at the applied revision: the state is current
	changed              // events applied
)

// handle applies one watch response to the state; it reports whether the
// state changed, and a reason when the watch must be replaced.
func (m *Mirror) handle(resp clientv3.WatchResponse) (string, change) {
	if resp.Err() != nil {
		return m.watchError(resp), unchanged
	}
	if resp.Canceled {
		return ReasonClosed, unchanged
	}
	if id := resp.Header.GetClusterId(); id != 0 && id != m.clusterID {
		m.log.Warn("watch response from another etcd cluster than the list", "cluster_id", fmt.Sprintf("%x", id))
		return ReasonCluster, unchanged
	}
	if resp.Created {
		return "", unchanged // a creation is answered once, to open
	}
	if resp.IsProgressNotify() {
		m.progressUnanswered = 0
		if m.progressIgnored {
			m.progressIgnored = false
			m.log.Info("progress notification received: sending progress requests again")
		}
		// Every event up to the header revision has been delivered.
		if h := resp.Header.Revision; h > m.applied {
			m.applied = h
			return "", advancedOnly
		}
		// Current, but marked so by drain only once the table served holds
		// the state: events before it in the same drain (etcd answers a
		// progress request at its revision, often queued behind the
		// events of that revision) are not compiled yet.
		return "", confirmedOnly
	}
	return m.applyEvents(resp.Events)
}

// applyEvents applies the events of one watch response to the state.
func (m *Mirror) applyEvents(events []*clientv3.Event) (string, change) {
	last := m.applied
	n := 0
	for _, ev := range events {
		r := ev.Kv.ModRevision
		if len(ev.Kv.Key) == len(m.cfg.Prefix) {
			continue // the bare prefix: no key of the state (see firstKey)
		}
		if r <= m.lastEvent {
			m.metrics.dropped.Inc() // a duplicate
			continue
		}
		if r <= m.applied {
			// Newer than every event seen, yet at or below a progress
			// notification's revision: that notification came early, and
			// the table claimed a revision it did not have. Relist.
			return ReasonOutOfOrder, unchanged
		}
		if r < last {
			return ReasonOutOfOrder, unchanged
		}
		last = r
		rel := routing.ShortKey(ev.Kv.Key[len(m.cfg.Prefix):])
		m.uncompiled = true
		_, existed := m.state[rel]
		if ev.Type == clientv3.EventTypeDelete {
			delete(m.state, rel)
			m.pending = append(m.pending, routing.Event{KV: routing.KV{Key: rel, ModRevision: r}, Deleted: true})
		} else {
			kv := routing.Keep(routing.KV{Key: rel, Value: ev.Kv.Value, ModRevision: r, CreateRevision: ev.Kv.CreateRevision, Version: ev.Kv.Version})
			m.state[rel] = kv
			m.pending = append(m.pending, routing.Event{KV: kv, Created: !existed})
		}
		n++
	}
	if n == 0 {
		return "", unchanged
	}
	m.applied, m.lastEvent, m.eventSeen = last, last, last
	m.metrics.events.Add(float64(n))
	return "", changed
}

// recompile builds a table from the state at the applied revision: the
// current table updated with the events applied since it was compiled,
// when those are known, else a compile of the whole state. It swaps the
// table in; the caller announces it.
func (m *Mirror) recompile() { m.recompileWith(nil) }

// recompileWith is recompile; when the table is compiled from the whole
// state and refuses values that had earlier versions, earlier (if not nil)
// is asked for their last good values from etcd's history, and the state
// is compiled again with them (see routing.CompileOptions.Earlier). When
// earlier was cut short (the mirror stops), nothing is swapped in: a table
// without the last good values it could not read would serve a refused
// key as absent. It reports whether it swapped a table in.
func (m *Mirror) recompileWith(earlier func([]routing.Skipped) (map[string]routing.KV, bool)) bool {
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	opts := m.compileOptions()
	var t *routing.Table
	if m.incremental {
		t = routing.Update(m.Table(), m.applied, m.pending, opts)
	}
	if t == nil {
		kvs := m.listed // the state, as listed, if no event came since
		if opts.Decoded = m.decoded; kvs == nil || len(m.pending) > 0 {
			kvs, opts.Decoded = make([]routing.KV, 0, len(m.state)), nil
			for _, kv := range m.state {
				kvs = append(kvs, kv)
			}
		} else if m.precompiled != nil {
			// listed's, compiled at the list's end; brought to now (a
			// health grace may have ended since)
			t = (<-m.precompiled).At(opts.Now)
		}
		if t == nil {
			t = routing.Compile(m.applied, kvs, m.Table(), opts)
		}
		if earlier != nil && len(t.Skipped()) > 0 {
			var whole bool
			if opts.Earlier, whole = earlier(t.Skipped()); !whole {
				return false
			}
			if len(opts.Earlier) > 0 {
				t = routing.Compile(m.applied, kvs, m.Table(), opts)
			}
		}
	}
	m.listed, m.decoded, m.precompiled = nil, nil, nil
	clear(m.pending) // drop the values: they live on in the table if needed
	m.pending, m.incremental, m.uncompiled = m.pending[:0], true, false
	if m.beforeSwap != nil {
		m.beforeSwap() // a test's look at what is reported before the swap
	}
	m.swapIn(t) // the caller announces it
	// Once served, as the table's revision; down too (etcd restored from
	// a backup: the events are of the restored history).
	m.eventRev.Store(m.eventSeen)
	return true
}

// compileOptions returns the options of a compile or update now.
func (m *Mirror) compileOptions() routing.CompileOptions {
	return routing.CompileOptions{Now: time.Now(), Start: m.start, Grace: m.cfg.HealthGrace, ClusterID: m.clusterID}
}

// advance marks the current table current at a later revision.
func (m *Mirror) advance(rev int64) {
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	if cur := m.Table(); cur != nil && cur.Revision() < rev {
		m.store(cur.WithRevision(rev))
	}
}

// clockCheck is the longest the clock loop sleeps: how late a wall-clock
// step is noticed.
const clockCheck = time.Second

// clockLoop rebuilds the table when it changes by the clock alone, a
// health grace window ending, a boost's expires_at passing, or the wall
// clock stepping back before the expires_at of a boost left out as
// expired, with no etcd event needed.
func (m *Mirror) clockLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		changed := m.Changed()
		t := m.Table()
		// ValidUntil is a wall time (an expires_at may be hours away),
		// the timer monotonic: a wall-clock step or a suspended host must
		// not leave the table late, so it wakes at least every second
		// (At returns the same table when woken early). Until it wakes,
		// a step forward past an expires_at makes each Resolve build the
		// table without that override again, and a step back before one
		// left out as expired, with it.
		wait := clockCheck
		if t != nil && !t.ValidUntil().IsZero() {
			wait = min(time.Until(t.ValidUntil()), clockCheck)
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-timer.C:
			m.swapMu.Lock()
			if cur := m.Table(); cur == t && t != nil {
				if next := t.At(time.Now()); next != t {
					m.store(next)
				}
			}
			m.swapMu.Unlock()
		}
	}
}
