package watch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// Relist reasons, the values of the resyncs metric's reason label: only
// these replace the state with a new list.
const (
	ReasonInitial    = "initial"
	ReasonCompacted  = "compacted"
	ReasonOutOfOrder = "out-of-order"   // an event at or below the applied revision, or going backwards
	ReasonRegressed  = "regressed"      // etcd's revision below the applied one (a restored cluster?)
	ReasonCluster    = "cluster-change" // an answer from another etcd cluster than the list's
	ReasonDiverged   = "diverged"       // etcd's prefix at the applied revision is not the state (a restored cluster since written past it?)
	ReasonListFailed = "list-failed"
	// ReasonBehind: a watch that replaced one a silence probe found behind
	// etcd heard nothing either, and etcd is behind it again. ReasonUncreated:
	// a watch's creation went unanswered while etcd answered a read and held
	// changes past the applied revision. Both start the next watch at etcd's
	// current revision after a list, where etcd's grpc-proxy can join it to
	// a watch it already has upstream, rather than replay history from the
	// applied revision, which needs a new upstream watch: behind a proxy
	// with authentication on, etcd refuses that once the token of the
	// watcher that opened the proxy's one upstream stream has expired, and
	// the proxy never says so (etcd issue 19296).
	ReasonBehind    = "behind"
	ReasonUncreated = "uncreated"
)

// Reopen reasons, the values of the reopens metric's reason label: why a
// watch was replaced by a new one from the applied revision, without a
// list (history replays whatever the old one missed).
const (
	ReasonSilent       = "silent"            // three progress intervals without an answer, and a probe that found changes not delivered or failed
	ReasonClosed       = "closed"            // the watch channel closed or the watch was cancelled
	ReasonError        = "error"             // the watch ended with an error
	ReasonNoLeader     = "no-leader"         // the member lost its leader (WithRequireLeader)
	ReasonDisconnected = "disconnected"      // the client's connection is down: no stream can be alive
	ReasonPermission   = "permission-denied" // etcd refused the watch to the client's user (a role changed?)
)

// relists reports whether a reason ending a watch needs a relist.
func relists(reason string) bool {
	switch reason {
	case ReasonCompacted, ReasonOutOfOrder, ReasonRegressed, ReasonCluster, ReasonDiverged, ReasonBehind, ReasonUncreated:
		return true
	}
	return false
}

// Run lists and watches until ctx is done; it then returns nil. Errors on
// the way are logged, counted and retried; the last good table keeps
// serving meanwhile. One Run at a time: a second while one runs returns
// an error at once (Run may be called again once it has returned).
func (m *Mirror) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("watch: Run is already running on this Mirror")
	}
	defer m.running.Store(false)
	hctx, stopHealth := context.WithCancel(ctx)
	healthDone := make(chan struct{})
	go func() { defer close(healthDone); m.clockLoop(hctx) }()
	defer func() { stopHealth(); <-healthDone }()
	bo := m.cfg.NewBackoff()
	reason := ReasonInitial
	for ctx.Err() == nil {
		m.metrics.resyncs.WithLabelValues(reason).Inc()
		publish, err := m.list(ctx, reason)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			reason = ReasonListFailed
			m.noteDown()
			if refused(err) {
				m.refuse("list", err)
			} else {
				if errors.Is(err, context.DeadlineExceeded) {
					m.refused.Store(nil) // etcd holds the list: an earlier refusal is no longer what is known
					// Said in Status while the connection is up (the herd
					// review: /v1/status gave no reason for 30 s of them).
					m.noteStalled(fmt.Sprintf(listTimeoutMsg, m.cfg.RequestTimeout))
				}
				msg := "list failed; keeping the last good table"
				if m.Table() == nil {
					msg = "list failed; no table yet: nothing is served until a list succeeds"
				}
				m.log.Warn(msg, append([]any{"prefix", m.cfg.Prefix, "endpoints", m.cfg.Client.Endpoints(), "err", err}, m.unreachable(ctx)...)...)
			}
			if m.retryWait(ctx, bo) != nil {
				break
			}
			continue
		}
		m.refused.Store(nil)
		listed := m.clock()
		if reason = m.follow(ctx, bo, publish); ctx.Err() != nil {
			break
		}
		m.log.Info("relisting", "reason", reason, "applied_revision", m.applied)
		if reason == ReasonCompacted && m.clock().Sub(listed) > time.Second {
			// The history moved on: relist at once. Within a second of
			// the list, after the backoff: a history compacted as fast
			// as it is listed would otherwise be listed in a loop.
			continue
		}
		if m.retryWait(ctx, bo) != nil {
			break
		}
	}
	m.setConnected(false)
	return nil
}

// clock is the time of Run's rule for a compaction (relist at once, or
// after the backoff): time.Now, or the tests' m.now.
func (m *Mirror) clock() time.Time {
	if m.now != nil {
		return m.now()
	}
	return time.Now()
}

