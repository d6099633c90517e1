package routing

import (
	"strconv"
	"strings"
)

// The wire codecs of the value types (jsondec.go decodes, effjson.go
// encodes) run from one field list per type, below: a field of a stored
// or rendered type is added here, once, and TestWireFieldsMatchStructs
// (reflection over the structs' json tags) fails for a struct field that
// is missing from its list. The table JSON's pool encoder
// (appendPoolJSON) is written out rather than run from poolFields, being
// on the path of every pool of a sync; TestAppendPoolJSONEncodesEveryField
// fails for a Pool field it leaves out.

// wireField is one JSON member of T: its name, how the strict decoder
// reads it and how the fast encoder writes it (enc nil: the type is only
// decoded here). empty reports whether an omitempty member is left out.
type wireField[T any] struct {
	name  string
	dec   func(d *jsonDecoder, raw []byte, path string, v *T)
	enc   func(b []byte, v *T) []byte
	empty func(v *T) bool
}

// wireStr, wireInt, wireBool, wireMap and wireList make the field of a
// string, int, bool, map[string]string or []string member at *at(v).
func wireStr[T any](name string, at func(*T) *string) wireField[T] {
	return wireField[T]{name: name,
		dec:   func(d *jsonDecoder, raw []byte, path string, v *T) { *at(v) = d.str(raw, path) },
		enc:   func(b []byte, v *T) []byte { return appendJSONString(b, *at(v)) },
		empty: func(v *T) bool { return *at(v) == "" }}
}

func wireInt[T any](name string, at func(*T) *int) wireField[T] {
	return wireField[T]{name: name,
		dec:   func(d *jsonDecoder, raw []byte, path string, v *T) { *at(v) = d.integer(raw, path) },
		enc:   func(b []byte, v *T) []byte { return strconv.AppendInt(b, int64(*at(v)), 10) },
		empty: func(v *T) bool { return *at(v) == 0 }}
}

func wireBool[T any](name string, at func(*T) *bool) wireField[T] {
	return wireField[T]{name: name,
		dec:   func(d *jsonDecoder, raw []byte, path string, v *T) { *at(v) = d.boolean(raw, path) },
		enc:   func(b []byte, v *T) []byte { return strconv.AppendBool(b, *at(v)) },
		empty: func(v *T) bool { return !*at(v) }}
}

func wireMap[T any](name string, at func(*T) *map[string]string) wireField[T] {
	return wireField[T]{name: name,
		dec: func(d *jsonDecoder, raw []byte, path string, v *T) { *at(v) = d.stringMap(raw, path) },
		enc: func(b []byte, v *T) []byte {
			if *at(v) == nil {
				return append(b, "null"...)
			}
			return appendStringMap(b, *at(v))
		},
		empty: func(v *T) bool { return len(*at(v)) == 0 }}
}

func wireList[T any](name string, at func(*T) *[]string) wireField[T] {
	return wireField[T]{name: name,
		dec: func(d *jsonDecoder, raw []byte, path string, v *T) {
			*at(v) = list(d, raw, path, (*jsonDecoder).strInto)
		},
		enc: func(b []byte, v *T) []byte {
			if *at(v) == nil {
				return append(b, "null"...)
			}
			return appendStringList(b, *at(v))
		},
		empty: func(v *T) bool { return len(*at(v)) == 0 }}
}

// wireTargets is the field of a []Target member.
func wireTargets[T any](name string, at func(*T) *[]Target) wireField[T] {
	return wireField[T]{name: name,
		dec: func(d *jsonDecoder, raw []byte, path string, v *T) {
			*at(v) = list(d, raw, path, (*jsonDecoder).target)
		},
		enc: func(b []byte, v *T) []byte {
			b = append(b, '[')
			for i := range *at(v) {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendObjectOf(b, &(*at(v))[i], targetFields, false)
			}
			return append(b, ']')
		},
		empty: func(v *T) bool { return len(*at(v)) == 0 }}
}

var poolFields = []wireField[Pool]{
	wireStr("host", func(p *Pool) *string { return &p.Host }),
	wireStr("region", func(p *Pool) *string { return &p.Region }),
	wireStr("residency", func(p *Pool) *string { return &p.Residency }),
	wireStr("status", func(p *Pool) *string { return &p.Status }),
	wireBool("health_check", func(p *Pool) *bool { return &p.HealthCheck }),
	wireMap("attrs", func(p *Pool) *map[string]string { return &p.Attrs }),
}

