package routing

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Decision is where one viewer is sent (DESIGN §4.5).
type Decision struct {
	Country       string            `json:"country"`
	Route         string            `json:"route"`
	Pool          string            `json:"pool"`
	Host          string            `json:"host"`
	Attrs         map[string]string `json:"attrs"`
	Revision      int64             `json:"revision"`
	Epoch         int64             `json:"epoch"`
	FallbackDepth int               `json:"fallback_depth"`
	Degraded      []string          `json:"degraded"`
}

// Resolve is t.Resolve(country, key, now).
func Resolve(t *Table, country, key string, now time.Time) (Decision, error) {
	return t.Resolve(country, key, now)
}

// Resolve decides which pool serves a viewer from country (a raw header
// value: "pl", " PL ", "XX" and garbage are accepted) with the sticky key
// key ("" for none). It returns ErrNoRoute when no eligible pool exists;
// the Decision then carries the country, revision and the reasons in
// Degraded. An EU viewer is never given a non-EU pool. Resolve does not
// allocate; the returned Attrs and Degraded are shared and must not be
// modified.
func (t *Table) Resolve(country, key string, now time.Time) (Decision, error) {
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
	if key != "" && e.Affinity != AffinityRandom {
		return PickSticky(e.Candidates, key)
	}
	total := 0
	for i := range e.Candidates {
		total += e.Candidates[i].Weight
	}
	r := rand.IntN(total)
	for i := range e.Candidates {
		r -= e.Candidates[i].Weight
		if r < 0 {
			return i
		}
	}
	return len(e.Candidates) - 1
}

// StickyScore is the rendezvous score of pool for key with weight w
// (DESIGN §4.4): h = xxh64(key + "\x00" + pool, seed 0),
// u = ((h >> 11) + 0.5) / 2^53, score = -ln(u) / w. Lower wins.
func StickyScore(key, pool string, w int) float64 {
	var buf [256]byte
	var h uint64
	if len(key)+1+len(pool) <= len(buf) {
		n := copy(buf[:], key)
		buf[n] = 0
		n++
		n += copy(buf[n:], pool)
		h = xxhash.Sum64(buf[:n])
	} else {
		h = xxhash.Sum64String(key + "\x00" + pool)
	}
	u := (float64(h>>11) + 0.5) / (1 << 53)
	return -math.Log(u) / float64(w)
}

// PickSticky returns the index of the candidate with the lowest rendezvous
// score for key; ties go to the smaller pool id. Candidates with weight 0
// are never picked unless all have weight 0.
func PickSticky(cs []Candidate, key string) int {
	best, bestScore := -1, 0.0
	for i := range cs {
		if cs[i].Weight <= 0 {
			continue
		}
		s := StickyScore(key, cs[i].Pool, cs[i].Weight)
		if best < 0 || s < bestScore || (s == bestScore && cs[i].Pool < cs[best].Pool) {
			best, bestScore = i, s
		}
	}
	if best < 0 {
		return 0
	}
	return best
}
