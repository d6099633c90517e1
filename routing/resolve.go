package routing

import (
	"math"
	"math/rand/v2"
	"time"
)

// Decision is where one viewer is sent (docs/resolution.md, Decision).
// Its Attrs and Degraded are the table's own, shared by every decision of
// the same entry: copy them before changing them (maps.Clone,
// slices.Clone).
type Decision struct {
	// Country is the normalized country; Unknown ("_unknown") for the
	// unknown country.
	Country string `json:"country"`
	// Route is the winning route's name; empty with no route.
	Route string `json:"route"`
	// Pool is the id of the pool picked; empty with no route.
	Pool string `json:"pool"`
	// Host is the picked pool's host, where the viewer is sent.
	Host string `json:"host"`
	// Attrs are the pool's attrs overlaid by the route chain's.
	Attrs map[string]string `json:"attrs"`
	// Revision is the etcd revision of the table that decided.
	Revision int64 `json:"revision"`
	// Epoch is the routing epoch of the table that decided (0 before any
	// config was applied).
	Epoch int64 `json:"epoch"`
	// FallbackDepth is the winning route's position in the chain: 0 is
	// the country's own route.
	FallbackDepth int `json:"fallback_depth"`
	// Degraded lists the reason codes of what was passed over, in the
	// order met; with ErrNoRoute, why no pool is eligible.
	Degraded []string `json:"degraded"`
}

// Resolve decides which pool serves a viewer from country (a raw header
// value: "pl", " PL ", "XX" and garbage are accepted) with the sticky key
// key ("" for none). It returns ErrNoRoute when no eligible pool exists;
// the Decision then carries the country, revision and the reasons in
// Degraded. An EU viewer is never given a non-EU pool. Resolve does not
// allocate (but in the moment between an override's expiry and the
// table built without it); the returned Attrs and Degraded are shared and
// must not be modified. On a nil table it returns ErrNoTable.
func (t *Table) Resolve(country, key string, now time.Time) (Decision, error) {
	if t == nil { // a mirror's Table before its first sync
		return Decision{Country: NormalizeCountry(country)}, ErrNoTable
	}
	if t.overridesMoved(now) {
		t = t.At(now)
	}
	id := normalizeID(country)
	idx, cc := id, Unknown
	if id < 0 {
		idx = len(countries)
	} else {
		cc = countries[id]
	}
	e := t.eff[idx]
	if !t.validUntil.IsZero() && !now.Before(t.validUntil) {
		e = t.effectiveAt(idx, now)
	}
	d := Decision{Country: cc, Revision: t.revision, Epoch: t.epoch, Route: e.Route,
		FallbackDepth: e.FallbackDepth, Degraded: e.Degraded}
	if len(e.Candidates) == 0 {
		return d, ErrNoRoute
	}
	c := &e.Candidates[e.pick(key)]
	d.Pool, d.Host, d.Attrs = c.Pool, c.Host, c.attrs
	return d, nil
}

// effectiveAt computes one country's entry at now, for the moments between
// a grace window ending and the agent rebuilding the table.
func (t *Table) effectiveAt(idx int, now time.Time) *Effective {
	name := ""
	if idx < len(countries) {
		name = countries[idx]
	}
	return t.computeEffective(name, t.classOf[idx], now)
}

// pick chooses a candidate: weighted rendezvous hashing for a sticky key,
// weighted random otherwise.
func (e *Effective) pick(key string) int {
	if len(e.Candidates) == 1 {
		return 0
	}
	if key != "" && e.Affinity != AffinityRandom {
		return PickSticky(e.Candidates, key)
	}
	total := 0
	for i := range e.Candidates {
		total += max(e.Candidates[i].Weight, 0)
	}
	if total <= 0 {
		return 0
	}
	r := rand.IntN(total)
	for i := range e.Candidates {
		r -= max(e.Candidates[i].Weight, 0)
		if r < 0 {
			return i
		}
	}
	return len(e.Candidates) - 1
}

// StickyScore is the rendezvous score of pool for key with weight w
// (docs/resolution.md, step 5): h = xxh64(key + "\x00" + pool, seed 0),
// u = ((h >> 11) + 0.5) / 2^53, score = -ln(u) / w. Lower wins. It does not
// allocate.
func StickyScore(key, pool string, w int) float64 {
	var kb stickyKey
	kb.init(key)
	return -math.Log(kb.unit(pool)) / float64(w)
}