// pageRetries is how many times a page after the first that got no
// answer within the request timeout is asked again, at the list's
// revision, before the list is given up: a fleet's agents listing at
// once through an overloaded proxy threw away the pages they had and
// started over, again and again together (the herd review: 79 of 96
// agents listed more than once, losing up to 7 pages each time).
const pageRetries = 2

// getPage reads one page of the list from key (at rev when not 0),
// within the request timeout; a page at a revision that times out is
// asked again up to pageRetries times.
func (m *Mirror) getPage(ctx context.Context, key string, rev int64, opts []clientv3.OpOption) (*clientv3.GetResponse, error) {
	for attempt := 0; ; attempt++ {
		gctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
		resp, err := m.cfg.Client.Get(gctx, key, opts...)
		cancel()
		if err == nil || rev == 0 || attempt == pageRetries || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return resp, err
		}
		m.log.Info("a page of the list got no answer within the request timeout; asking again at the list's revision",
			"from", key, "revision", rev, "attempt", attempt+1)
	}
}

// relist reads the whole prefix at one revision and replaces the state:
// keys absent from the new list are deleted; then the table is built from
// it. It returns the list revision. It does not touch Connected: only a
// created watch does.
func (m *Mirror) relist(ctx context.Context, reason string) (int64, error) {
	publish, err := m.list(ctx, reason)
	if err != nil {
		return 0, err
	}
	publish()
	return m.applied, nil
}

// list is relist up to the table: it replaces the state and returns what
// builds the table from it (and writes it, AfterChange). Run opens the
// watch in between: a watch created before anyone has seen the new table
// starts at etcd's current revision, where etcd sends events as they
// come; one created after changes that followed the table (a client that
// read the new file, then wrote) starts behind it, and etcd catches such
// a watch up only every 100 ms (its unsynced watchers' loop).
func (m *Mirror) list(ctx context.Context, reason string) (publish func(), err error) {
	began := time.Now()
	defer func() { m.metrics.listSeconds.Set(time.Since(began).Seconds()) }()
	if reason == ReasonDiverged || reason == ReasonCluster {
		m.otherHistory = true // until a list succeeds (the next may be ReasonListFailed's)
	}
	kvs, decoded, rev, err := m.getAll(ctx)
	if err != nil {
		return nil, err
	}
	m.log.Debug("listed", "keys", len(kvs), "revision", rev, "took", time.Since(began), "reason", reason)
	regressed := m.regressed(rev, reason)
	state := byKey(kvs)
	// The current table can stay only if it was compiled from the state
	// the list is compared with (not from events applied since, without a
	// compile).
	keep := sameState(state, m.state) && !m.uncompiled && !regressed
	// ...and only if it is fresh (not a stale seed) and of the list's
	// cluster.
	if cur := m.Table(); cur == nil || cur.Stale() || cur.ClusterID() != m.clusterID {
		keep = false
	}
	m.state, m.applied, m.lastEvent = state, rev, rev
	if regressed || m.otherHistory {
		// An event of the history before a restore, or of another
		// cluster, says nothing of this one (the drills: a diverged
		// relist kept the old history's change revision in the status
		// key, and regionctl status --max-lag 0 waited for it).
		m.eventSeen = 0
	}
	m.otherHistory = false
	m.pending, m.incremental = m.pending[:0], false
	m.listed, m.decoded, m.precompiled = kvs, decoded, nil
	if !keep {
		m.precompiled = m.precompile()
	}
	listed := time.Now() // the table is current as of now, once published
	return func() { m.publishList(ctx, rev, keep, listed) }, nil
}

// precompile starts compiling the listed state, to be published once the
// watch after the list is created: the compile then runs while etcd
// answers the creation, instead of after it. The table is the state's as
// of now, which is when the list ended. recompileWith takes it if nothing
// was applied since.
func (m *Mirror) precompile() <-chan *routing.Table {
	ch := make(chan *routing.Table, 1)
	rev, kvs, prev, opts := m.applied, m.listed, m.Table(), m.compileOptions()
	opts.Decoded = m.decoded
	go func() { ch <- routing.Compile(rev, kvs, prev, opts) }()
	return ch
}

// regressed reports whether the list's revision rev is below the newest
// the mirror knew of (a cluster restored from an older backup?), and
// counts and logs it if so: the mirror follows etcd all the same, but the
// table cannot be kept as it is.
func (m *Mirror) regressed(rev int64, reason string) bool {
	known := m.knownRevision()
	if rev >= known {
		return false
	}
	m.metrics.regressions.Inc()
	m.log.Error("etcd revision went backwards; was the cluster restored from an older backup? following etcd",
		"list_revision", rev, "known_revision", known, "reason", reason)
	return true
}

// knownRevision is the newest revision the mirror knew of before the
// list: the applied one or the table's (also a seeded snapshot's, after a
// restart). It is 0 when the table comes from another cluster than the
// list (a snapshot of a cluster since replaced), whose revisions say
// nothing about this one's; that is counted and logged.
func (m *Mirror) knownRevision() int64 {
	cur := m.Table()
	if cur == nil {
		return m.applied
	}
	if old := cur.ClusterID(); old != 0 && old != m.clusterID {
		m.metrics.clusterChanges.Inc()
		m.log.Warn("etcd cluster changed since the table was built; revisions are not comparable",
			"was_cluster_id", fmt.Sprintf("%x", old), "cluster_id", fmt.Sprintf("%x", m.clusterID))
		return 0
	}
	return max(m.applied, cur.Revision())
}

