package routing

import (
	"maps"
	"reflect"
	"slices"
	"time"
)

// This file is the memo engine: how a table built from another reuses
// the other's effective entries. The rules (rules.go) record which routes
// and pools an entry read; an entry whose dependencies did not change
// (diff) is reused as it is, and a rebuilt entry equal to the previous
// one keeps the previous one's encoding.

// nameSet is a set of route or pool names, small in the common case.
type nameSet struct {
	names []string
	m     map[string]struct{} // once there are many names
}

func (s *nameSet) add(name string) {
	if s.has(name) {
		return
	}
	s.names = append(s.names, name)
	if s.m != nil {
		s.m[name] = struct{}{}
	} else if len(s.names) > 8 {
		s.m = make(map[string]struct{}, 2*len(s.names))
		for _, n := range s.names {
			s.m[n] = struct{}{}
		}
	}
}

func (s *nameSet) has(name string) bool {
	if s.m != nil {
		_, ok := s.m[name]
		return ok
	}
	for _, n := range s.names {
		if n == name {
			return true
		}
	}
	return false
}

// hasAny reports whether the set holds one of names.
func (s *nameSet) hasAny(names []string) bool {
	if len(s.names) == 0 {
		return false
	}
	for _, n := range names {
		if s.has(n) {
			return true
		}
	}
	return false
}

// diff names the routes and pools whose values changed (or appeared, or
// went) between a table and the table it is built from.
type diff struct {
	// known: routes and pools name every change. Otherwise build finds
	// the changes by comparing the two tables.
	known         bool
	routes, pools nameSet
}

// diffFrom compares t's routes and pools with prev's.
func (t *Table) diffFrom(prev *Table) diff {
	d := diff{known: true}
	for name, r := range t.routes {
		if prev.routes[name] != r {
			d.routes.add(name)
		}
	}
	for name := range prev.routes {
		if _, ok := t.routes[name]; !ok {
			d.routes.add(name)
		}
	}
	for id, p := range t.pools.all() {
		if pp, ok := prev.pools.get(id); !ok || p.src == nil || p.src != pp.src || p.down != pp.down || p.Instances != pp.Instances ||
			p.Instances == 0 && !p.since.Equal(pp.since) {
			d.pools.add(id)
		}
	}
	for id := range prev.pools.all() {
		if !t.pools.has(id) {
			d.pools.add(id)
		}
	}
	return d
}

// build computes the residency class and effective entry of every country
// and the unknown country, evaluated at now. Entries of prev that depend
// on no changed route or pool (d; nil: compare the tables) are reused as
// they are, so a small change costs little.
func (t *Table) build(now time.Time, prev *Table, d *diff) {
	full := t.buildClasses(prev)
	d = t.completeDiff(prev, d)
	t.buildPads(prev, d)
	t.buildEligible(now, prev, d)
	var changed depMask
	if full {
		t.ownArrays(nil)
	} else {
		// prev's arrays, shared until an entry is built (ownArrays): a
		// change no entry depends on (a pool no route names) copies nothing.
		t.arrays, t.eff, t.masks = prev.arrays, prev.eff, prev.masks
		for _, name := range d.routes.names {
			changed.add(name)
		}
		for _, name := range d.pools.names {
			changed.add(name)
		}
	}
	built, entries := t.buildEntries(now, prev, d, full, changed)
	if len(built) > 0 && !full {
		t.ownArrays(prev)
	}
	for i, id := range built {
		t.eff[id] = entries[i]
	}
	t.reuseEffective(prev, built)
	for _, id := range built {
		e := t.eff[id]
		t.masks[id] = e.mask
		if id < numCountries {
			t.masks[id].add(countries[id])
		}
	}
	t.buildValidUntil(now, prev, d, full)
	t.padsOpen = false // built: never written again
	t.enc = newEncoded(prev)
}

// buildClasses fills the residency class of every country, shared with
// prev when the policy is the same, and reports whether every entry must
// be built afresh: no usable prev, or a table-wide rule input (the
// classes, the stale flag) changed.
func (t *Table) buildClasses(prev *Table) (full bool) {
	n := len(countries)
	full = prev == nil || len(prev.eff) != n+1 || prev.stale != t.stale || prev.classOf == nil
	if !full && prev.good.len() > 0 && t.sameGoodOrAbsent(prev, PolicyKey) {
		t.classOf = prev.classOf // same policy: same classes (the slice is never changed)
		return false
	}
	t.classOf = make([]string, n+1)
	for class, ccs := range t.policy.Classes {
		for _, cc := range ccs {
			if id := countryID(cc); id >= 0 {
				t.classOf[id] = class
			}
		}
	}
	t.classOf[n] = t.policy.UnknownCountryClass
	return true
}

