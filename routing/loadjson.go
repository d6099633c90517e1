package routing

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// LoadTableJSON rebuilds a table from table JSON written by JSON
// (the snapshot file). The table is marked stale, keeps the pools' health
// as written, and uses the routes as written (overrides already applied).
// It also returns the file's written_at.
func LoadTableJSON(b []byte) (*Table, time.Time, error) {
	t, h, err := LoadTableJSONHeader(b)
	return t, h.WrittenAt, err
}

// LoadTableJSONHeader is LoadTableJSON returning the header's times: its
// SyncedAt is zero when the JSON has no synced_at (written before the
// member existed).
func LoadTableJSONHeader(b []byte) (*Table, JSONHeader, error) {
	var in tableJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, JSONHeader{}, fmt.Errorf("decode table: %w", err)
	}
	writtenAt, err := time.Parse(time.RFC3339Nano, in.WrittenAt)
	if err != nil {
		return nil, JSONHeader{}, fmt.Errorf("decode table: written_at: %w", err)
	}
	h := JSONHeader{WrittenAt: writtenAt}
	if in.SyncedAt != "" {
		if h.SyncedAt, err = time.Parse(time.RFC3339Nano, in.SyncedAt); err != nil {
			return nil, JSONHeader{}, fmt.Errorf("decode table: synced_at: %w", err)
		}
	}
	t, err := in.table(writtenAt)
	if err != nil {
		return nil, JSONHeader{}, fmt.Errorf("decode table: %w", err)
	}
	return t, h, nil
}

// table rebuilds the table of the decoded JSON, built at builtAt.
func (in *tableJSON) table(builtAt time.Time) (*Table, error) {
	var cid uint64
	if in.ClusterID != "" {
		var err error
		if cid, err = strconv.ParseUint(in.ClusterID, 16, 64); err != nil {
			return nil, fmt.Errorf("cluster_id %q: %w", in.ClusterID, err)
		}
	}
	t := &Table{tableState: tableState{
		revision:  in.Revision,
		changed:   in.Revision,
		epoch:     in.Epoch,
		stale:     true,
		clusterID: cid,
		grace:     DefaultHealthGrace,
		builtAt:   builtAt,
		policy:    in.Policy.Residency,
		routes:    map[string]*Route{},
		overrides: map[string]*Override{},
		applied:   map[string][]string{},
		skipped:   in.Skipped,
	}}
	if errs := t.policy.normalize(); len(errs) > 0 {
		return nil, fmt.Errorf("policy: %w", errs)
	}
	for _, id := range sortedKeys(in.Pools) {
		p := in.Pools[id]
		if !ValidPoolID(id) {
			return nil, fmt.Errorf("invalid pool id %q", id)
		}
		if errs := p.Pool.normalize(); len(errs) > 0 {
			return nil, fmt.Errorf("%w", errs.prefixed(PoolKey(id)))
		}
		healthy := p.Healthy
		t.pools.set(id, &PoolState{Pool: &p.Pool, fixedHealthy: &healthy})
	}
	for _, name := range sortedKeys(in.Routes) {
		r := in.Routes[name]
		if !ValidRouteName(name) {
			return nil, fmt.Errorf("invalid route name %q", name)
		}
		if r == nil {
			return nil, fmt.Errorf("route %s is null", name)
		}
		if errs := r.normalize(name); len(errs) > 0 {
			return nil, fmt.Errorf("%w", errs.prefixed(RouteKey(name)))
		}
		t.routes[name] = r
	}
	for _, id := range sortedKeys(in.Overrides) {
		if o := in.Overrides[id]; o != nil {
			t.overrides[id] = o
			if _, ok := t.routes[o.Route]; ok {
				t.applied[o.Route] = append(t.applied[o.Route], id)
			}
		}
	}
	t.build(builtAt, nil, nil)
	return t, nil
}