// byKey indexes a list by key.
func byKey(kvs []routing.KV) map[string]routing.KV {
	state := make(map[string]routing.KV, len(kvs))
	for _, kv := range kvs {
		state[kv.Key] = kv
	}
	return state
}

// sameState reports whether a and b hold the same keys, each at the same
// mod revision with the same value.
func sameState(a, b map[string]routing.KV) bool {
	if len(a) != len(b) {
		return false
	}
	for k, kv := range a {
		old, ok := b[k]
		if !ok || old.ModRevision != kv.ModRevision || !old.SameValue(kv) {
			return false
		}
	}
	return true
}

// publishList makes the table of the listed state at revision rev, marks
// it synced as of listed (when the list ended) and the mirror ready. When keep says the list found the state the
// current table was compiled from, and that table is fresh (not a stale
// seed) and of the list's cluster, the table stays and only its revision
// moves: events can then update it incrementally. Otherwise the state is
// compiled (or its precompiled table taken), a refused value giving way
// to the key's earlier good one from etcd's history (see earlierGood),
// and announced (AfterChange, then the Changed waiters).
func (m *Mirror) publishList(ctx context.Context, rev int64, keep bool, listed time.Time) {
	if keep {
		m.incremental = true // the table is the state's: events can update it
		m.listed, m.decoded = nil, nil
		m.markSyncedAt(listed) // first, as for a progress notification (see apply)
		m.advance(rev)
		m.eventRev.Store(m.eventSeen) // no swap: the same table, but an event of another history is forgotten
	} else {
		began := time.Now()
		if !m.recompileWith(func(sk []routing.Skipped) (map[string]routing.KV, bool) {
			e := m.earlierGood(ctx, sk)
			return e, ctx.Err() == nil // cut short by the mirror's stop
		}) {
			return
		}
		m.markSyncedAt(listed)
		m.log.Debug("compiled the listed state", "keys", len(m.state), "took", time.Since(began))
		m.announce()
	}
	m.readyOnce.Do(func() { close(m.ready) })
}

// firstKey is where the keys of the prefix begin: the bare prefix itself,
// a key with an empty name, is none of them (nothing could parse it), and
// leaving it out lets a watch take either of two ranges (see otherRange).
func (m *Mirror) firstKey() string { return m.cfg.Prefix + "\x00" }

// getAll reads every key of the prefix at one revision, in pages. Each
// page's health values are checked (see routing.Keep) and its other values
// decoded while the next page is read.
func (m *Mirror) getAll(ctx context.Context) ([]routing.KV, *routing.Decoded, int64, error) {
	end := clientv3.GetPrefixRangeEnd(m.cfg.Prefix)
	key, rev := m.firstKey(), int64(0)
	// The pages are consecutive parts of out, sized from the first page's
	// count of the whole range; a page past it (etcd answered more keys at
	// the revision than it counted) goes into more.
	var out []routing.KV
	var more [][]routing.KV
	inOut := 0 // the KVs in out
	// Values the current table already holds are not decoded again: the
	// compile reuses them.
	var d *routing.Decoded
	prev := m.Table()
	pages := make(chan []routing.KV, 64) // each the goroutine's alone until done
	done := make(chan struct{})
	var failed atomic.Bool // the list failed: the pages left need no decoding
	go func() {
		defer close(done)
		for page := range pages {
			if !failed.Load() {
				routing.KeepAll(page)
				d.Decode(page, prev) // d is set before the first page is sent
			}
		}
	}()
	finish := func() {
		close(pages)
		<-done
	}
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(m.cfg.PageSize)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := m.getPage(ctx, key, rev, opts)
		if err != nil {
			failed.Store(true)
			finish()
			return nil, nil, 0, fmt.Errorf("watch: list %s from %q: %w", m.cfg.Prefix, key, err)
		}
		if rev == 0 {
			rev, m.clusterID = resp.Header.Revision, resp.Header.ClusterId
			out, d = make([]routing.KV, max(int(resp.Count), len(resp.Kvs))), new(routing.Decoded)
		}
		var page []routing.KV
		if k := inOut + len(resp.Kvs); k <= len(out) && len(more) == 0 {
			page, inOut = out[inOut:k:k], k
		} else {
			page = make([]routing.KV, len(resp.Kvs))
			more = append(more, page)
		}
		for i, kv := range resp.Kvs {
			page[i] = routing.KV{Key: routing.ShortKey(kv.Key[len(m.cfg.Prefix):]), Value: kv.Value,
				ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision, Version: kv.Version}
		}
		pages <- page
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	finish()
	out = out[:inOut]
	for _, page := range more {
		out = append(out, page...)
	}
	return out, d, rev, nil
}
