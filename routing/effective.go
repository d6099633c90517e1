package routing

import "github.com/cespare/xxhash/v2"

// Effective is the precomputed answer for one country: the winning route,
// its eligible candidates (status, health and residency already filtered),
// the attrs of the route chain and the reasons the answer is degraded. An
// empty Candidates list means NoRoute, and Degraded then holds the reasons.
type Effective struct {
	Route         string            `json:"route"`
	FallbackDepth int               `json:"fallback_depth"`
	Affinity      string            `json:"affinity"`
	Candidates    []Candidate       `json:"candidates"`
	Attrs         map[string]string `json:"attrs"`
	Degraded      []string          `json:"degraded"`
	// js is the entry's JSON, encoded once when the entry is built; entries
	// equal to the previous table's are reused with their encoding.
	js []byte
	// routeDeps and poolDeps are the routes and pools the entry was computed
	// from: when none changed, the next table reuses the entry as it is.
	routeDeps, poolDeps []string
	// sum is the entry's digest (see digest), set when it is encoded.
	sum uint64
	// mask holds the bits of routeDeps and poolDeps (see depMask).
	mask depMask
}

// Candidate is an eligible pool of an Effective entry.
type Candidate struct {
	Pool   string `json:"pool"`
	Host   string `json:"host"`
	Weight int    `json:"weight"`
	// attrs is the pool's attrs overlaid by Effective.Attrs.
	attrs map[string]string
	// pad is the pool id padded for the sticky hash (see poolPad).
	pad *poolPad
}

// computeChecksum digests the effective entries. Each entry's digest is
// computed once when the entry is built (kept in sums); VerifyChecksum
// recomputes them from the entries' contents (fresh).
func (t *Table) computeChecksum(fresh bool) uint64 {
	var h uint64 = 1469598103934665603
	for id, s := range t.sums {
		if fresh || s == 0 {
			s = t.eff[id].digest()
		}
		h = (h ^ s ^ uint64(id)) * 1099511628211
	}
	return h
}

// digest hashes what an entry answers.
func (e *Effective) digest() uint64 {
	d := xxhash.New()
	d.WriteString(e.Route)
	d.WriteString("\x00")
	for _, c := range e.Candidates {
		d.WriteString(c.Pool)
		d.WriteString("\x01")
		d.WriteString(c.Host)
		d.Write([]byte{byte(c.Weight)})
	}
	for _, r := range e.Degraded {
		d.WriteString(r)
	}
	return d.Sum64() | 1
}
