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
		b = appendStringMap(b, e.Attrs)
	}
	b = append(b, `,"degraded":`...)
	if e.Degraded == nil {
		b = append(b, "null"...)
	} else {
		b = appendStringList(b, e.Degraded)
	}
	return append(b, '}')
}

// appendRouteJSON appends r's JSON, byte for byte what encoding/json
// makes of it (Route.MarshalJSON), without reflection unless the route has
// unknown fields.
func appendRouteJSON(b []byte, r *Route) []byte {
	if len(r.Extra) > 0 || slices.ContainsFunc(r.Targets, func(t Target) bool { return len(t.Extra) > 0 }) {
		js, _ := json.Marshal(r)
		return append(b, js...)
	}
	b = append(b, '{')
	first := true
	member := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":`...)
	}
	if len(r.Targets) > 0 {
		member("targets")
		b = append(b, '[')
		for i, tg := range r.Targets {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"pool":`...)
			b = appendJSONString(b, tg.Pool)
			b = append(b, `,"weight":`...)
			b = strconv.AppendInt(b, int64(tg.Weight), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(r.Fallback) > 0 {
		member("fallback")
		b = appendStringList(b, r.Fallback)
	}
	if r.Affinity != "" {
		member("affinity")
		b = appendJSONString(b, r.Affinity)
	}
	if len(r.Attrs) > 0 {
		member("attrs")
		b = appendStringMap(b, r.Attrs)
	}
	return append(b, '}')
}

// appendStringList appends l as a JSON list of strings.
func appendStringList(b []byte, l []string) []byte {
	b = append(b, '[')
	for i, x := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, x)
	}
	return append(b, ']')
}

// appendStringMap appends m as a JSON object with sorted keys.
func appendStringMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
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
		b = appendJSONString(b, m[k])
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
