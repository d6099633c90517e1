package watch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/regiond/regiond/routing"
)

// Resync reasons, also the values of the resyncs metric's reason label.
const (
	ReasonInitial    = "initial"
	ReasonCompacted  = "compacted"
	ReasonClosed     = "closed"
	ReasonError      = "error"
	ReasonSilent     = "silent"
	ReasonOutOfOrder = "out-of-order"
	ReasonListFailed = "list-failed"
)

// reasonNoLeader is ReasonError from a member without a leader; Run tries
// the other endpoints before relisting for it.
const reasonNoLeader = "no-leader"

// Run lists and watches until ctx is done; it then returns nil. Errors on
// the way are logged, counted and retried; the last good table keeps
// serving meanwhile.
func (m *Mirror) Run(ctx context.Context) error {
	hctx, stopHealth := context.WithCancel(ctx)
	healthDone := make(chan struct{})
	go func() { defer close(healthDone); m.healthLoop(hctx) }()
	defer func() { stopHealth(); <-healthDone }()
	bo := m.cfg.NewBackoff()
	reason := ReasonInitial
	for ctx.Err() == nil {
		rev, err := m.relist(ctx, reason)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			m.setConnected(false)
			m.metrics.resyncs.WithLabelValues(ReasonListFailed).Inc()
			m.log.Warn("list failed; keeping the last good table", "prefix", m.cfg.Prefix, "err", err)
			if bo.Wait(ctx) != nil {
				break
			}
			continue
		}
		began := time.Now()
		reason = m.watch(ctx, rev)
		// "No leader" ends a watch whose member lost its leader, or refuses
		// it at once when the member knew before. Every event up to the
		// applied revision was delivered, so watch again from there: clientv3
		// sends each new stream to its next endpoint, which may have a
		// leader (two tries per other endpoint: the round-robin may start
		// on the same one). Relisting in between does not help: with two
		// endpoints the round-robin sends the list to the member with a
		// leader and the watch to the one without, every time.
		for left := 2 * (len(m.cfg.Client.Endpoints()) - 1); reason == reasonNoLeader && left > 0 && ctx.Err() == nil; left-- {
			m.log.Info("watch has no leader; watching again from the applied revision", "applied_revision", m.applied)
			reason = m.watch(ctx, m.applied)
		}
		if reason == reasonNoLeader {
			reason = ReasonError
		}
		if ctx.Err() != nil {
			break
		}
		m.metrics.resyncs.WithLabelValues(reason).Inc()
		m.log.Info("relisting", "reason", reason, "applied_revision", m.applied)
		if reason == ReasonCompacted && time.Since(began) > time.Second {
			continue // the history moved on: relist at once
		}
		if time.Since(began) > 2*time.Minute {
			bo.Reset()
		}
		if bo.Wait(ctx) != nil {
			break
		}
	}
	m.setConnected(false)
	return nil
}

// relist reads the whole prefix at one revision and replaces the state:
// keys absent from the new list are deleted. It returns the list revision.
func (m *Mirror) relist(ctx context.Context, reason string) (int64, error) {
	began := time.Now()
	defer func() { m.metrics.listSeconds.Set(time.Since(began).Seconds()) }()
	kvs, rev, err := m.getAll(ctx)
	if err != nil {
		return 0, err
	}
	known := m.applied
	if cur := m.Table(); cur != nil {
		if old := cur.ClusterID(); old != 0 && old != m.clusterID {
			// Another cluster (a snapshot of a cluster since replaced):
			// its revisions say nothing about this one's.
			m.metrics.clusterChanges.Inc()
			m.log.Warn("etcd cluster changed since the table was built; revisions are not comparable",
				"was_cluster_id", fmt.Sprintf("%x", old), "cluster_id", fmt.Sprintf("%x", m.clusterID))
			known = 0
		} else {
			known = max(known, cur.Revision()) // also a seeded snapshot's, after a restart
		}
	}
	regressed := rev < known
	if regressed {
		m.metrics.regressions.Inc()
		m.log.Error("etcd revision went backwards; was the cluster restored from an older backup? following etcd",
			"list_revision", rev, "known_revision", known, "reason", reason)
	}
	state := make(map[string]routing.KV, len(kvs))
	for _, kv := range kvs {
		state[kv.Key] = kv
	}
	same := len(state) == len(m.state)
	for k, kv := range state {
		if !same {
			break
		}
		old, ok := m.state[k]
		same = ok && old.ModRevision == kv.ModRevision && string(old.Value) == string(kv.Value)
	}
	m.state, m.applied, m.lastEvent = state, rev, rev
	m.pending, m.incremental = m.pending[:0], false
	m.setConnected(true)
	m.markSynced()
	cur := m.Table()
	// The shortcut needs the table to have been compiled from the state it
	// is compared with (not from events applied since, without a compile).
	if same && !m.uncompiled && !regressed && cur != nil && !cur.Stale() && cur.ClusterID() == m.clusterID {
		m.incremental = true // the table is the state's: events can update it
		m.advance(rev)
	} else {
		m.recompile()
	}
	m.readyOnce.Do(func() { close(m.ready) })
	return rev, nil
}

