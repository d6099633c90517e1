package routing

import "time"

// Explanation is Resolve with its working shown: every route and pool
// considered, and why each was passed over.
type Explanation struct {
	// Country is the normalized country; Unknown ("_unknown") for the
	// unknown country.
	Country string `json:"country"`
	// Class is the country's residency class; empty for a country in no
	// class.
	Class string `json:"class"`
	// Decision is Resolve's answer; nil with no route.
	Decision *Decision `json:"decision,omitempty"`
	// NoRoute is true when no route of the chain has a candidate.
	NoRoute bool `json:"no_route,omitempty"`
	// Reasons are the NoRoute's reason codes; empty with a Decision
	// (whose Degraded holds them).
	Reasons []string `json:"reasons,omitempty"`
	// Routes are the routes of the chain in the order tried, up to and
	// including the winning one.
	Routes []RouteStep `json:"routes"`
	// Pick is how the decision's pool was chosen among the winning
	// route's candidates; nil with no route.
	Pick *Pick `json:"pick,omitempty"`
}

// Pick is how a decision chose among the candidates of its route.
type Pick struct {
	// Affinity is the winning route's: sticky or random.
	Affinity string `json:"affinity"`
	// Method is "only" (one candidate), "sticky" (the key's rendezvous
	// scores: the lowest wins, the same pool for the same key while the
	// candidates stay) or "random" (weighted random: no key, or affinity
	// random; it differs request by request).
	Method string `json:"method"`
	// Scores holds, for "sticky", each candidate's score for the key
	// (StickyScore; docs/resolution.md, step 5).
	Scores map[string]float64 `json:"scores,omitempty"`
}

// The methods of a Pick.
const (
	PickMethodOnly   = "only"
	PickMethodSticky = "sticky"
	PickMethodRandom = "random"
)

// RouteStep is one route of the chain as considered by Explain.
type RouteStep struct {
	// Route is the route's name.
	Route string `json:"route"`
	// Depth is the route's position in the chain: 0 is the country's own
	// route (the unknown country's _default).
	Depth int `json:"depth"`
	// Exists is false for a name the table has no route for (passed over).
	Exists bool `json:"exists"`
	// Overrides are the ids of the live boosts applied to the route,
	// oldest first (the last one's targets are in force).
	Overrides []string `json:"overrides,omitempty"`
	// Chosen is true for the winning route, the last step.
	Chosen bool `json:"chosen"`
	// Pools are the route's targets as judged, in the route's order.
	Pools []PoolStep `json:"pools"`
}

// PoolStep is one target of a route as considered by Explain. Reason is
// empty for an eligible pool.
type PoolStep struct {
	// Pool is the target's pool id.
	Pool string `json:"pool"`
	// Weight is the target's weight.
	Weight int `json:"weight"`
	// Eligible is true when the target is a candidate: its pool eligible
	// for the viewer and its weight above 0.
	Eligible bool `json:"eligible"`
	// Reason is why it is not: a reason code with the pool
	// ("pool-down:eu-central"), or "weight-0".
	Reason string `json:"reason,omitempty"`
}

// Explain resolves like Resolve and reports every route and pool it
// considered, up to and including the winning route: the steps of the
// rules' walk (rules.go).
func (t *Table) Explain(country, key string, now time.Time) Explanation {
	if t.overridesMoved(now) {
		t = t.At(now) // the steps, like the decision, without the expired boost
	}
	cc := NormalizeCountry(country)
	ex := Explanation{Country: cc, Class: t.ClassOf(cc), Routes: []RouteStep{}}
	d, err := t.Resolve(country, key, now)
	if err != nil {
		ex.NoRoute, ex.Reasons = true, d.Degraded
	} else {
		ex.Decision = &d
	}
	own := ""
	if cc != Unknown {
		own = cc
	}
	// The walk at the instant Resolve's entries hold: with the clock
	// stepped back before the table was built, the entries as built (a
	// health grace window that had ended then), as Resolve answers.
	at := now
	if at.Before(t.builtAt) {
		at = t.builtAt
	}
	st := &explainTracer{t: t}
	e := newReader(t, at).walk(own, ex.Class, st)
	if n := len(st.steps); n > 0 && len(e.Candidates) > 0 {
		st.steps[n-1].Chosen = true
		ex.Pick = pickOf(e, key)
	}
	ex.Routes = append(ex.Routes, st.steps...)
	return ex
}

// explainTracer records the walk's steps as Explain reports them.
type explainTracer struct {
	t     *Table
	steps []RouteStep
}

func (x *explainTracer) route(name string, depth int, exists bool) {
	x.steps = append(x.steps, RouteStep{Route: name, Depth: depth, Exists: exists, Overrides: x.t.applied[name], Pools: []PoolStep{}})
}

func (x *explainTracer) target(tg Target, why Reason) {
	ps := PoolStep{Pool: tg.Pool, Weight: tg.Weight, Eligible: why == ""}
	if why != "" {
		ps.Reason = string(why)
		if why != ReasonWeightZero {
			ps.Reason = why.On(tg.Pool)
		}
	}
	s := &x.steps[len(x.steps)-1]
	s.Pools = append(s.Pools, ps)
}

// pickOf says how pick chose among e's candidates for key.
func pickOf(e *Effective, key string) *Pick {
	p := &Pick{Affinity: e.Affinity, Method: PickMethodRandom}
	switch {
	case len(e.Candidates) == 1:
		p.Method = PickMethodOnly
	case key != "" && e.Affinity != AffinityRandom:
		p.Method, p.Scores = PickMethodSticky, make(map[string]float64, len(e.Candidates))
		for _, c := range e.Candidates {
			p.Scores[c.Pool] = StickyScore(key, c.Pool, c.Weight)
		}
	}
	return p
}
