package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// AgentInfo is one live agent as seen by regionctl status.
type AgentInfo struct {
	routing.AgentStatus
	// Key is the agent's status key.
	Key string `json:"key"`
	// Lag is how many revisions the agent is behind the newest change of
	// the routing prefix (0 when current).
	Lag int64 `json:"lag"`
	// Invalid is set when the status value does not decode.
	Invalid string `json:"invalid,omitempty"`
	// Diverged says why the agent's status cannot be of etcd's present
	// history: its revision is past etcd's (a restored backup without
	// --bump-revision, another cluster), or it has applied the epoch key's
	// last put and reports another epoch. Such an agent serves what etcd
	// no longer holds until it relists; it is not converged, whatever its
	// lag.
	Diverged string `json:"diverged,omitempty"`
}

// Fleet is the convergence picture of every live agent.
type Fleet struct {
	// Revision is the etcd revision read at.
	Revision int64 `json:"revision"`
	// RoutingRevision is the newest routing change: the newest mod
	// revision under <root>/routing/, or, when newer, the newest
	// change_revision a live agent reports (at most Revision): a delete
	// leaves no key, but the agents that applied it say so. What an
	// agent must have applied to be current.
	RoutingRevision int64 `json:"routing_revision"`
	// Epoch is the routing epoch at Revision; 0 when the epoch key is
	// absent or holds no number.
	Epoch int64 `json:"epoch"`
	// ClusterID is the ID (hex) of the etcd cluster read (what the agents'
	// cluster_id must be); "" when etcd's answer did not say.
	ClusterID string `json:"cluster_id,omitempty"`
	// Agents are the live agents' status keys, in key order.
	Agents []AgentInfo `json:"agents"`
	// Lost are the nodes whose record (<root>/nodes/<node>) is there and
	// whose status key is not: their agent's lease ended without a clean
	// stop (cut off from etcd, crashed, its host gone), so it may serve
	// an old table; each as its record last said (Key is the record's).
	// In node order.
	Lost []AgentInfo `json:"lost"`
	// LostUnknown says why Lost could not be read (the user's role may
	// not read <root>/nodes/: made before node records), or "".
	LostUnknown string `json:"lost_unknown,omitempty"`
}

// Fleet reads the agents' status keys, the newest routing change (see
// Fleet.RoutingRevision) and the epoch at one revision. Any failed read is
// an error: a picture with a part missing (epoch 0) would pass for a true
// one.
func (s *Store) Fleet(ctx context.Context) (*Fleet, error) {
	prefix := s.ks.AgentsPrefix()
	kvs, rev, cluster, err := s.getRangeCluster(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), 0)
	if err != nil {
		return nil, err
	}
	rp := s.ks.Routing()
	rkvs, _, err := s.getRange(ctx, rp, clientv3.GetPrefixRangeEnd(rp), rev, clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	f := &Fleet{Revision: rev, Agents: []AgentInfo{}}
	if cluster != 0 {
		f.ClusterID = fmt.Sprintf("%x", cluster)
	}
	var epochRev int64 // the epoch key's mod revision
	for _, kv := range rkvs {
		f.RoutingRevision = max(f.RoutingRevision, kv.ModRevision)
		if string(kv.Key) == s.ks.Epoch() {
			if f.Epoch, epochRev, err = s.epochAt(ctx, rev); err != nil {
				return nil, err
			}
		}
	}
	for _, kv := range kvs {
		a := agentInfo(string(kv.Key), strings.TrimPrefix(string(kv.Key), prefix), kv.Value, 0, rev)
		a.checkCluster(f.ClusterID)
		a.checkEpoch(f.Epoch, epochRev, rev)
		// An agent of another history does not say what this one's
		// newest change is (the operations review: a stale agent's
		// change_revision made the current ones lag).
		if a.Diverged == "" && a.ChangeRevision <= rev {
			f.RoutingRevision = max(f.RoutingRevision, a.ChangeRevision)
		}
		f.Agents = append(f.Agents, a)
	}
	live := make(map[string]bool, len(f.Agents))
	for i := range f.Agents {
		f.Agents[i].Lag = max(0, f.RoutingRevision-f.Agents[i].Revision)
		live[f.Agents[i].Node] = true
	}
	f.Lost, f.LostUnknown, err = s.lostNodes(ctx, rev, live, f.RoutingRevision)
	return f, err
}

