package routing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// tableJSON is the wire shape of /v1/table and of the snapshot file
// (DESIGN §5).
type tableJSON struct {
	Revision  int64                 `json:"revision"`
	Epoch     int64                 `json:"epoch"`
	WrittenAt string                `json:"written_at"`
	Stale     bool                  `json:"stale"`
	ClusterID string                `json:"cluster_id,omitempty"`
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
// and written_at set to writtenAt. The effective entries, the bulk of the
// document, are encoded once when a table is built (and reused from the
// previous table when unchanged), so rendering after a change is cheap.
func (t *Table) JSON(writtenAt time.Time) ([]byte, error) { return t.JSONInto(nil, writtenAt) }

// JSONInto is JSON rendered into dst's storage (its contents are
// overwritten), so a caller that renders often can reuse its buffers.
func (t *Table) JSONInto(dst []byte, writtenAt time.Time) ([]byte, error) {
	t = t.At(writtenAt)
	b := bytes.NewBuffer(dst[:0])
	enc := t.encodings()
	b.Grow(4096 + 400*len(t.eff) + 200*len(enc.routeJS))
	b.WriteString(`{"revision":`)
	b.WriteString(strconv.FormatInt(t.revision, 10))
	b.WriteString(`,"epoch":`)
	b.WriteString(strconv.FormatInt(t.epoch, 10))
	b.WriteString(`,"written_at":"`)
	b.WriteString(writtenAt.UTC().Format(time.RFC3339Nano))
	b.WriteString(`","stale":`)
	b.WriteString(strconv.FormatBool(t.stale))
	if t.clusterID != 0 {
		b.WriteString(`,"cluster_id":"`)
		b.WriteString(strconv.FormatUint(t.clusterID, 16))
		b.WriteByte('"')
	}
	writeObject(b, "pools", enc.poolJS)
	writeObject(b, "routes", enc.routeJS)
	if err := writeField(b, "policy", policyJSON{Residency: t.policy}); err != nil {
		return nil, err
	}
	b.WriteString(`,"effective":{`)
	for id, e := range t.eff {
		if id > 0 {
			b.WriteByte(',')
		}
		name := Unknown
		if id < len(countries) {
			name = countries[id]
		}
		b.WriteByte('"')
		b.WriteString(name)
		b.WriteString(`":`)
		js := e.js
		if js == nil {
			var err error
			if js, err = json.Marshal(e); err != nil {
				return nil, fmt.Errorf("encode effective %s: %w", name, err)
			}
		}
		b.Write(js)
	}
	b.WriteByte('}')
	skipped := t.skipped
	if skipped == nil {
		skipped = []Skipped{}
	}
	if err := writeField(b, "skipped", skipped); err != nil {
		return nil, err
	}
	if len(t.overrides) > 0 {
		if err := writeField(b, "overrides", t.overrides); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// encodeValues encodes the pools (with their health) and routes of the
// table for JSON, reusing the previous table's encoding of every value that
// did not change.
func (t *Table) encodeValues(prev *Table) {
	var pe *encoded
	if prev != nil {
		pe = prev.enc
	}
	t.enc.poolJS = make(map[string][]byte, len(t.pools))
	for id, p := range t.pools {
		healthy := t.eligibleAt[id]
		if pe != nil {
			if pp, ok := prev.pools[id]; ok && p.src != nil && pp.src == p.src && prev.eligibleAt[id] == healthy {
				t.enc.poolJS[id] = pe.poolJS[id]
				continue
			}
		}
		t.enc.poolJS[id], _ = json.Marshal(poolJSON{Pool: p.Pool, Healthy: healthy})
	}
	t.enc.routeJS = make(map[string][]byte, len(t.routes))
	for name, r := range t.routes {
		if pe != nil && prev.routes[name] == r {
			t.enc.routeJS[name] = pe.routeJS[name]
			continue
		}
		t.enc.routeJS[name], _ = json.Marshal(r)
	}
}

// writeObject appends ,"name":{…} from encoded members, in key order.
func writeObject(b *bytes.Buffer, name string, members map[string][]byte) {
	b.WriteString(`,"`)
	b.WriteString(name)
	b.WriteString(`":{`)
	for i, k := range sortedKeys(members) {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(members[k])
	}
	b.WriteByte('}')
}

// writeField appends ,"name":<json of v>.
func writeField(b *bytes.Buffer, name string, v any) error {
	js, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode table %s: %w", name, err)
	}
	b.WriteString(`,"`)
	b.WriteString(name)
	b.WriteString(`":`)
	b.Write(js)
	return nil
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
	var cid uint64
	if in.ClusterID != "" {
		if cid, err = strconv.ParseUint(in.ClusterID, 16, 64); err != nil {
			return nil, time.Time{}, fmt.Errorf("decode table: cluster_id %q: %w", in.ClusterID, err)
		}
	}
	t := &Table{
		revision:  in.Revision,
		epoch:     in.Epoch,
		stale:     true,
		clusterID: cid,
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
	t.build(writtenAt, nil, nil)
	return t, writtenAt, nil
}
