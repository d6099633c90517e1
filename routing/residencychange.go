package routing

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// ResidencyChange is a country (or the unknown country) that a new
// residency policy takes out of the class the old one puts it in: into
// no class, where its viewers may be sent to a pool of any residency, or
// into another class, whose pools they may then be sent to.
type ResidencyChange struct {
	// Code is the ISO code, or Unknown for the unknown country (the
	// policy's unknown_country_class).
	Code string
	// From is the code's class in the old policy; To its class in the
	// new one ("" for none).
	From, To string
	// Routes are the routes of the code's chain in the new config (its
	// own route, its fallbacks, _default; in the order tried) that have a
	// target of weight above 0 on a pool of another residency than From
	// that the code may use under the new policy, each with those pools:
	// "routes/DE (us-east)". The pools' status and health are not
	// counted (as the reachability check of Validate): any of them may
	// serve once the pools before it are drained or down.
	Routes []string
}

// ResidencyChanges returns, for a config whose residency policy is
// before and becomes next's, each code that before puts in a class and
// next puts in no class or in another (a class shrunk, a class removed, a
// code moved, unknown_country_class changed), in the order of
// Countries(), then Unknown. A policy of next absent is the built-in one,
// as before must be given (Config.ResidencyOrDefault); a nil class list
// or an empty unknown_country_class is read as the agents read it. None
// for a next that adds codes to classes only.
func ResidencyChanges(before Residency, next *Config) []ResidencyChange {
	after := next.ResidencyOrDefault()
	before.normalize() // copies: normalize sets fields of the value alone
	after.normalize()
	was, now := classesOf(before), classesOf(after)
	var t *Table // compiled once, when a change needs its routes
	var out []ResidencyChange
	for _, cc := range append(slices.Clone(Countries()), Unknown) {
		from, to := was[cc], now[cc]
		if cc == Unknown {
			from, to = before.UnknownCountryClass, after.UnknownCountryClass
		}
		if from == "" || from == to {
			continue
		}
		if t == nil {
			t = compileConfigTable(next, after)
		}
		out = append(out, ResidencyChange{Code: cc, From: from, To: to, Routes: routesOutOf(t, cc, from, to)})
	}
	return out
}

// classesOf maps each code of pol's classes to its class: for a code in
// two (a policy that is refused), the first by name, as ResidencyGaps
// reads it.
func classesOf(pol Residency) map[string]string {
	out := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(pol.Classes)) {
		for _, cc := range pol.Classes[name] {
			if _, ok := out[cc]; !ok {
				out[cc] = name
			}
		}
	}
	return out
}

// routesOutOf returns the routes of cc's chain in t with a target of
// weight above 0 on an existing pool of another residency than from that
// a viewer of class to may use (any, for no class), each as "routes/NAME
// (pool, …)".
func routesOutOf(t *Table, cc, from, to string) []string {
	own := cc
	if _, ok := t.routes[own]; !ok || cc == Unknown {
		own = "" // the chain as it matters: from _default
	}
	var out []string
	for _, name := range newReader(t, time.Time{}).chain(own) {
		r, ok := t.routes[name]
		if !ok {
			continue
		}
		var pools []string
		for _, tg := range r.Targets {
			p, ok := t.pools.get(tg.Pool)
			if !ok || tg.Weight <= 0 || p.Residency == from || (to != "" && p.Residency != to) || slices.Contains(pools, tg.Pool) {
				continue
			}
			pools = append(pools, tg.Pool)
		}
		if len(pools) > 0 {
			out = append(out, fmt.Sprintf("%s (%s)", RouteKey(name), strings.Join(pools, ", ")))
		}
	}
	return out
}
