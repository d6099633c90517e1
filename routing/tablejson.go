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
// (docs/agent.md).
type tableJSON struct {
	Revision  int64                 `json:"revision"`
	Epoch     int64                 `json:"epoch"`
	WrittenAt string                `json:"written_at"`
	SyncedAt  string                `json:"synced_at,omitempty"`
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

// poolJSONSize is about the size of pool id's member in the pools section
// (",id:" and appendPoolJSON's object), for one allocation per member.
func poolJSONSize(id string, p *Pool) int {
	n := len(id) + len(p.Host) + len(p.Region) + len(p.Residency) + len(p.Status) + 96
	for k, v := range p.Attrs {
		n += len(k) + len(v) + 6
	}
	for k, v := range p.Extra {
		n += len(k) + len(v) + 4
	}
	return n
}

// appendPoolJSON appends the table JSON of pool p with its health: what
// json.Marshal(poolJSON{...}) writes (the fields in declaration order,
// empty optional ones left out, attrs by key, the extra members and
// healthy by key after them), without reflection. An extra member that is
// not valid JSON, which decoding never keeps, is left out. A field added
// to Pool is added here too: TestAppendPoolJSONEncodesEveryField fails
// until it is.
func appendPoolJSON(b []byte, p *Pool, healthy bool) []byte {
	b = append(b, `{"host":`...)
	b = appendJSONString(b, p.Host)
	if p.Region != "" {
		b = append(b, `,"region":`...)
		b = appendJSONString(b, p.Region)
	}
	b = append(b, `,"residency":`...)
	b = appendJSONString(b, p.Residency)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, p.Status)
	if p.HealthCheck {
		b = append(b, `,"health_check":true`...)
	}
	if len(p.Attrs) > 0 {
		b = append(b, `,"attrs":`...)
		b = appendStringMap(b, p.Attrs)
	}
	if len(p.Extra) == 0 { // the common case: no members beyond the known ones
		b = append(b, `,"healthy":`...)
		b = strconv.AppendBool(b, healthy)
		return append(b, '}')
	}
	keys := make([]string, 0, len(p.Extra)+1)
	for k := range p.Extra {
		if k != "healthy" {
			keys = append(keys, k)
		}
	}
	keys = append(keys, "healthy")
	slices.Sort(keys)
	for _, k := range keys {
		b = append(b, ',')
		b = appendJSONString(b, k)
		b = append(b, ':')
		if k == "healthy" {
			b = strconv.AppendBool(b, healthy)
			continue
		}
		var c bytes.Buffer
		if err := json.Compact(&c, p.Extra[k]); err == nil {
			b = append(b, c.Bytes()...)
		} else {
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
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

// JSONHeader holds the times in a table JSON's header: when it was
// rendered and when its table was last confirmed current against etcd.
type JSONHeader struct {
	// WrittenAt is the member written_at: when the JSON was rendered. The
	// pools' health is evaluated at it.
	WrittenAt time.Time
	// SyncedAt is the member synced_at: when the table was last confirmed
	// current against etcd (watch.Status.SyncedAt). Zero leaves the member
	// out, as a table JSON without it was written.
	SyncedAt time.Time
}

// JSON returns the table JSON (docs/agent.md) with health evaluated at
// and written_at set to writtenAt, without synced_at. The effective
// entries, the bulk of the document, are encoded once when a table is
// built (and reused from the previous table when unchanged), so rendering
// after a change is cheap.
func (t *Table) JSON(writtenAt time.Time) ([]byte, error) {
	return t.JSONWith(nil, JSONHeader{WrittenAt: writtenAt})
}

// JSONInto is JSON rendered into dst's storage (its contents are
// overwritten), so a caller that renders often can reuse its buffers.
func (t *Table) JSONInto(dst []byte, writtenAt time.Time) ([]byte, error) {
	return t.JSONWith(dst, JSONHeader{WrittenAt: writtenAt})
}

// JSONWith is JSONInto with the header's times h: written_at and, when
// h.SyncedAt is set, synced_at.
func (t *Table) JSONWith(dst []byte, h JSONHeader) ([]byte, error) {
	t = t.At(h.WrittenAt)
	enc := t.encodings()
	var runsBuf [40][]byte
	runs := appendEffRuns(runsBuf[:0], enc.eff)
	pools := enc.pools()
	size := 512 + len(pools) + len(enc.routes) + len(enc.policy)
	for _, r := range runs {
		size += len(r)
	}
	b := slices.Grow(dst[:0], size)
	b = t.appendHeader(b, h)
	b = append(b, pools...)
	b = append(b, enc.routes...)
	b = append(b, enc.policy...)
	b = append(b, effectiveOpen...)
	for _, r := range runs {
		b = append(b, r...)
	}
	b, err := t.appendTail(b)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// JSONSegments returns JSON(writtenAt) as segments: JSONSegmentsWith with
// written_at alone in the header.
func (t *Table) JSONSegments(dst [][]byte, scratch []byte, writtenAt time.Time) (segs [][]byte, scratchOut []byte, err error) {
	return t.JSONSegmentsWith(dst, scratch, JSONHeader{WrittenAt: writtenAt})
}

// JSONSegmentsWith returns JSONWith(nil, h) as segments whose
// concatenation is that document, without copying its bulk (for writev):
// the sections and the runs of effective members are the table's own
// encodings, and only the small parts (the header, the opening of the
// effective section, skipped, overrides, the closing brace) are made, in
// scratch. The segments and the small parts are appended to dst[:0] and
// scratch[:0], so a caller that renders often can reuse both.
//
// The first segment is the header: the opening brace and the members
// revision, epoch, written_at, synced_at (when h.SyncedAt is set), stale
// and cluster_id, in this order. No segment is empty; there is one per
// pool and a few dozen more at most.
//
// The returned slices alias the table's encodings and scratch: callers
// must not modify them. The table's encodings never change, so segments
// stay valid while held (they keep the arrays alive), however long; the
// small parts stay valid until scratch is reused.
func (t *Table) JSONSegmentsWith(dst [][]byte, scratch []byte, h JSONHeader) (segs [][]byte, scratchOut []byte, err error) {
	t = t.At(h.WrittenAt)
	enc := t.encodings()
	// All the small parts first, then the segments into scratch, each
	// capped at its end.
	s := t.appendHeader(scratch[:0], h)
	header := len(s)
	s = append(s, effectiveOpen...)
	open := len(s)
	if s, err = t.appendTail(s); err != nil {
		return dst[:0], s, err
	}
	segs = append(dst[:0], s[:header:header])
	segs = enc.appendPoolSegments(segs)
	for _, sec := range [][]byte{enc.routes, enc.policy} {
		if len(sec) > 0 {
			segs = append(segs, sec)
		}
	}
	segs = append(segs, s[header:open:open])
	segs = appendEffRuns(segs, enc.eff)
	segs = append(segs, s[open:len(s):len(s)])
	return segs, s, nil
}

// SameContent reports whether t and u render the same table JSON but for
// the members revision, written_at and synced_at: their content identity,
// what a writer compares to skip rewriting an unchanged file (a progress
// notification moves only the revision). Both are taken as they are: a
// caller comparing at a time passes t.At(now), as rendered. Encodings
// shared between the tables compare without being read.
func (t *Table) SameContent(u *Table) bool {
	if t == u {
		return true
	}
	if t == nil || u == nil || t.epoch != u.epoch || t.stale != u.stale || t.clusterID != u.clusterID ||
		len(t.skipped) != len(u.skipped) || len(t.overrides) != len(u.overrides) {
		return false
	}
	a, b := t.encodings(), u.encodings()
	if !samePools(a, b) || !bytes.Equal(a.routes, b.routes) || !bytes.Equal(a.policy, b.policy) {
		return false
	}
	var ra, rb [40][]byte
	if !equalConcat(appendEffRuns(ra[:0], a.eff), appendEffRuns(rb[:0], b.eff)) {
		return false
	}
	ta, errA := t.appendTail(nil)
	tb, errB := u.appendTail(nil)
	return errA == nil && errB == nil && bytes.Equal(ta, tb)
}

// equalConcat reports whether the concatenations of a and b are equal.
// Pieces that are the same memory compare without being read.
func equalConcat(a, b [][]byte) bool {
	n := 0
	for _, s := range a {
		n += len(s)
	}
	for _, s := range b {
		n -= len(s)
	}
	if n != 0 {
		return false
	}
	var x, y []byte
	for i, j := 0, 0; ; {
		for len(x) == 0 && i < len(a) {
			x, i = a[i], i+1
		}
		for len(y) == 0 && j < len(b) {
			y, j = b[j], j+1
		}
		if len(x) == 0 || len(y) == 0 {
			return len(x) == len(y)
		}
		k := min(len(x), len(y))
		if &x[0] != &y[0] && !bytes.Equal(x[:k], y[:k]) {
			return false
		}
		x, y = x[k:], y[k:]
	}
}

// effectiveOpen opens the effective section.
const effectiveOpen = `,"effective":{`

// appendHeader appends the table JSON up to the pools: the opening brace
// and the members revision, epoch, written_at, synced_at (when set),
// stale and cluster_id.
func (t *Table) appendHeader(b []byte, h JSONHeader) []byte {
	b = append(b, `{"revision":`...)
	b = strconv.AppendInt(b, t.revision, 10)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendInt(b, t.epoch, 10)
	b = append(b, `,"written_at":"`...)
	b = h.WrittenAt.UTC().AppendFormat(b, time.RFC3339Nano)
	if !h.SyncedAt.IsZero() {
		b = append(b, `","synced_at":"`...)
		b = h.SyncedAt.UTC().AppendFormat(b, time.RFC3339Nano)
	}
	b = append(b, `","stale":`...)
	b = strconv.AppendBool(b, t.stale)
	if t.clusterID != 0 {
		b = append(b, `,"cluster_id":"`...)
		b = strconv.AppendUint(b, t.clusterID, 16)
		b = append(b, '"')
	}
	return b
}

// appendTail appends the table JSON after the effective members: the end
// of the effective section, skipped, overrides and the closing brace. On
// error it returns b as far as written.
func (t *Table) appendTail(b []byte) ([]byte, error) {
	b = append(b, '}')
	var err error
	if len(t.skipped) == 0 {
		b = append(b, `,"skipped":[]`...)
	} else if b, err = appendField(b, "skipped", t.skipped); err != nil {
		return b, err
	}
	if len(t.overrides) > 0 {
		if b, err = appendField(b, "overrides", t.overrides); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
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
		enc.poolNames, enc.poolMembers, enc.poolSrc, enc.poolUp = pe.poolNames, pe.poolMembers, pe.poolSrc, pe.poolUp
	} else {
		t.encodePools(pe, prev)
	}
	if pe != nil && sameMap(t.routes, prev.routes) {
		enc.routeNames, enc.routeJS, enc.routes = pe.routeNames, pe.routeJS, pe.routes
	} else {
		t.encodeRoutes(pe, prev)
	}
	if pe != nil && prev.good.len() > 0 && t.sameGoodOrAbsent(prev, PolicyKey) {
		enc.policy = pe.policy
	} else {
		js, _ := json.Marshal(policyJSON{Residency: t.policy})
		enc.policy = append([]byte(`,"policy":`), js...)
	}
	t.encodeEffective(pe, prev)
}

// encodePools makes the pools section, reusing the previous table's order
// of ids (merging in the new ones: no sort of them all) and its encoding of
// every pool made from the same stored value with the same health.
func (t *Table) encodePools(pe *encoded, prev *Table) {
	enc := t.enc
	var names []string
	var from []int // from[i]: index of names[i] in pe's lists, or -1
	if pe == nil || pe.poolNames == nil {
		names = sortedKeys(t.pools)
	} else {
		names, from = mergeNames(pe.poolNames, prev.pools, t.pools)
	}
	n := len(names)
	enc.poolNames = names
	enc.poolMembers, enc.poolSrc, enc.poolUp = make([][]byte, n), make([]*Pool, n), make([]bool, n)
	var todo []int // the pools to encode: new, changed, or health changed
	for i, id := range names {
		p, up := t.pools[id], t.eligibleAt[id]
		if from != nil {
			if j := from[i]; j >= 0 && p.src != nil && pe.poolSrc[j] == p.src && pe.poolUp[j] == up {
				enc.poolMembers[i], enc.poolSrc[i], enc.poolUp[i] = pe.poolMembers[j], p.src, up
				continue
			}
		}
		todo = append(todo, i)
	}
	// Many (a list) across CPUs, a few (a change) here: each index's own
	// slots are written, the maps only read.
	inParallel(len(todo), func(lo, hi int) {
		for _, i := range todo[lo:hi] {
			id := names[i]
			p, up := t.pools[id], t.eligibleAt[id]
			m := append(make([]byte, 0, poolJSONSize(id, &p.Pool)), ',')
			m = appendJSONString(m, id)
			m = append(m, ':')
			enc.poolMembers[i], enc.poolSrc[i], enc.poolUp[i] = appendPoolJSON(m, &p.Pool, up), p.src, up
		}
	})
}

// poolsOpen opens the pools section.
const poolsOpen = `,"pools":{`

// appendPoolSegments appends the pools section as segments: the opening,
// one per pool, the closing brace.
func (enc *encoded) appendPoolSegments(segs [][]byte) [][]byte {
	segs = append(segs, []byte(poolsOpen))
	for i, m := range enc.poolMembers {
		if i == 0 {
			m = m[1:] // no comma before the first member
		}
		segs = append(segs, m)
	}
	return append(segs, []byte("}"))
}

// pools returns the pools section as one buffer, joined on first use.
func (enc *encoded) pools() []byte {
	enc.poolsOnce.Do(func() {
		size := len(poolsOpen) + 1
		for _, m := range enc.poolMembers {
			size += len(m)
		}
		b := make([]byte, 0, size)
		for _, seg := range enc.appendPoolSegments(nil) {
			b = append(b, seg...)
		}
		enc.poolsJoined = b
	})
	return enc.poolsJoined
}

// samePools reports whether a and b hold the same pools section. Members
// that are the same memory compare without being read.
func samePools(a, b *encoded) bool {
	if len(a.poolMembers) != len(b.poolMembers) {
		return false
	}
	for i, m := range a.poolMembers {
		n := b.poolMembers[i]
		if len(m) != len(n) || (len(m) > 0 && &m[0] != &n[0] && !bytes.Equal(m, n)) {
			return false
		}
	}
	return true
}

// mergeNames returns the keys of m in order, given old, the sorted keys
// of oldSet (an earlier version of m): old without the keys m lost,
// merged with the keys m gained (only those are sorted). from[i] is the
// index in old of names[i], or -1 for a gained key. When m has exactly
// old's keys, names is old itself.
func mergeNames[V any](old []string, oldSet, m map[string]V) (names []string, from []int) {
	in := make([]bool, len(old)) // in[i]: m still has old[i]
	kept := 0
	for i, k := range old {
		if _, ok := m[k]; ok {
			in[i] = true
			kept++
		}
	}
	var gained []string
	if kept < len(m) {
		for k := range m {
			if _, ok := oldSet[k]; !ok {
				gained = append(gained, k)
			}
		}
		slices.Sort(gained)
	}
	from = make([]int, 0, len(m))
	if kept == len(old) && len(gained) == 0 {
		for i := range old {
			from = append(from, i)
		}
		return old, from
	}
	names = make([]string, 0, len(m))
	i, g := 0, 0
	for i < len(old) || g < len(gained) {
		if i < len(old) && !in[i] {
			i++
			continue
		}
		if g < len(gained) && (i == len(old) || gained[g] < old[i]) {
			names, from = append(names, gained[g]), append(from, -1)
			g++
			continue
		}
		names, from = append(names, old[i]), append(from, i)
		i++
	}
	return names, from
}

// encodeRoutes makes the routes section, reusing the previous table's
// order of names when the set of routes is the same, and its encoding of
// every route that did not change.
func (t *Table) encodeRoutes(pe *encoded, prev *Table) {
	enc := t.enc
	names := []string(nil)
	if pe != nil && len(pe.routeNames) == len(t.routes) {
		names = pe.routeNames
		for _, name := range names {
			if _, ok := t.routes[name]; !ok {
				names = nil
				break
			}
		}
	}
	if names == nil {
		names = sortedKeys(t.routes)
	}
	enc.routeNames = names
	enc.routeJS = make([][]byte, len(names))
	size := len(`,"routes":{}`)
	for i, name := range names {
		r := t.routes[name]
		if pe != nil && prev.routes[name] == r && i < len(pe.routeJS) && pe.routeNames[i] == name {
			enc.routeJS[i] = pe.routeJS[i]
		} else {
			enc.routeJS[i] = appendRouteJSON(nil, r)
		}
		size += len(name) + len(enc.routeJS[i]) + 4
	}
	b := make([]byte, 0, size)
	b = append(b, `,"routes":{`...)
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, name)
		b = append(b, ':')
		b = append(b, enc.routeJS[i]...)
	}
	enc.routes = append(b, '}')
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
func effRuns(parts []effPart) [][]byte { return appendEffRuns(nil, parts) }

// appendEffRuns appends the runs of effRuns to runs.
func appendEffRuns(runs [][]byte, parts []effPart) [][]byte {
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

// appendField appends ,"name":<json of v>.
func appendField(b []byte, name string, v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return b, fmt.Errorf("encode table %s: %w", name, err)
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return append(b, js...), nil
}
