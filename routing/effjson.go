package routing

import (
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// appendEffectiveJSON appends e's JSON, byte for byte what encoding/json
// makes of it, without reflection (its field list, wirefields.go): entries
// are encoded on the agent's change path.
func appendEffectiveJSON(b []byte, e *Effective) []byte {
	return appendObjectOf(b, e, effectiveFields, false)
}

// appendRouteJSON appends r's JSON, byte for byte what encoding/json
// makes of it (Route.MarshalJSON), without reflection unless the route has
// unknown fields.
func appendRouteJSON(b []byte, r *Route) []byte {
	if len(r.Extra) > 0 || slices.ContainsFunc(r.Targets, func(t Target) bool { return len(t.Extra) > 0 }) {
		js, _ := json.Marshal(r)
		return append(b, js...)
	}
	return appendObjectOf(b, r, routeFields, true)
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
	var buf [16]string // most maps are small: no allocation for their keys
	keys := buf[:0]
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
