package routing

import (
	"encoding/json"
	"fmt"
	"time"
)

// tableJSON is the wire shape of /v1/table and of the snapshot file
// (DESIGN §5).
type tableJSON struct {
	Revision  int64                 `json:"revision"`
	Epoch     int64                 `json:"epoch"`
	WrittenAt string                `json:"written_at"`
	Stale     bool                  `json:"stale"`
	Pools     map[string]poolJSON   `json:"pools"`
	Routes    map[string]*Route     `json:"routes"`
	Policy    policyJSON            `json:"policy"`
	Effective map[string]*Effective `json:"effective"`
	Skipped   []Skipped             `json:"skipped"`
	Overrides map[string]*Override  `json:"overrides,omitempty"`
}

type policyJSON struct {
	Residency Residency `json:"residency"`
}

// poolJSON is a pool plus its health as seen by the table.
type poolJSON struct {
	Pool
	Healthy bool
}

func (p poolJSON) MarshalJSON() ([]byte, error) {
	extra := Extra{}
	for k, v := range p.Extra {
		extra[k] = v
	}
	extra["healthy"] = json.RawMessage(fmt.Sprint(p.Healthy))
	type plain Pool
	return encodeWithExtra(plain(p.Pool), extra)
}

func (p *poolJSON) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &p.Pool); err != nil {
		return err
	}
	raw, ok := p.Extra["healthy"]
	delete(p.Extra, "healthy")
	if len(p.Extra) == 0 {
		p.Extra = nil
	}
	if !ok {
		return fmt.Errorf("pool has no healthy field")
	}
	return json.Unmarshal(raw, &p.Healthy)
}

// JSON returns the table JSON (DESIGN §5) with health evaluated at
// and written_at set to writtenAt.
func (t *Table) JSON(writtenAt time.Time) ([]byte, error) {
	t = t.At(writtenAt)
	out := tableJSON{
		Revision:  t.revision,
		Epoch:     t.epoch,
		WrittenAt: writtenAt.UTC().Format(time.RFC3339Nano),
		Stale:     t.stale,
		Pools:     make(map[string]poolJSON, len(t.pools)),
		Routes:    t.routes,
		Policy:    policyJSON{Residency: t.policy},
		Effective: make(map[string]*Effective, len(t.eff)),
		Skipped:   t.skipped,
		Overrides: t.overrides,
	}
	if out.Skipped == nil {
		out.Skipped = []Skipped{}
	}
	for id, p := range t.pools {
		out.Pools[id] = poolJSON{Pool: p.Pool, Healthy: t.healthy(p, writtenAt) && !p.down}
	}
	for id, e := range t.eff {
		name := Unknown
		if id < len(countries) {
			name = countries[id]
		}
		out.Effective[name] = e
	}
	return json.Marshal(out)
}

// LoadTableJSON rebuilds a table from table JSON written by JSON
// (the snapshot file). The table is marked stale, keeps the pools' health
// as written, and uses the routes as written (overrides already applied).
// It also returns the file's written_at.
func LoadTableJSON(b []byte) (*Table, time.Time, error) {
	var in tableJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, time.Time{}, fmt.Errorf("decode table: %w", err)
	}
	writtenAt, err := time.Parse(time.RFC3339Nano, in.WrittenAt)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("decode table: written_at: %w", err)
	}
	t := &Table{
		revision:  in.Revision,
		epoch:     in.Epoch,
		stale:     true,
		grace:     DefaultHealthGrace,
		builtAt:   writtenAt,
		policy:    in.Policy.Residency,
		pools:     map[string]*PoolState{},
		routes:    map[string]*Route{},
		overrides: map[string]*Override{},
		applied:   map[string][]string{},
		good:      map[string]goodValue{},
		skipped:   in.Skipped,
	}
	if errs := t.policy.normalize(); len(errs) > 0 {
		return nil, time.Time{}, fmt.Errorf("decode table: policy: %w", errs)
	}
	for _, id := range sortedKeys(in.Pools) {
		p := in.Pools[id]
		if !ValidPoolID(id) {
			return nil, time.Time{}, fmt.Errorf("decode table: invalid pool id %q", id)
		}
		if errs := p.Pool.normalize(); len(errs) > 0 {
			return nil, time.Time{}, fmt.Errorf("decode table: %w", errs.prefixed(PoolKey(id)))
		}
		healthy := p.Healthy
		t.pools[id] = &PoolState{Pool: p.Pool, fixedHealthy: &healthy}
	}
	for _, name := range sortedKeys(in.Routes) {
		r := in.Routes[name]
		if !ValidRouteName(name) {
			return nil, time.Time{}, fmt.Errorf("decode table: invalid route name %q", name)
		}
		if r == nil {
			return nil, time.Time{}, fmt.Errorf("decode table: route %s is null", name)
		}
		if errs := r.normalize(name); len(errs) > 0 {
			return nil, time.Time{}, fmt.Errorf("decode table: %w", errs.prefixed(RouteKey(name)))
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
	t.build(writtenAt)
	return t, writtenAt, nil
}