// lostNodes reads the node records at rev and returns those of nodes not
// in live, with their lag behind want; a record that cannot be read for
// lack of permission gives why instead (a role made before node
// records), any other failure an error.
func (s *Store) lostNodes(ctx context.Context, rev int64, live map[string]bool, want int64) ([]AgentInfo, string, error) {
	prefix := s.ks.NodesPrefix()
	kvs, _, err := s.getRange(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), rev)
	if err != nil {
		if isPermissionDenied(err) {
			return []AgentInfo{}, fmt.Sprintf("etcd refuses %s to this user: its role is from before node records (regionctl auth apply adds the read), so agents whose status key ended are not known", prefix), nil
		}
		return nil, "", err
	}
	lost := []AgentInfo{}
	for _, kv := range kvs {
		node := strings.TrimPrefix(string(kv.Key), prefix)
		if node == "" || live[node] {
			continue
		}
		lost = append(lost, agentInfo(string(kv.Key), node, kv.Value, want, rev))
	}
	return lost, "", nil
}

// checkCluster marks a as of another history when its table was listed
// from another etcd cluster than cluster (both known).
func (a *AgentInfo) checkCluster(cluster string) {
	if a.Diverged != "" || a.Invalid != "" || cluster == "" || a.ClusterID == "" || a.ClusterID == cluster {
		return
	}
	a.Diverged = fmt.Sprintf("its table is of etcd cluster %s, but etcd here is cluster %s: the agent follows another cluster's history (etcd restored from a backup, as a new cluster) until it relists",
		a.ClusterID, cluster)
}

// checkEpoch marks a as of another history when its status says it has
// applied the epoch key's last put as of readRev (its revision between
// that put's, epochRev, and readRev) and yet reports another epoch than
// that put's, epoch. Nothing is known past readRev (a later write's epoch),
// nor when the key is absent or malformed (epoch 0).
func (a *AgentInfo) checkEpoch(epoch, epochRev, readRev int64) {
	if a.Diverged != "" || a.Invalid != "" || epoch <= 0 || a.Revision < epochRev || a.Revision > readRev || a.Epoch == epoch {
		return
	}
	a.Diverged = fmt.Sprintf("epoch %d at revision %d, but etcd holds epoch %d since revision %d: the agent follows another history until it relists",
		a.Epoch, a.Revision, epoch, epochRev)
}

// LiveAgents counts the live agents' status keys under <root>/agents/
// (one keys-only count).
func (s *Store) LiveAgents(ctx context.Context) (int64, error) {
	prefix := s.ks.AgentsPrefix()
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, s.permErr("count the agents' status keys "+prefix, err, s.roles.ReadNeed(prefix))
	}
	return resp.Count, nil
}

// epochAt reads the epoch at rev (0: current) and the epoch key's mod
// revision; 0 for both when the key is absent, and an epoch of 0 when it
// does not hold a number (Load reports that).
func (s *Store) epochAt(ctx context.Context, rev int64) (epoch, modRev int64, err error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.ks.Epoch(), clientv3.WithRev(rev))
	if errors.Is(err, rpctypes.ErrCompacted) {
		return 0, 0, fmt.Errorf("read the epoch at revision %d: %w", rev, ErrCompacted)
	}
	if err != nil {
		return 0, 0, s.permErr(fmt.Sprintf("read %s at revision %d", s.ks.Epoch(), rev), err, s.roles.ReadNeed(s.ks.Epoch()))
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, nil
	}
	st := &State{}
	st.add("epoch", resp.Kvs[0])
	return st.Epoch, resp.Kvs[0].ModRevision, nil
}

// agentInfo decodes an agent's status key, read at etcd revision readRev,
// and its lag behind want.
func agentInfo(key, node string, value []byte, want, readRev int64) AgentInfo {
	a := AgentInfo{Key: key}
	if err := json.Unmarshal(value, &a.AgentStatus); err != nil {
		a.Invalid = err.Error()
	}
	// The node is the key's: the value is the agent's to write, and an
	// agent (or whoever holds its role) could name another node in it.
	a.Node = node
	a.Lag = max(0, want-a.Revision)
	if a.Invalid == "" && a.Revision > readRev {
		a.Diverged = fmt.Sprintf("revision %d is past etcd's %d: the agent follows another history (a backup restored without --bump-revision, another cluster) until it relists",
			a.Revision, readRev)
	}
	return a
}