// unit returns u = ((h >> 11) + 0.5) / 2^53 for h = xxh64(key + "\x00" + pool).
func (s *stickyKey) unit(pool string) float64 {
	return unitOf(s.sum(pool))
}

// unitOf maps a hash to u = ((h >> 11) + 0.5) / 2^53, in (0, 1].
func unitOf(h uint64) float64 {
	return (float64(int64(h>>11)) + 0.5) * (1.0 / (1 << 53))
}

// candUnit is unit for a candidate, using its padded pool id when it has
// one (candidates of a compiled table do).
func (s *stickyKey) candUnit(c *Candidate) float64 {
	if c.pad != nil {
		return unitOf(s.sumPadded(c.Pool, c.pad))
	}
	return unitOf(s.sum(c.Pool))
}

// negLogLower returns a lower bound of -ln(u) without computing a
// logarithm: with x = 1-u, -ln(u) = x + x²/2 + x³/3 + …, and the first four
// terms bound it from below.
func negLogLower(u float64) float64 {
	x := 1 - u
	x2 := x * x
	return x + x2*0.5 + x2*x*(1.0/3) + x2*x2*0.25
}

// negLogUpper returns an upper bound of -ln(u): the rest of the series
// after four terms is at most x⁵/(5(1-x)).
func negLogUpper(u float64) float64 {
	x := 1 - u
	x2 := x * x
	return negLogLower(u) + x2*x2*x/(5*u)
}

// maxFastPick bounds the candidates PickSticky handles with a stack array.
const maxFastPick = 8

// boundSlack absorbs the rounding of the bounds, far above it and far below
// any real gap between scores.
const boundSlack = 1e-9

// invWeight[w] is 1/w, so that scoring needs no division.
var invWeight = func() (t [101]float64) {
	for w := 1; w < len(t); w++ {
		t[w] = 1 / float64(w)
	}
	return t
}()

// PickSticky returns the index of the candidate with the lowest rendezvous
// score for key (StickyScore); ties go to the smaller pool id. Candidates
// with weight 0 are never picked unless all have weight 0. The result is
// exactly that of comparing StickyScore values: a lower bound of each score
// is computed without a logarithm (negLogLower), and logarithms only for the
// candidates whose bound does not rule them out against the best one, which
// is rarely any.
func PickSticky(cs []Candidate, key string) int {
	if len(cs) > maxFastPick {
		return pickStickyExact(cs, key)
	}
	var kb stickyKey
	kb.init(key)
	var lo [maxFastPick]float64
	j, uj := -1, 0.0
	for i := range cs {
		w := cs[i].Weight
		if w <= 0 || w > 100 {
			if w > 100 {
				return pickStickyExact(cs, key)
			}
			lo[i] = math.Inf(1)
			continue
		}
		u := kb.candUnit(&cs[i])
		lo[i] = negLogLower(u) * invWeight[w]
		if j < 0 || lo[i] < lo[j] {
			j, uj = i, u
		}
	}
	if j < 0 {
		return 0
	}
	// A candidate whose lower bound exceeds j's upper bound cannot win.
	limit := negLogUpper(uj)*invWeight[cs[j].Weight]*(1+boundSlack) + 1e-300
	best, bestScore := j, 0.0
	exact := false
	for i := range cs {
		if i == j || lo[i] > limit {
			continue
		}
		if !exact {
			exact, bestScore = true, -math.Log(uj)/float64(cs[j].Weight)
		}
		s := -math.Log(kb.candUnit(&cs[i])) / float64(cs[i].Weight)
		if s < bestScore || (s == bestScore && cs[i].Pool < cs[best].Pool) {
			best, bestScore = i, s
		}
	}
	return best
}

// pickStickyExact is PickSticky computing every score.
func pickStickyExact(cs []Candidate, key string) int {
	var kb stickyKey
	kb.init(key)
	best, bestScore := -1, 0.0
	for i := range cs {
		if cs[i].Weight <= 0 {
			continue
		}
		s := -math.Log(kb.unit(cs[i].Pool)) / float64(cs[i].Weight)
		if best < 0 || s < bestScore || (s == bestScore && cs[i].Pool < cs[best].Pool) {
			best, bestScore = i, s
		}
	}
	if best < 0 {
		return 0
	}
	return best
}
