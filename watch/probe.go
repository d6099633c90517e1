package watch

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Probe results, the values of the probes metric's result label.
const (
	probeCurrent   = "current"   // nothing in the prefix changed after the applied revision
	probeBehind    = "behind"    // something did, and the watch has not delivered it
	probeFailed    = "failed"    // no answer within RequestTimeout, or an error
	probeRegressed = "regressed" // etcd's revision is below the applied one
	probeCluster   = "cluster-change"
)

// unansweredSilences is how many silences in a row, each with etcd past
// the watch's start revision, show that progress requests go unanswered
// on the path to etcd.
const unansweredSilences = 2

// silent handles a watch that answered nothing for three progress
// intervals. Silence alone means nothing: etcd's grpc-proxy drops progress
// requests, and etcd answers none while a watch's start revision is ahead
// of its own (an idle cluster). So a probe asks etcd whether the prefix
// changed since the applied revision. If not, the table is current at
// etcd's revision and the watch is kept. If it did (the watch is stuck) or
// the probe failed, a new watch is created from applied+1 before the old
// one is dropped, so Connected stays true across a healthy reopen, and
// history replays what the old one missed; a failed probe (no answer)
// sets Connected false at once, until the new watch's creation is
// answered. It returns the watch to follow,
// or nil and why none is left.
func (m *Mirror) silent(ctx context.Context, s *stream) (*stream, string) {
	res, rev := m.probe(s.ctx, true)
	switch res {
	case probeCurrent:
		if s.probedPast && !m.progressIgnored {
			// etcd has been past the watch's start revision since the
			// last probe: it would have answered the progress requests
			// sent meanwhile. Whatever sits in between drops them, if
			// it does so again: once alone is also a member lost under
			// the watch, whose requests went with its stream while
			// the client resumed the watch on another (the heartbeat
			// review: a leader killed).
			m.progressUnanswered++
			if m.progressUnanswered >= unansweredSilences {
				m.progressIgnored = true
				m.log.Info("progress requests go unanswered (etcd's grpc-proxy drops them): no more are sent; silence probes confirm the table until a progress notification arrives",
					"silences", m.progressUnanswered)
			}
		}
		s.probedPast = s.probedPast || rev >= s.start
		s.heard, m.stuck = time.Now(), false
		return s, ""
	case probeRegressed:
		return nil, ReasonRegressed
	case probeCluster:
		return nil, ReasonCluster
	}
	if res == probeBehind && m.stuck && !s.answered {
		// A watch opened since one was found behind, or not created,
		// heard nothing either: behind etcd's grpc-proxy it was joined
		// to a dead upstream watch (below), or to one etcd refused (an
		// expired token: see ReasonBehind), which another stuck watcher
		// keeps in the proxy. A list lets the next watch start at etcd's
		// revision, where the proxy's live upstream watch can take it.
		m.otherRange = !m.otherRange
		m.log.Warn("a watch opened since one was found behind etcd heard nothing either: relisting, so that the next starts at etcd's revision (behind etcd's grpc-proxy with authentication on: see docs/operations.md)",
			"applied_revision", m.applied, "revision", rev)
		return nil, ReasonBehind
	}
	if res == probeBehind {
		m.stuck = true
		// etcd holds changes the watch was created to deliver and did not:
		// the path that serves it is broken. Behind etcd's grpc-proxy that
		// path can be a dead broadcast (the proxy's own watch on etcd ended,
		// e.g. compacted, and the proxy did not drop it): the proxy keeps
		// joining new watches of the same range to it, created and then
		// silent for good, as long as any of its watchers is left. A watch
		// of the other range is served by another broadcast.
		m.otherRange = !m.otherRange
	}
	if res == probeFailed {
		// Silent for three progress intervals, and a read got no answer
		// within RequestTimeout: the path to etcd is down (a dropped
		// path keeps its connection up). Say so now, not only once a new
		// watch's creation has timed out as well.
		m.setConnected(false)
		m.noteStalled(silentReadsMsg)
	}
	// The probe found the prefix changed, or could not tell: the etcd that
	// answers may hold another history (see verify).
	next, why := m.open(ctx, nil, true)
	if next == nil {
		if ctx.Err() == nil && !relists(why) {
			why = ReasonSilent
		}
		return nil, why
	}
	m.metrics.reopens.WithLabelValues(ReasonSilent).Inc()
	m.log.Info("silent watch replaced by a new one from the applied revision", "probe", res, "applied_revision", m.applied)
	return next, ""
}

