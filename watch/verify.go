package watch

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// verify checks, when a watch is opened again after the last one ended,
// that etcd's prefix at the applied revision is the mirror's state. The
// new watch replays what came after that revision; it cannot tell that
// what came before is not what etcd now holds. A cluster restored from an
// older backup (without etcdutl's --bump-revision and --mark-compacted)
// that other clients have since written past the applied revision holds
// another history under the same revision numbers: its watch would
// answer, its progress notifications would confirm the table, and the
// keys written in between would differ for good.
//
// One keys-only Range at the applied revision (etcd answers it from its
// index; the grpc-proxy forwards it): the prefix's key count, and the keys
// last written at or after the newest revision in the state, must be the
// state's, with the same revisions. It returns "" when they are; a relist
// reason when they are not (ReasonDiverged, counted as a regression), when
// that history is compacted, when etcd is behind the applied revision, or
// when another cluster answers; ReasonPermission or ReasonError when the
// read failed (the watch is opened again, and checked again).
//
// The check compares counts and the newest keys, not every value: two
// histories with as many keys whose newest writes are the same keys at the
// same revisions pass it.
func (m *Mirror) verify(ctx context.Context) string {
	var newest int64
	last := map[string]bool{} // the state's keys last written at newest
	for k, kv := range m.state {
		if kv.ModRevision > newest {
			newest = kv.ModRevision
			clear(last)
		}
		if kv.ModRevision == newest {
			last[k] = true
		}
	}
	gctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(m.cfg.Prefix)), clientv3.WithRev(m.applied), clientv3.WithKeysOnly()}
	if newest > 0 {
		opts = append(opts, clientv3.WithMinModRev(newest))
	}
	resp, err := m.cfg.Client.Get(gctx, m.firstKey(), opts...)
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		m.log.Warn("history at the applied revision compacted while the watch was down", "applied_revision", m.applied)
		return ReasonCompacted
	case errors.Is(err, rpctypes.ErrFutureRev):
		m.log.Error("etcd revision below the applied one; was the cluster restored from an older backup?", "applied_revision", m.applied)
		return ReasonRegressed
	case err != nil && refused(err):
		m.refuse("read", err)
		return ReasonPermission
	case err != nil:
		m.log.Warn("could not check etcd's prefix at the applied revision; watching again", "applied_revision", m.applied, "err", err)
		return ReasonError
	case resp.Header.GetClusterId() != 0 && resp.Header.GetClusterId() != m.clusterID:
		m.log.Warn("answered by another etcd cluster than the list", "cluster_id", fmt.Sprintf("%x", resp.Header.GetClusterId()))
		return ReasonCluster
	}
	same := resp.Count == int64(len(m.state)) && len(resp.Kvs) == len(last)
	for _, kv := range resp.Kvs {
		st, ok := m.state[routing.ShortKey(kv.Key[len(m.cfg.Prefix):])]
		if !ok || !last[st.Key] || st.ModRevision != kv.ModRevision || st.CreateRevision != kv.CreateRevision || st.Version != kv.Version {
			same = false
		}
	}
	if same {
		return ""
	}
	m.metrics.regressions.Inc()
	m.log.Error("etcd holds another history than the mirror at the applied revision; was the cluster restored from an older backup? relisting",
		"applied_revision", m.applied, "keys_in_etcd", resp.Count, "keys_in_state", len(m.state), "newest_revision_in_state", newest)
	return ReasonDiverged
}