// completeDiff returns the changes between prev and t: d when it names
// them all, else d's names and those found by comparing the tables.
func (t *Table) completeDiff(prev *Table, d *diff) *diff {
	if prev != nil && (d == nil || !d.known) {
		cd := t.diffFrom(prev)
		if d != nil { // what the caller knows changed (a pool's since) stays
			for _, name := range d.routes.names {
				cd.routes.add(name)
			}
			for _, name := range d.pools.names {
				cd.pools.add(name)
			}
		}
		return &cd
	}
	if d == nil {
		return &diff{}
	}
	return d
}

// buildEntries computes the entries that depend on a change (d, whose
// names' bits are changed), or all of them when full, and returns their
// country ids and the entries, side by side. It writes nothing of t's
// arrays, which may still be prev's.
func (t *Table) buildEntries(now time.Time, prev *Table, d *diff, full bool, changed depMask) (built []int, entries []*Effective) {
	n := len(countries)
	if full {
		built, entries = make([]int, 0, n+1), make([]*Effective, 0, n+1)
	}
	var fresh map[[2]string]*Effective
	for id := 0; id <= n; id++ {
		name := ""
		if id < n {
			name = countries[id]
		}
		if !full {
			// The masks, side by side in one array, rule out most entries
			// without reading them.
			if !t.masks[id].meets(changed) {
				continue
			}
			// Countries without a route share one entry, computed for one
			// of them: its own route is not among the entry's deps.
			if e := prev.eff[id]; e != nil && (name == "" || !d.routes.has(name)) &&
				!d.routes.hasAny(e.routeDeps) && !d.pools.hasAny(e.poolDeps) {
				continue
			}
		}
		key := name
		if _, ok := t.routes[name]; name != "" && !ok {
			key = "\x00" // countries without a route share their class's entry
		}
		k := [2]string{key, t.classOf[id]}
		e, ok := fresh[k]
		if !ok {
			e = t.computeEffective(name, t.classOf[id], now)
			// A NoRoute entry names the country ("no-route:BR"): not shared.
			if key != "\x00" || len(e.Candidates) > 0 {
				if fresh == nil {
					fresh = make(map[[2]string]*Effective, 16)
				}
				fresh[k] = e
			}
		}
		built, entries = append(built, id), append(entries, e)
	}
	return built, entries
}

// ownArrays gives t per-entry arrays of its own, a copy of prev's (nil:
// empty), before the first entry is written. Every built table has
// arrays: a full build makes them, any other shares or copies prev's.
func (t *Table) ownArrays(prev *Table) {
	a := new(effArrays)
	if prev != nil {
		*a = *prev.arrays
	}
	t.arrays, t.eff, t.masks = a, a.eff[:], a.masks[:]
}

// buildValidUntil finds the first instant at which a pool's health
// changes by the clock alone: the first end of a grace window after now.
// It starts from prev's pools in grace and the pools d names, unless full,
// the grace window changed or the clock went back (now before prev was
// built): then from every pool.
func (t *Table) buildValidUntil(now time.Time, prev *Table, d *diff, full bool) {
	if !full && len(d.pools.names) == 0 && t.eligibleAt.same(&prev.eligibleAt) {
		t.validUntil, t.inGrace = prev.validUntil, prev.inGrace // no pool changed, no grace window ended
		return
	}
	t.validUntil, t.inGrace = time.Time{}, nil
	add := func(id string, p *PoolState) {
		if p.HealthCheck && p.Instances == 0 && p.fixedHealthy == nil {
			if end := p.since.Add(t.grace); end.After(now) {
				t.inGrace = append(t.inGrace, id)
				if t.validUntil.IsZero() || end.Before(t.validUntil) {
					t.validUntil = end
				}
			}
		}
	}
	if full || prev == nil || prev.grace != t.grace || now.Before(prev.builtAt) {
		for id, p := range t.pools.all() {
			add(id, p)
		}
		return
	}
	// A pool d does not name is as it was in prev: in grace now only if
	// it was then.
	for _, id := range prev.inGrace {
		if p, ok := t.pools.get(id); ok && !d.pools.has(id) {
			add(id, p)
		}
	}
	for _, id := range d.pools.names {
		if p, ok := t.pools.get(id); ok {
			add(id, p)
		}
	}
}

// effArrays holds a table's per-entry arrays (every country and the
// unknown country) in one allocation, shared with the previous table when
// no entry changed and copied from it in one move when one did; the masks
// stay side by side, so that the scan for the entries a change touches
// reads one small contiguous array.
type effArrays struct {
	masks [numCountries + 1]depMask
	eff   [numCountries + 1]*Effective
}

// depMask is a 128-bit Bloom filter of the route and pool names an entry
// depends on: an entry whose mask has no bit of a change's mask does not
// depend on the change.
type depMask [2]uint64

// add sets the bit of name.
func (m *depMask) add(name string) {
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	h ^= h >> 29
	m[(h>>6)&1] |= 1 << (h & 63)
}

