package routing

import (
	"bytes"

	"github.com/cespare/xxhash/v2"
)

// Effective is the precomputed answer for one country: the winning route,
// its eligible candidates (status, health and residency already filtered),
// the attrs of the route chain and the reasons the answer is degraded. An
// empty Candidates list means NoRoute, and Degraded then holds the reasons.
type Effective struct {
	// Route is the winning route's name; empty with no route.
	Route string `json:"route"`
	// FallbackDepth is the winning route's position in the chain: 0 is
	// the country's own route.
	FallbackDepth int `json:"fallback_depth"`
	// Affinity is the winning route's, AffinitySticky or AffinityRandom;
	// empty with no route.
	Affinity string `json:"affinity"`
	// Candidates are the winning route's targets with an eligible pool and
	// a weight above 0, sorted by pool id; empty means NoRoute.
	Candidates []Candidate `json:"candidates"`
	// Attrs are the attrs of the routes of the chain, from the winner back
	// to the country's own route, which wins a key; not the pools'.
	Attrs map[string]string `json:"attrs"`
	// Degraded lists the reason codes of what was passed over, in the
	// order met and each once (docs/resolution.md, Reason codes).
	Degraded []string `json:"degraded"`
	// js is the entry's JSON, encoded once when the entry is built; entries
	// equal to the previous table's are reused with their encoding.
	js []byte
	// routeDeps and poolDeps are the routes and pools the entry was computed
	// from: when none changed, the next table reuses the entry as it is.
	routeDeps, poolDeps []string
	// mask holds the bits of routeDeps and poolDeps (see depMask).
	mask depMask
}

// Candidate is an eligible pool of an Effective entry.
type Candidate struct {
	// Pool is the pool's id.
	Pool string `json:"pool"`
	// Host is the pool's host, where the viewer is sent.
	Host string `json:"host"`
	// Weight is the target's weight in the route, 1..100.
	Weight int `json:"weight"`
	// attrs is the pool's attrs overlaid by Effective.Attrs.
	attrs map[string]string
	// pad is the pool id padded for the sticky hash (see poolPad).
	pad *poolPad
}

// computeChecksum digests the effective entries, each from its contents.
func (t *Table) computeChecksum() uint64 {
	var h uint64 = 1469598103934665603
	for id, e := range t.eff {
		h = (h ^ e.digest() ^ uint64(id)) * 1099511628211
	}
	return h
}

// verifyEncodings reports whether each effective entry's JSON, encoded
// when it was built, is still what the entry encodes as.
func (t *Table) verifyEncodings() bool {
	var buf []byte
	for _, e := range t.eff {
		if e.js == nil {
			continue // never encoded: rendered from its contents
		}
		if buf = appendEffectiveJSON(buf[:0], e); !bytes.Equal(buf, e.js) {
			return false
		}
	}
	return true
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
