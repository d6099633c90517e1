package routing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
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
	runs := effRuns(enc.eff)
	size := 512 + len(enc.pools) + len(enc.routes) + len(enc.policy)
	for _, r := range runs {
		size += len(r)
	}
	b.Grow(size)
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
	b.Write(enc.pools)
	b.Write(enc.routes)
	b.Write(enc.policy)
	b.WriteString(`,"effective":{`)
	for _, r := range runs {
		b.Write(r)
	}
	b.WriteByte('}')
	if len(t.skipped) == 0 {
		b.WriteString(`,"skipped":[]`)
	} else if err := writeField(b, "skipped", t.skipped); err != nil {
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

// encodeValues encodes the sections of the table for JSON, reusing the
// previous table's sections when unchanged and its encoding of every value
// that did not change.
func (t *Table) encodeValues(prev *Table) {
	var pe *encoded
	if prev != nil {
		pe = prev.enc
	}
	enc := t.enc
	if pe != nil && sameMap(t.pools, prev.pools) && sameMap(t.eligibleAt, prev.eligibleAt) {
		enc.poolJS, enc.pools = pe.poolJS, pe.pools
	} else {
		enc.poolJS = make(map[string][]byte, len(t.pools))
		for id, p := range t.pools {
			healthy := t.eligibleAt[id]
			if pe != nil {
				if pp, ok := prev.pools[id]; ok && p.src != nil && pp.src == p.src && prev.eligibleAt[id] == healthy {
					enc.poolJS[id] = pe.poolJS[id]
					continue
				}
			}
			enc.poolJS[id], _ = json.Marshal(poolJSON{Pool: p.Pool, Healthy: healthy})
		}
		enc.pools = appendObject(nil, "pools", enc.poolJS)
	}
	if pe != nil && sameMap(t.routes, prev.routes) {
		enc.routeJS, enc.routes = pe.routeJS, pe.routes
	} else {
		enc.routeJS = make(map[string][]byte, len(t.routes))
		for name, r := range t.routes {
			if pe != nil && prev.routes[name] == r {
				enc.routeJS[name] = pe.routeJS[name]
				continue
			}
			enc.routeJS[name], _ = json.Marshal(r)
		}
		enc.routes = appendObject(nil, "routes", enc.routeJS)
	}
	if pe != nil && len(prev.good) > 0 && t.sameGoodOrAbsent(prev, PolicyKey) {
		enc.policy = pe.policy
	} else {
		js, _ := json.Marshal(policyJSON{Residency: t.policy})
		enc.policy = append([]byte(`,"policy":`), js...)
	}
	t.encodeEffective(pe, prev)
}

// encodeEffective makes the members of the effective section. A member
// whose entry is the previous table's is the previous table's piece (no
// copy); new members go into one new array. When the pieces come from too
// many arrays, all members are copied into one again, so rendering stays a
// few large copies.
func (t *Table) encodeEffective(pe *encoded, prev *Table) {
	enc := t.enc
	enc.eff = make([]effPart, len(t.eff))
	reuse := pe != nil && len(pe.eff) == len(t.eff) && len(prev.eff) == len(t.eff)
	var buf []byte
	for id, e := range t.eff {
		if reuse && prev.eff[id] == e {
			enc.eff[id] = pe.eff[id]
			continue
		}
		start := len(buf)
		buf = appendEffMember(buf, id, e)
		enc.eff[id] = effPart{start: int32(start), end: int32(len(buf))}
	}
	for id := range enc.eff {
		if enc.eff[id].buf == nil {
			enc.eff[id].buf = buf
		}
	}
	if runs := len(effRuns(enc.eff)); runs > 32 {
		buf = buf[:0:0]
		for id, e := range t.eff {
			start := len(buf)
			buf = appendEffMember(buf, id, e)
			enc.eff[id] = effPart{start: int32(start), end: int32(len(buf))}
		}
		for id := range enc.eff {
			enc.eff[id].buf = buf
		}
	}
}

// appendEffMember appends the effective member of country id.
func appendEffMember(b []byte, id int, e *Effective) []byte {
	if id > 0 {
		b = append(b, ',')
	}
	name := Unknown
	if id < len(countries) {
		name = countries[id]
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":`...)
	if e.js != nil {
		return append(b, e.js...)
	}
	return appendEffectiveJSON(b, e)
}

// effRuns merges the pieces that follow each other in the same array.
func effRuns(parts []effPart) [][]byte {
	var runs [][]byte
	for i := 0; i < len(parts); {
		p := parts[i]
		end := p.end
		j := i + 1
		for ; j < len(parts) && parts[j].start == end && sameArray(parts[j].buf, p.buf); j++ {
			end = parts[j].end
		}
		runs = append(runs, p.buf[p.start:end])
		i = j
	}
	return runs
}

// sameArray reports whether two non-empty slices share their first element.
func sameArray(a, b []byte) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }

// appendObject appends ,"name":{…} from encoded members, in key order.
func appendObject(b []byte, name string, members map[string][]byte) []byte {
	size := len(name) + 8
	for k, v := range members {
		size += len(k) + len(v) + 4
	}
	b = slices.Grow(b, size)
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":{`...)
	for i, k := range sortedKeys(members) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = append(b, members[k]...)
	}
	return append(b, '}')
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
