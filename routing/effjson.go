package routing

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// appendEffectiveJSON appends e's JSON, byte for byte what encoding/json
// makes of it, without reflection: entries are encoded on the agent's
// change path.
func appendEffectiveJSON(b []byte, e *Effective) []byte {
	b = append(b, `{"route":`...)
	b = appendJSONString(b, e.Route)
	b = append(b, `,"fallback_depth":`...)
	b = strconv.AppendInt(b, int64(e.FallbackDepth), 10)
	b = append(b, `,"affinity":`...)
	b = appendJSONString(b, e.Affinity)
	b = append(b, `,"candidates":`...)
	if e.Candidates == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, c := range e.Candidates {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"pool":`...)
			b = appendJSONString(b, c.Pool)
			b = append(b, `,"host":`...)
			b = appendJSONString(b, c.Host)
			b = append(b, `,"weight":`...)
			b = strconv.AppendInt(b, int64(c.Weight), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"attrs":`...)
	if e.Attrs == nil {
		b = append(b, "null"...)
	} else {
		keys := make([]string, 0, len(e.Attrs))
		for k := range e.Attrs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, e.Attrs[k])
		}
		b = append(b, '}')
	}
	b = append(b, `,"degraded":`...)
	if e.Degraded == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, r := range e.Degraded {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, r)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendJSONString appends s quoted as encoding/json quotes it (with its
// HTML escaping). Plain printable ASCII, the common case, is copied as is;
// anything else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			js, _ := json.Marshal(s)
			return append(b, js...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