// uncreated handles a watch whose creation went unanswered (abandoned as
// createTimeout) on a connection up all along, the second in a row (a
// creation asked while the connection is down waits for it; that outage
// is no sign of this). Behind etcd's grpc-proxy with authentication on,
// that is a new upstream watch etcd refused (the proxy's one upstream stream
// carries the token of the watcher that opened it, which may have expired),
// which the proxy never passes on; a watch from at or past the revision of
// an upstream watch the proxy has is joined to it and needs no new one. So
// the next watch takes the other key range (see silent), and a probe asks
// etcd where it is: nothing changed since the applied revision moves the
// applied revision to etcd's (confirm), and the next watch starts there;
// changes since it, and the next watch starts after a list
// (ReasonUncreated). A probe that fails (etcd overloaded or away) changes
// nothing: the watch is opened again from the applied revision, backing
// off. It returns a relist reason, or "".
func (m *Mirror) uncreated(ctx context.Context) string {
	m.otherRange, m.stuck = !m.otherRange, true
	switch res, rev := m.probe(clientv3.WithRequireLeader(ctx), false); res {
	case probeBehind:
		m.log.Warn("a watch's creation went unanswered while etcd holds changes past the table: relisting, so that the next starts at etcd's revision (behind etcd's grpc-proxy with authentication on: see docs/operations.md)",
			"applied_revision", m.applied, "revision", rev)
		return ReasonUncreated
	case probeRegressed:
		return ReasonRegressed
	case probeCluster:
		return ReasonCluster
	}
	return ""
}

// probe reads the keys of the prefix modified after the applied revision,
// and how many keys it holds, in one linearizable Range (keys only: etcd
// answers it from its in-memory index; the grpc-proxy forwards it). No key
// newer than the applied revision and as many keys as the state means
// etcd's prefix at its current revision is the state: every key there was
// last written at or before the applied revision, so it is in the state
// with that value, and none is missing. ctx carries require-leader
// metadata (the watch's): a member without a leader fails it at once.
// silence says whether a silent watch is probed (counted in the silence
// probes metric) or a watch not created. It returns the result and etcd's
// revision.
func (m *Mirror) probe(ctx context.Context, silence bool) (string, int64) {
	gctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
	defer cancel()
	resp, err := m.cfg.Client.Get(gctx, m.firstKey(), clientv3.WithRange(clientv3.GetPrefixRangeEnd(m.cfg.Prefix)),
		clientv3.WithKeysOnly(), clientv3.WithMinModRev(m.applied+1))
	res, rev := probeCurrent, int64(0)
	switch {
	case err != nil:
		res = probeFailed
		if refused(err) {
			// A fact of the user's role (or login), not of the path: said
			// at once, as a refused list or watch is, not after the
			// watch's own refusal, which may wait behind its creations'
			// timeouts (a login etcd is slow to check).
			m.refuse("read", err)
			break
		}
		if errors.Is(err, context.DeadlineExceeded) {
			m.refused.Store(nil) // etcd holds the read: a refusal is no longer what is known
		}
		m.log.Debug("probe of a silent watch failed", "err", err)
	case resp.Header.GetClusterId() != 0 && resp.Header.GetClusterId() != m.clusterID:
		res = probeCluster
		m.log.Warn("probe answered by another etcd cluster than the list", "cluster_id", fmt.Sprintf("%x", resp.Header.GetClusterId()))
	case resp.Header.Revision < m.applied:
		res = probeRegressed
		m.log.Error("etcd revision below the applied one; was the cluster restored from an older backup?",
			"revision", resp.Header.Revision, "applied_revision", m.applied)
	case len(resp.Kvs) > 0 || resp.Count != int64(len(m.state)):
		res, rev = probeBehind, resp.Header.Revision
	default:
		rev = resp.Header.Revision
		m.confirm(rev)
	}
	if err == nil {
		m.refused.Store(nil) // the read is answered: granted
	}
	if silence {
		m.metrics.probes.WithLabelValues(res).Inc()
	}
	return res, rev
}

// confirm records that etcd's prefix at rev equals the state: the table is
// current at rev.
func (m *Mirror) confirm(rev int64) {
	m.markSynced() // first, as for a progress notification (see apply)
	if rev > m.applied {
		// A watch may still deliver events up to rev: only ones undone
		// by rev (a key created and deleted again). They are dropped as
		// duplicates.
		m.applied, m.lastEvent = rev, max(m.lastEvent, rev)
		m.advance(rev)
	}
}