// meets reports whether the two masks share a bit.
func (m depMask) meets(o depMask) bool { return m[0]&o[0] != 0 || m[1]&o[1] != 0 }

// buildPads starts the padded pool ids from prev's, less those of the
// pools gone; the entries built add those of their candidates (padOf).
// Only pools that are candidates get one: most pools of a large table
// (thousands, none in a route) never do.
func (t *Table) buildPads(prev *Table, d *diff) {
	t.padsOpen = true
	if prev == nil {
		t.pads = layered[*poolPad]{}
		return
	}
	t.pads = prev.pads.fork()
	for _, id := range d.pools.names {
		if !t.pools.has(id) {
			t.pads.del(id)
		}
	}
}

// padOf returns pool id's padded id: the table's, or a new one, which the
// table keeps while it is being built.
func (t *Table) padOf(id string) *poolPad {
	if p, ok := t.pads.get(id); ok {
		return p
	}
	p := newPoolPad(id)
	if t.padsOpen {
		t.pads.set(id, p)
	}
	return p
}

// buildEligible tells, per pool, whether it is up and healthy at now, and
// adds the pools whose answer differs from prev's to d.
func (t *Table) buildEligible(now time.Time, prev *Table, d *diff) {
	eligible := func(p *PoolState) bool { return !p.down && t.healthy(p, now) }
	clockMoved := prev == nil || prev.eligibleAt.len() != prev.pools.len() || t.grace != prev.grace || now.Before(prev.builtAt) ||
		(!prev.validUntil.IsZero() && !now.Before(prev.validUntil))
	if !clockMoved {
		// No grace window ended: only the changed pools can differ.
		t.eligibleAt = prev.eligibleAt.fork()
		for _, id := range d.pools.names {
			if p, ok := t.pools.get(id); ok {
				if e := eligible(p); !t.eligibleAt.has(id) || t.eligibleOf(id) != e {
					t.eligibleAt.set(id, e)
				}
			} else {
				t.eligibleAt.del(id)
			}
		}
		return
	}
	m := make(map[string]bool, t.pools.len())
	for id, p := range t.pools.all() {
		m[id] = eligible(p)
		if prev != nil && prev.eligibleOf(id) != m[id] {
			d.pools.add(id)
		}
	}
	t.eligibleAt = newLayered(m)
}

// eligibleOf tells whether pool id was up and healthy when the table was
// built (false for no such pool).
func (t *Table) eligibleOf(id string) bool {
	e, _ := t.eligibleAt.get(id)
	return e
}

// sameMap reports whether a and b are the very same map.
func sameMap[K comparable, V any](a, b map[K]V) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// sameGoodOrAbsent reports whether key holds the very same decoded value
// in both tables, or is absent from both.
func (t *Table) sameGoodOrAbsent(prev *Table, key string) bool {
	a, aok := t.good.get(key)
	b, bok := prev.good.get(key)
	return aok == bok && (!aok || a.val == b.val)
}

// reuseEffective replaces each newly built entry (of the countries ids)
// equal to the previous table's entry for the same country by that entry,
// so its JSON encoding is reused, and encodes the entries that are new.
func (t *Table) reuseEffective(prev *Table, ids []int) {
	var swap map[*Effective]*Effective // entries shared by several countries
	for _, id := range ids {
		e := t.eff[id]
		if r, done := swap[e]; done {
			t.eff[id] = r
			continue
		}
		r := e
		if prev != nil && len(prev.eff) == len(t.eff) && equalEffective(prev.eff[id], e) {
			// The same answer; its encoding is reused. The entry itself is
			// reused only when it was computed from the same routes and
			// pools: a route in the chain that leaves no trace in the
			// answer (no targets, or fallbacks only) must stay among the
			// deps, or a later change to it would be missed.
			if p := prev.eff[id]; slices.Equal(p.routeDeps, e.routeDeps) && slices.Equal(p.poolDeps, e.poolDeps) {
				r = p
			} else {
				e.js = p.js
			}
		} else {
			e.js = appendEffectiveJSON(nil, e)
		}
		if len(ids) > 1 {
			if swap == nil {
				swap = make(map[*Effective]*Effective, len(ids))
			}
			swap[e] = r
		}
		t.eff[id] = r
	}
}

// equalEffective reports whether two entries answer every viewer alike.
func equalEffective(a, b *Effective) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil || a.Route != b.Route || a.FallbackDepth != b.FallbackDepth ||
		a.Affinity != b.Affinity || len(a.Candidates) != len(b.Candidates) ||
		!maps.Equal(a.Attrs, b.Attrs) || !slices.Equal(a.Degraded, b.Degraded) {
		return false
	}
	for i := range a.Candidates {
		ca, cb := &a.Candidates[i], &b.Candidates[i]
		if ca.Pool != cb.Pool || ca.Host != cb.Host || ca.Weight != cb.Weight || !maps.Equal(ca.attrs, cb.attrs) {
			return false
		}
	}
	return true
}