var targetFields = []wireField[Target]{
	wireStr("pool", func(t *Target) *string { return &t.Pool }),
	wireInt("weight", func(t *Target) *int { return &t.Weight }),
}

var routeFields = []wireField[Route]{
	wireTargets("targets", func(r *Route) *[]Target { return &r.Targets }),
	wireList("fallback", func(r *Route) *[]string { return &r.Fallback }),
	wireStr("affinity", func(r *Route) *string { return &r.Affinity }),
	wireMap("attrs", func(r *Route) *map[string]string { return &r.Attrs }),
}

var residencyFields = []wireField[Residency]{
	{name: "classes", dec: func(d *jsonDecoder, raw []byte, path string, r *Residency) { r.Classes = d.classes(raw, path) }},
	wireStr("unknown_country_class", func(r *Residency) *string { return &r.UnknownCountryClass }),
}

var overrideFields = []wireField[Override]{
	wireStr("route", func(o *Override) *string { return &o.Route }),
	wireTargets("targets", func(o *Override) *[]Target { return &o.Targets }),
	wireMap("attrs", func(o *Override) *map[string]string { return &o.Attrs }),
	wireStr("reason", func(o *Override) *string { return &o.Reason }),
	wireStr("author", func(o *Override) *string { return &o.Author }),
	wireStr("expires_at", func(o *Override) *string { return &o.ExpiresAt }),
}

var healthFields = []wireField[Health]{
	wireStr("addr", func(h *Health) *string { return &h.Addr }),
	wireStr("since", func(h *Health) *string { return &h.Since }),
}

// effectiveFields and candidateFields are rendered only (the table JSON).
var effectiveFields = []wireField[Effective]{
	wireStr("route", func(e *Effective) *string { return &e.Route }),
	wireInt("fallback_depth", func(e *Effective) *int { return &e.FallbackDepth }),
	wireStr("affinity", func(e *Effective) *string { return &e.Affinity }),
	{name: "candidates", enc: func(b []byte, e *Effective) []byte {
		if e.Candidates == nil {
			return append(b, "null"...)
		}
		b = append(b, '[')
		for i := range e.Candidates {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendObjectOf(b, &e.Candidates[i], candidateFields, false)
		}
		return append(b, ']')
	}},
	wireMap("attrs", func(e *Effective) *map[string]string { return &e.Attrs }),
	wireList("degraded", func(e *Effective) *[]string { return &e.Degraded }),
}

var candidateFields = []wireField[Candidate]{
	wireStr("pool", func(c *Candidate) *string { return &c.Pool }),
	wireStr("host", func(c *Candidate) *string { return &c.Host }),
	wireInt("weight", func(c *Candidate) *int { return &c.Weight }),
}

// decodeFields decodes the members of the JSON object raw into v by its
// field list; members not in the list go to extra.
func decodeFields[T any](d *jsonDecoder, raw []byte, path string, v *T, fields []wireField[T], extra *Extra) {
	var buf [12]jsonMember
	for _, m := range d.members(buf[:0], raw, path) {
		f := fieldNamed(fields, m.key)
		if f == nil || f.dec == nil {
			if twin := caseTwin(fields, m.key); twin != "" {
				// Kept, it would be copied beside twin into the table
				// JSON, where a reader matching names without case (Go's
				// encoding/json) takes the later of the two: this one.
				d.errs.add("", joinPath(path, m.key), "differs from the field %q only by case; refused (a reader matching names without case would take it for %q)", twin, twin)
				continue
			}
			d.extra(extra, m, path)
			continue
		}
		f.dec(d, m.raw, joinPath(path, m.key), v)
	}
}

// caseTwin returns the name of the field that name differs from only by
// case, or "".
func caseTwin[T any](fields []wireField[T], name string) string {
	for i := range fields {
		if fields[i].name != name && strings.EqualFold(fields[i].name, name) {
			return fields[i].name
		}
	}
	return ""
}

func fieldNamed[T any](fields []wireField[T], name string) *wireField[T] {
	for i := range fields {
		if fields[i].name == name {
			return &fields[i]
		}
	}
	return nil
}

// appendObjectOf appends v as a JSON object of its fields in list order,
// leaving out empty members when omitEmpty (the types whose tags say
// omitempty on every member that may be empty).
func appendObjectOf[T any](b []byte, v *T, fields []wireField[T], omitEmpty bool) []byte {
	b = append(b, '{')
	first := true
	for i := range fields {
		f := &fields[i]
		if omitEmpty && f.empty != nil && f.empty(v) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, f.name...)
		b = append(b, `":`...)
		b = f.enc(b, v)
	}
	return append(b, '}')
}
