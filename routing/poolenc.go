package routing

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
)

// This file encodes the pools section incrementally: one member per
// pool, encoded without reflection (appendPoolJSON) and reused from the
// previous table when made from the same stored value with the same
// health, in an order of ids merged from the previous table's rather than
// sorted again (mergeNames).

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

// encodePools makes the pools section, reusing the previous table's order
// of ids (merging in the new ones: no sort of them all) and its encoding of
// every pool made from the same stored value with the same health. When
// the two tables' pools share a base (see layered), only the pools of
// their overlays are looked at: a new pool among thousands costs one
// member, not a look-up of each.
func (t *Table) encodePools(pe *encoded, prev *Table) {
	enc := t.enc
	var names []string
	var from []int      // from[i]: index of names[i] in pe's lists, or -1
	var suspect nameSet // the pools that may differ from prev's; all when !known
	known := false
	if pe == nil || pe.poolNames == nil {
		names = t.pools.keys()
	} else {
		var gained []string
		var lost map[string]bool
		gained, lost, suspect, known = t.poolChanges(prev)
		names, from = mergeNames(pe.poolNames, gained, lost)
	}
	n := len(names)
	enc.poolNames = names
	enc.poolMembers, enc.poolSrc, enc.poolUp = make([][]byte, n), make([]*Pool, n), make([]bool, n)
	var todo []int // the pools to encode: new, changed, or health changed
	for i, id := range names {
		if from != nil {
			j := from[i]
			if j >= 0 && known && !suspect.has(id) {
				enc.poolMembers[i], enc.poolSrc[i], enc.poolUp[i] = pe.poolMembers[j], pe.poolSrc[j], pe.poolUp[j]
				continue
			}
			p, _ := t.pools.get(id)
			if up := t.eligibleOf(id); j >= 0 && p.src != nil && pe.poolSrc[j] == p.src && pe.poolUp[j] == up {
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
			p, _ := t.pools.get(id)
			up := t.eligibleOf(id)
			m := append(make([]byte, 0, poolJSONSize(id, p.Pool)), ',')
			m = appendJSONString(m, id)
			m = append(m, ':')
			enc.poolMembers[i], enc.poolSrc[i], enc.poolUp[i] = appendPoolJSON(m, p.Pool, up), p.src, up
		}
	})
}

// poolChanges returns the pools t has and prev has not (sorted), those
// prev has and t has not, and, when known, every pool whose state or
// health may differ between the two (suspect): the pools of the overlays
// of both tables' pools and health, when each pair shares a base. Else
// known is false, and every pool must be compared.
func (t *Table) poolChanges(prev *Table) (gained []string, lost map[string]bool, suspect nameSet, known bool) {
	pk, pok := t.pools.changedSince(&prev.pools)
	ek, eok := t.eligibleAt.changedSince(&prev.eligibleAt)
	if pok && eok {
		for _, ids := range [][]string{pk, ek} {
			for _, id := range ids {
				suspect.add(id)
			}
		}
		for _, id := range pk {
			if has, had := t.pools.has(id), prev.pools.has(id); has && !had {
				gained = append(gained, id)
			} else if had && !has {
				if lost == nil {
					lost = map[string]bool{}
				}
				lost[id] = true
			}
		}
		slices.Sort(gained)
		return gained, lost, suspect, true
	}
	for id := range t.pools.all() {
		if !prev.pools.has(id) {
			gained = append(gained, id)
		}
	}
	for id := range prev.pools.all() {
		if !t.pools.has(id) {
			if lost == nil {
				lost = map[string]bool{}
			}
			lost[id] = true
		}
	}
	slices.Sort(gained)
	return gained, lost, suspect, false
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

// mergeNames returns the names of old (sorted) but those in lost,
// merged with gained (sorted, none of them in old): the sorted names of a
// later version of old's set. from[i] is the index in old of names[i], or
// -1 for a gained name. When nothing was gained or lost, names is old
// itself.
func mergeNames(old, gained []string, lost map[string]bool) (names []string, from []int) {
	from = make([]int, 0, len(old)+len(gained))
	if len(lost) == 0 && len(gained) == 0 {
		for i := range old {
			from = append(from, i)
		}
		return old, from
	}
	names = make([]string, 0, len(old)+len(gained))
	i, g := 0, 0
	for i < len(old) || g < len(gained) {
		if i < len(old) && lost[old[i]] {
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