// Converged reports whether the agent's status key decodes, and the agent
// is at most maxLag revisions behind, of etcd's present history, serves
// no refused value (ServesRefused), and its snapshot files hold what it
// serves (no SnapshotError: the front doors read them). (A status key
// that does not decode may still have filled Revision: it says nothing.)
func (a AgentInfo) Converged(maxLag int64) bool {
	return a.Invalid == "" && a.Lag <= maxLag && !a.ServesRefused() && a.Diverged == "" && a.SnapshotError == ""
}

// ServesRefused reports whether, among its skipped keys, the agent may
// serve for one what another agent does not: the last good value of a
// pool, a route, the residency policy, a boost or the epoch, which an
// agent started after the refused write does not have. Skipped keys
// served alike by every agent (routing.ServedAlike: health keys, keys
// outside the grammar) are shown (SKIPPED) but keep no fleet from
// converging: one origin's hand-written heartbeat (a value "up") would
// otherwise fail every operator's --wait-converged, and the operator's
// role cannot delete it. A key named that is not served alike counts;
// past the names, the agent's skipped_alike says how many of the rest
// are; an agent without it (older, or none alike) has the skipped keys it
// does not name counted as refused values.
func (a AgentInfo) ServesRefused() bool {
	for _, rel := range a.SkippedKeys {
		if !routing.ServedAlike(rel) {
			return true
		}
	}
	if a.SkippedAlike > 0 {
		return a.Skipped > a.SkippedAlike
	}
	return a.Skipped > len(a.SkippedKeys)
}

// Why an agent is not converged, as NotConvergedReason and
// NotConvergedError.ByReason name it (the keys of regionctl's -o json
// counts, and status --not-converged's REASON column).
const (
	// ReasonInvalid: its status key (or node record) does not decode.
	ReasonInvalid = "invalid_status"
	// ReasonDiverged: it follows another history or cluster (Diverged).
	ReasonDiverged = "other_history"
	// ReasonRefused: it serves refused values (ServesRefused).
	ReasonRefused = "refused_values"
	// ReasonSnapshot: its snapshot files are not written (SnapshotError).
	ReasonSnapshot = "snapshot_not_written"
	// ReasonBehind: only behind the revision.
	ReasonBehind = "behind"
	// ReasonLost: a lost node (Fleet.Lost), as its record last said.
	ReasonLost = "lost"
	// ReasonVanished: its status key disappeared during a wait before it
	// confirmed the revision (NotConvergedError.Vanished).
	ReasonVanished = "vanished"
)

// Reasons lists every reason in the order they are judged and shown:
// those a lag alone does not explain first, as NotConvergedError names
// them first.
var Reasons = []string{ReasonInvalid, ReasonDiverged, ReasonRefused, ReasonSnapshot, ReasonBehind, ReasonLost, ReasonVanished}

// reasonText is how a summary says each reason.
var reasonText = map[string]string{
	ReasonInvalid:  "with a status key that does not decode",
	ReasonDiverged: "of another history",
	ReasonRefused:  "serving refused values",
	ReasonSnapshot: "with snapshot files not written",
	ReasonBehind:   "behind",
	ReasonLost:     "lost",
	ReasonVanished: "whose status key disappeared during the wait",
}

// ReasonsString is counts (by reason) as a summary says them, in the
// order of Reasons, those of no agent left out: "200 with snapshot files
// not written, 400 behind".
func ReasonsString(counts map[string]int) string {
	var parts []string
	for _, r := range Reasons {
		if n := counts[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, reasonText[r]))
		}
	}
	return strings.Join(parts, ", ")
}

// problem is why an agent known not to be converged is not: the first of
// Reasons that applies to it, ReasonBehind when none but its lag does.
func (a AgentInfo) problem() string {
	switch {
	case a.Invalid != "":
		return ReasonInvalid
	case a.Diverged != "":
		return ReasonDiverged
	case a.ServesRefused():
		return ReasonRefused
	case a.SnapshotError != "":
		return ReasonSnapshot
	}
	return ReasonBehind
}

// NotConvergedReason says why the agent is not Converged(maxLag): the
// first of Reasons that applies ("" when it is converged). An agent that
// is behind and also, say, has its snapshot files not written counts
// under the latter: its lag alone does not explain it.
func (a AgentInfo) NotConvergedReason(maxLag int64) string {
	if a.Converged(maxLag) {
		return ""
	}
	return a.problem()
}

// ReasonCounts counts the agents that are not Converged(maxLag) by
// NotConvergedReason; never nil.
func ReasonCounts(agents []AgentInfo, maxLag int64) map[string]int {
	counts := map[string]int{}
	for _, a := range agents {
		if r := a.NotConvergedReason(maxLag); r != "" {
			counts[r]++
		}
	}
	return counts
}

