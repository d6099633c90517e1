package store

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/backoff"
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
}

// Fleet is the convergence picture of every live agent.
type Fleet struct {
	// Revision is the etcd revision read at.
	Revision int64 `json:"revision"`
	// RoutingRevision is the newest mod revision under <root>/routing/:
	// what an agent must have applied to be current.
	RoutingRevision int64       `json:"routing_revision"`
	Epoch           int64       `json:"epoch"`
	Agents          []AgentInfo `json:"agents"`
}

// Fleet reads the agents' status keys and the newest routing change at one
// revision.
func (s *Store) Fleet(ctx context.Context) (*Fleet, error) {
	prefix := s.ks.AgentsPrefix()
	kvs, rev, err := s.getRange(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), 0)
	if err != nil {
		return nil, err
	}
	rp := s.ks.Routing()
	rkvs, _, err := s.getRange(ctx, rp, clientv3.GetPrefixRangeEnd(rp), rev, clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	f := &Fleet{Revision: rev, Agents: []AgentInfo{}}
	for _, kv := range rkvs {
		f.RoutingRevision = max(f.RoutingRevision, kv.ModRevision)
		if string(kv.Key) == s.ks.Epoch() {
			f.Epoch = s.epochAt(ctx, rev)
		}
	}
	for _, kv := range kvs {
		f.Agents = append(f.Agents, agentInfo(string(kv.Key), strings.TrimPrefix(string(kv.Key), prefix), kv.Value, f.RoutingRevision))
	}
	return f, nil
}

// epochAt reads the epoch at rev; 0 when unreadable.
func (s *Store) epochAt(ctx context.Context, rev int64) int64 {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.ks.Epoch(), clientv3.WithRev(rev))
	if err != nil || len(resp.Kvs) == 0 {
		return 0
	}
	st := &State{}
	st.add("epoch", resp.Kvs[0])
	return st.Epoch
}

func agentInfo(key, node string, value []byte, want int64) AgentInfo {
	a := AgentInfo{Key: key}
	if err := json.Unmarshal(value, &a.AgentStatus); err != nil {
		a.Invalid = err.Error()
	}
	if a.Node == "" {
		a.Node = node
	}
	a.Lag = max(0, want-a.Revision)
	return a
}

// Lagging returns the agents more than maxLag revisions behind.
func (f *Fleet) Lagging(maxLag int64) []AgentInfo {
	var out []AgentInfo
	for _, a := range f.Agents {
		if a.Lag > maxLag {
			out = append(out, a)
		}
	}
	return out
}

// WaitConverged returns once every live agent serves revision rev or later
// (an agent whose key disappears is dead and no longer waited for). When
// ctx ends first it returns a *NotConvergedError naming the laggards.
func (s *Store) WaitConverged(ctx context.Context, rev int64) error {
	start := time.Now()
	prefix := s.ks.AgentsPrefix()
	agents := map[string]AgentInfo{}
	for {
		kvs, hdr, err := s.getRange(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), 0)
		if err != nil {
			return s.notConverged(ctx, rev, start, agents, err)
		}
		clear(agents)
		for _, kv := range kvs {
			agents[string(kv.Key)] = agentInfo(string(kv.Key), strings.TrimPrefix(string(kv.Key), prefix), kv.Value, rev)
		}
		if err := s.watchUntilConverged(ctx, rev, hdr+1, agents); err != nil {
			return s.notConverged(ctx, rev, start, agents, err)
		}
		if converged(agents) {
			return nil
		}
		if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
			return s.notConverged(ctx, rev, start, agents, err)
		}
	}
}

// watchUntilConverged applies agent-key events to agents until all are at
// rev (nil), the watch closes (nil; the caller relists) or ctx ends.
func (s *Store) watchUntilConverged(ctx context.Context, rev, from int64, agents map[string]AgentInfo) error {
	if converged(agents) {
		return nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	prefix := s.ks.AgentsPrefix()
	for wr := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := wr.Err(); err != nil {
			return nil
		}
		for _, ev := range wr.Events {
			k := string(ev.Kv.Key)
			if ev.Type == clientv3.EventTypeDelete {
				delete(agents, k)
				continue
			}
			agents[k] = agentInfo(k, strings.TrimPrefix(k, prefix), ev.Kv.Value, rev)
		}
		if converged(agents) {
			return nil
		}
	}
	return ctx.Err()
}

func converged(agents map[string]AgentInfo) bool {
	for _, a := range agents {
		if a.Lag > 0 {
			return false
		}
	}
	return true
}

// notConverged turns a deadline into *NotConvergedError; other errors are
// returned as they are.
func (s *Store) notConverged(ctx context.Context, rev int64, start time.Time, agents map[string]AgentInfo, err error) error {
	if ctx.Err() == nil {
		return err
	}
	e := &NotConvergedError{Revision: rev, Waited: time.Since(start)}
	for _, a := range agents {
		if a.Lag > 0 {
			e.Lagging = append(e.Lagging, a)
		}
	}
	sort.Slice(e.Lagging, func(i, j int) bool { return e.Lagging[i].Node < e.Lagging[j].Node })
	return e
}