// getAll reads every key of the prefix at one revision, in pages.
func (m *Mirror) getAll(ctx context.Context) ([]routing.KV, int64, error) {
	end := clientv3.GetPrefixRangeEnd(m.cfg.Prefix)
	key, rev := m.cfg.Prefix, int64(0)
	var out []routing.KV
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(m.cfg.PageSize)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		gctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
		resp, err := m.cfg.Client.Get(gctx, key, opts...)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev, m.clusterID = resp.Header.Revision, resp.Header.ClusterId
		}
		for _, kv := range resp.Kvs {
			out = append(out, routing.KV{Key: string(kv.Key[len(m.cfg.Prefix):]), Value: kv.Value, ModRevision: kv.ModRevision})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// watch follows the prefix from rev+1 until the watch must be replaced, and
// returns why.
func (m *Mirror) watch(ctx context.Context, rev int64) string {
	// Each watch gets its own gRPC stream (clientv3 shares streams between
	// watches with equal metadata): a new watch must not join the stream of
	// the one it replaces while that stream shuts down, or it is closed too.
	m.watches++
	wctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx),
		"regiond-watch", strconv.FormatUint(m.watches, 10)))
	defer cancel()
	// WithCreatedNotify: the watch is connected once etcd has created it,
	// not only when something (an event, a progress notification) arrives.
	wch := m.cfg.Client.Watch(wctx, m.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	tick := time.NewTicker(m.cfg.ProgressInterval)
	defer tick.Stop()
	lastHeard := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-tick.C:
			if time.Since(lastHeard) > 3*m.cfg.ProgressInterval {
				if !m.unchangedSince(wctx) {
					m.setConnected(false)
					return ReasonSilent
				}
				lastHeard = time.Now()
			}
			rctx, rcancel := context.WithTimeout(wctx, m.cfg.RequestTimeout)
			if err := m.cfg.Client.RequestProgress(rctx); err != nil {
				m.log.Debug("progress request failed", "err", err)
			}
			rcancel()
		case resp, ok := <-wch:
			if why := m.drain(wch, resp, ok); why != "" {
				return why
			}
			lastHeard = time.Now()
		}
	}
}

// unchangedSince reports whether etcd's revision, read linearizably, is
// still the applied one: then a silent watch has missed nothing. etcd
// (3.6+) answers no progress request for a watch whose start revision is
// in the future, so a watch opened at list revision + 1 stays silent until
// something, anywhere in the cluster, is written: on an idle cluster the
// silence says nothing about the watch. Once a write lands, progress
// requests are answered again, and silence means a broken watch. The read
// carries the watch's require-leader metadata, so a member that lost its
// leader fails it at once. A revision below the applied one (a restored
// cluster) is not "unchanged": the relist reports it.
func (m *Mirror) unchangedSince(ctx context.Context) bool {
	gctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
	defer cancel()
	resp, err := m.cfg.Client.Get(gctx, m.cfg.Prefix+routing.EpochKey, clientv3.WithCountOnly()) // a point read: only its header matters
	if err != nil {
		m.log.Debug("revision check of a silent watch failed", "err", err)
		return false
	}
	if resp.Header.Revision != m.applied {
		return false
	}
	m.markSynced()
	return true
}

