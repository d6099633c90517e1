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
