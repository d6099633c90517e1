// Package snapindex builds the per-country entries of the agent's snapshot
// (the index table.idx, format 1, and the KV export for edge workers).
package snapindex

// Until the index encoder (encode.go, issue 11 part A) is merged, this file
// holds the pieces of it the KV export needs; the merge removes it and
// appendKVEntry becomes the encoder's appendEntry, so the KV values and the
// index share one source of entries.

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"

	"github.com/regiond/regiond/routing"
)

// Version is the format version of the index and of KV values.
const Version = 1

// entryOf returns the effective entry of entry id (routing.Countries()
// order, then _unknown).
func entryOf(t *routing.Table, id int) *routing.Effective {
	if cs := routing.Countries(); id < len(cs) {
		return t.Effective(cs[id])
	}
	return t.Effective(routing.Unknown)
}

// appendKVEntry appends the index entry JSON of eff in table t: route,
// fallback_depth, affinity, candidates (each with its merged attrs: the
// pool's overlaid by the entry's) and degraded.
func appendKVEntry(b []byte, t *routing.Table, eff *routing.Effective) []byte {
	b = append(b, `{"route":`...)
	b = appendJSONString(b, eff.Route)
	b = append(b, `,"fallback_depth":`...)
	b = strconv.AppendInt(b, int64(eff.FallbackDepth), 10)
	b = append(b, `,"affinity":`...)
	b = appendJSONString(b, eff.Affinity)
	b = append(b, `,"candidates":[`...)
	for i, c := range eff.Candidates {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"pool":`...)
		b = appendJSONString(b, c.Pool)
		b = append(b, `,"host":`...)
		b = appendJSONString(b, c.Host)
		b = append(b, `,"weight":`...)
		b = strconv.AppendInt(b, int64(c.Weight), 10)
		b = append(b, `,"attrs":{`...)
		m := map[string]string{}
		if p, ok := t.Pool(c.Pool); ok {
			maps.Copy(m, p.Attrs)
		}
		maps.Copy(m, eff.Attrs)
		for j, k := range slices.Sorted(maps.Keys(m)) {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, m[k])
		}
		b = append(b, "}}"...)
	}
	b = append(b, `],"degraded":[`...)
	for i, r := range eff.Degraded {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, r)
	}
	return append(b, "]}"...)
}

func appendJSONString(b []byte, s string) []byte {
	js, _ := json.Marshal(s)
	return append(b, js...)
}
