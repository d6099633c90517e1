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
}

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
// considered, up to and including the winning route.
func (t *Table) Explain(country, key string, now time.Time) Explanation {
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
	for depth, name := range t.chain(own) {
		r, ok := t.routes[name]
		step := RouteStep{Route: name, Depth: depth, Exists: ok, Overrides: t.applied[name], Pools: []PoolStep{}}
		if ok {
			for _, tg := range r.Targets {
				ps := PoolStep{Pool: tg.Pool, Weight: tg.Weight}
				ps.Reason = t.ineligible(tg.Pool, ex.Class, now)
				if ps.Reason == "" && tg.Weight == 0 {
					ps.Reason = "weight-0"
				}
				ps.Eligible = ps.Reason == ""
				step.Pools = append(step.Pools, ps)
			}
		}
		step.Chosen = err == nil && d.Route == name && d.FallbackDepth == depth
		ex.Routes = append(ex.Routes, step)
		if step.Chosen {
			break
		}
	}
	return ex
}
