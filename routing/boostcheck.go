package routing

import "sort"

// BoostsWithoutEligibleTarget returns, sorted, the ids of the live
// overrides whose targets are in force (the last override applied to its
// route that sets targets) and none of which is a candidate for any
// viewer whose route chain holds the boosted route: every target's pool
// is drained, down, unhealthy, gone, of another residency class, or has
// weight 0 for each of them. Such a boost serves no viewer: the viewers of
// its route go down their fallback chain, past the boost, until it ends.
// A boost of a route no chain holds is among them too. Nil when there is
// none; cheap when no override sets targets.
func (t *Table) BoostsWithoutEligibleTarget() []string {
	var inForce []string // the override in force of each boosted route
	for route, ids := range t.applied {
		for i := len(ids) - 1; i >= 0; i-- {
			if o := t.overrides[ids[i]]; o != nil && len(o.Targets) > 0 {
				inForce = append(inForce, route, ids[i])
				break
			}
		}
	}
	if len(inForce) == 0 {
		return nil
	}
	rd := newReader(t, t.builtAt)
	var out []string
	for i := 0; i < len(inForce); i += 2 {
		route, id := inForce[i], inForce[i+1]
		if !t.servesSomeViewer(rd, route) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// servesSomeViewer reports whether a target of route is a candidate for a
// viewer (of some country, or the unknown country) whose chain holds it.
func (t *Table) servesSomeViewer(rd *reader, route string) bool {
	r, ok := t.routes[route]
	if !ok {
		return false
	}
	for id := 0; id <= len(countries); id++ {
		own := ""
		if id < len(countries) {
			own = countries[id]
		}
		holds := false
		for _, name := range rd.chain(own) {
			if name == route {
				holds = true
				break
			}
		}
		if !holds {
			continue
		}
		for _, tg := range r.Targets {
			if rd.judge(tg, t.classOf[id]) == "" {
				return true
			}
		}
	}
	return false
}