// Unconverged returns the agents that are not Converged(maxLag).
func (f *Fleet) Unconverged(maxLag int64) []AgentInfo {
	var out []AgentInfo
	for _, a := range f.Agents {
		if !a.Converged(maxLag) {
			out = append(out, a)
		}
	}
	return out
}

// ErrNodeLive is ForgetNode's refusal of a node whose status key is live.
var ErrNodeLive = errors.New("its agent is live (its status key is there)")

// ErrNoNodeRecord is ForgetNode's answer for a node without a record.
var ErrNoNodeRecord = errors.New("no node record")

// ForgetNode deletes the record of node (<root>/nodes/<node>), in one Txn
// that holds only while its status key is absent, and returns the record
// as it was: a node taken out of the fleet without a clean stop is no
// longer reported lost. A live agent's record is refused (ErrNodeLive: it
// would put it back at its next refresh, and it is not lost), and a node
// without one is ErrNoNodeRecord.
func (s *Store) ForgetNode(ctx context.Context, node string) (AgentInfo, error) {
	rec, status := s.ks.Node(node), s.ks.Agent(node)
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(rctx).If(clientv3.Compare(clientv3.Version(status), "=", 0)).
		Then(clientv3.OpDelete(rec, clientv3.WithPrevKV())).Else(clientv3.OpGet(status, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return AgentInfo{}, s.writeErr("delete the node record "+rec, err, Grant{Access: AccessReadWrite, Key: rec}, s.roles.ReadNeed(status))
	}
	if !resp.Succeeded {
		return AgentInfo{}, fmt.Errorf("node %s: %w", node, ErrNodeLive)
	}
	del := resp.Responses[0].GetResponseDeleteRange()
	if del.Deleted == 0 || len(del.PrevKvs) == 0 {
		return AgentInfo{}, fmt.Errorf("node %s: %w at %s", node, ErrNoNodeRecord, rec)
	}
	return agentInfo(rec, node, del.PrevKvs[0].Value, 0, resp.Header.Revision), nil
}

// NodeNames returns the names of the nodes with a record under
// <root>/nodes/ (lost or live), sorted: the names a mistyped node
// is near. One keys-only read.
func (s *Store) NodeNames(ctx context.Context) ([]string, error) {
	prefix := s.ks.NodesPrefix()
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, s.permErr("list the node records "+prefix, err, s.roles.ReadNeed(prefix))
	}
	names := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if node := strings.TrimPrefix(string(kv.Key), prefix); node != "" {
			names = append(names, node)
		}
	}
	return names, nil
}

// ClockAhead is an agent whose status says its clock is ahead of this
// host's.
type ClockAhead struct {
	// Node is the agent's node.
	Node string
	// Ahead is how far its synced_at is past this host's clock.
	Ahead time.Duration
}

// ClocksAhead returns the agents whose synced_at is more than
// MaxClockSkew past now: an agent's synced_at is never later than its own
// clock, so its clock is ahead of this host's, or this host's behind. A
// clock behind cannot be told from a status key (one at rest is up to a
// minute old). Most ahead first. Boosts end at the expires_at regionctl
// sets by its clock, by each agent's clock: a boost of a TTL shorter than
// an agent's lead has ended there when it arrives.
func ClocksAhead(agents []AgentInfo, now time.Time) []ClockAhead {
	var out []ClockAhead
	for _, a := range agents {
		at, err := time.Parse(time.RFC3339Nano, a.SyncedAt)
		if err != nil {
			continue
		}
		if d := at.Sub(now); d > MaxClockSkew {
			out = append(out, ClockAhead{Node: a.Node, Ahead: d})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Ahead > out[j].Ahead || out[i].Ahead == out[j].Ahead && out[i].Node < out[j].Node
	})
	return out
}

// AgentSample reads the status keys of up to n live agents (the first by
// key), for a check that needs no whole fleet (boost's clocks).
func (s *Store) AgentSample(ctx context.Context, n int64) ([]AgentInfo, error) {
	prefix := s.ks.AgentsPrefix()
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(n))
	if err != nil {
		return nil, s.permErr("read "+prefix, err, s.roles.ReadNeed(prefix))
	}
	out := make([]AgentInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, agentInfo(string(kv.Key), strings.TrimPrefix(string(kv.Key), prefix), kv.Value, 0, resp.Header.Revision))
	}
	return out, nil
}