// drain applies a watch response and every response already queued behind
// it, then compiles one table for all of them: under a burst of writes the
// mirror compiles once per backlog, not once per revision. Each revision
// is still applied whole. It returns a resync reason when the watch must be
// replaced.
func (m *Mirror) drain(wch clientv3.WatchChan, resp clientv3.WatchResponse, ok bool) string {
	began := time.Now()
	dirty, advanced := false, false
	why := ""
	for {
		if !ok {
			why = ReasonClosed
			break
		}
		var c change
		why, c = m.handle(resp)
		dirty = dirty || c == changed
		advanced = advanced || c == advancedOnly
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
	case why == ReasonOutOfOrder:
	case dirty:
		m.markSynced()
		m.recompile()
		m.metrics.apply.Observe(time.Since(began).Seconds())
		if m.cfg.AfterChange != nil {
			m.cfg.AfterChange()
		}
	case advanced:
		m.markSynced()
		m.advance(m.applied)
	}
	return why
}

// change is what a watch response did to the state.
type change int

const (
	unchanged    change = iota
	advancedOnly        // a progress notification: same state, later revision
	changed             // events applied
)

// handle applies one watch response to the state; it reports whether the
// state changed, and a resync reason when the watch must be replaced.
func (m *Mirror) handle(resp clientv3.WatchResponse) (string, change) {
	if err := resp.Err(); err != nil {
		m.setConnected(false)
		if resp.CompactRevision > 0 || errors.Is(err, rpctypes.ErrCompacted) {
			m.log.Warn("watch compacted", "compact_revision", resp.CompactRevision, "applied_revision", m.applied)
			return ReasonCompacted, unchanged
		}
		m.log.Warn("watch error", "err", err)
		if errors.Is(err, rpctypes.ErrNoLeader) {
			return reasonNoLeader, unchanged
		}
		return ReasonError, unchanged
	}
	if resp.Canceled {
		return ReasonClosed, unchanged
	}
	m.setConnected(true)
	if resp.IsProgressNotify() {
		// Every event up to the header revision has been delivered.
		if h := resp.Header.Revision; h > m.applied {
			m.applied = h
			return "", advancedOnly
		}
		m.markSynced()
		return "", unchanged
	}
	return m.applyEvents(resp.Events)
}

// applyEvents applies the events of one watch response to the state.
func (m *Mirror) applyEvents(events []*clientv3.Event) (string, change) {
	last := m.applied
	n := 0
	for _, ev := range events {
		r := ev.Kv.ModRevision
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
		rel := string(ev.Kv.Key[len(m.cfg.Prefix):])
		m.uncompiled = true
		_, existed := m.state[rel]
		if ev.Type == clientv3.EventTypeDelete {
			delete(m.state, rel)
			m.pending = append(m.pending, routing.Event{KV: routing.KV{Key: rel, ModRevision: r}, Deleted: true})
		} else {
			kv := routing.KV{Key: rel, Value: ev.Kv.Value, ModRevision: r}
			m.state[rel] = kv
			m.pending = append(m.pending, routing.Event{KV: kv, Created: !existed})
		}
		n++
	}
	if n == 0 {
		return "", unchanged
	}
	m.applied, m.lastEvent = last, last
	m.metrics.events.Add(float64(n))
	return "", changed
}

// recompile builds a table from the state at the applied revision: the
// current table updated with the events applied since it was compiled,
// when those are known, else a compile of the whole state.
func (m *Mirror) recompile() {
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	opts := routing.CompileOptions{Now: time.Now(), Start: m.start, Grace: m.cfg.HealthGrace, ClusterID: m.clusterID}
	var t *routing.Table
	if m.incremental {
		t = routing.Update(m.Table(), m.applied, m.pending, opts)
	}
	if t == nil {
		kvs := make([]routing.KV, 0, len(m.state))
		for _, kv := range m.state {
			kvs = append(kvs, kv)
		}
		t = routing.Compile(m.applied, kvs, m.Table(), opts)
	}
	clear(m.pending) // drop the values: they live on in the table if needed
	m.pending, m.incremental, m.uncompiled = m.pending[:0], true, false
	m.changeRev.Store(m.applied)
	m.store(t)
}

// advance marks the current table current at a later revision.
func (m *Mirror) advance(rev int64) {
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	if cur := m.Table(); cur != nil && cur.Revision() < rev {
		m.store(cur.WithRevision(rev))
	}
}

// healthLoop rebuilds the table when a health grace window ends, with no
// etcd event needed.
func (m *Mirror) healthLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		changed := m.Changed()
		t := m.Table()
		wait := time.Hour
		if t != nil && !t.ValidUntil().IsZero() {
			wait = time.Until(t.ValidUntil())
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
