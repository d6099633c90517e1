package routing

import "encoding/json"

// This file encodes a table's sections once, when first rendered: the
// routes, the policy and the members of the effective section, reusing
// the previous table's encoding of every value and section that did not
// change (the pools section is poolenc.go's).

// encodeValues encodes the sections of the table for JSON, reusing the
// previous table's sections when unchanged and its encoding of every value
// that did not change.
func (t *Table) encodeValues(prev *Table) {
	var pe *encoded
	if prev != nil {
		pe = prev.enc
	}
	enc := t.enc
	if pe != nil && t.pools.same(&prev.pools) && t.eligibleAt.same(&prev.eligibleAt) {
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
