package routing

import "time"

// Explanation is Resolve with its working shown: every route and pool
// considered, and why each was passed over.
type Explanation struct {
	Country  string      `json:"country"`
	Class    string      `json:"class"`
	Decision *Decision   `json:"decision,omitempty"`
	NoRoute  bool        `json:"no_route,omitempty"`
	Reasons  []string    `json:"reasons,omitempty"`
	Routes   []RouteStep `json:"routes"`
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
	Route     string     `json:"route"`
	Depth     int        `json:"depth"`
	Exists    bool       `json:"exists"`
	Overrides []string   `json:"overrides,omitempty"`
	Chosen    bool       `json:"chosen"`
	Pools     []PoolStep `json:"pools"`
}

// PoolStep is one target of a route as considered by Explain. Reason is
// empty for an eligible pool.
type PoolStep struct {
	Pool     string `json:"pool"`
	Weight   int    `json:"weight"`
	Eligible bool   `json:"eligible"`
	Reason   string `json:"reason,omitempty"`
}

// Explain resolves like Resolve and reports every route and pool it
// considered, up to and including the winning route: the steps of the
// rules' walk (rules.go).
func (t *Table) Explain(country, key string, now time.Time) Explanation {
	if t.overrideEnded(now) {
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
	st := &explainTracer{t: t}
	e := newReader(t, now).walk(own, ex.Class, st)
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
