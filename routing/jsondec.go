package routing

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// jsonDecoder decodes JSON into the value types of this package (Pool,
// Route, Residency, Override, Health) and Target more strictly than
// encoding/json: field names match exactly (encoding/json also accepts
// "HOST" for "host"), every type error is collected with its full path
// ("targets[1].weight"), and fields a type does not declare are kept in its
// Extra (values keep them, forward compatible); those inside nested
// objects (a target) are also listed in unknown, which config files refuse.
type jsonDecoder struct {
	errs    Errors
	unknown []string
	// shared: the strings decoded may share the input's memory (which
	// must then never change; see decodeKept).
	shared bool
}

// decodeJSONObject decodes the JSON object raw into v, a pointer to one of
// the value types or to a Target; with shared, its strings may share
// raw's memory.
func decodeJSONObject(raw []byte, v any, shared bool) (unknown []string, errs Errors) {
	d := jsonDecoder{shared: shared}
	switch x := v.(type) {
	case *Pool:
		d.pool(raw, x, "")
	case *Route:
		d.route(raw, x, "")
	case *Residency:
		d.residency(raw, x, "")
	case *Override:
		d.override(raw, x, "")
	case *Health:
		d.health(raw, x, "")
	case *Target:
		*x = Target{}
		d.target(raw, "", x)
	default:
		d.errs.add("", "", "cannot decode into %T", v)
	}
	return d.unknown, d.errs
}

// Each value type is decoded by its field list (wirefields.go): no
// reflection (decoding runs on the agent's path from a watch event to the
// table). A JSON null leaves a field at its zero value; a member of the
// wrong JSON type is an error naming its path and leaves it zero too.

func (d *jsonDecoder) pool(raw []byte, p *Pool, path string) {
	decodeFields(d, raw, path, p, poolFields, &p.Extra)
}

// target decodes a target into t, in place (its memory is the list's: a
// local would escape through the field list's functions).
func (d *jsonDecoder) target(raw []byte, path string, t *Target) {
	if !isNull(raw) {
		decodeFields(d, raw, path, t, targetFields, &t.Extra)
	}
}

func (d *jsonDecoder) route(raw []byte, r *Route, path string) {
	decodeFields(d, raw, path, r, routeFields, &r.Extra)
}

func (d *jsonDecoder) residency(raw []byte, r *Residency, path string) {
	decodeFields(d, raw, path, r, residencyFields, &r.Extra)
}

// classes decodes the residency classes: an object of lists of strings.
func (d *jsonDecoder) classes(raw []byte, path string) map[string][]string {
	if isNull(raw) {
		return nil
	}
	if raw[0] != '{' {
		d.typeErr(path, "an object", raw)
		return nil
	}
	members := splitObject(raw)
	out := make(map[string][]string, len(members))
	for _, c := range members {
		out[c.key] = list(d, c.raw, joinPath(path, c.key), (*jsonDecoder).strInto)
	}
	return out
}

func (d *jsonDecoder) override(raw []byte, o *Override, path string) {
	decodeFields(d, raw, path, o, overrideFields, &o.Extra)
}

func (d *jsonDecoder) health(raw []byte, h *Health, path string) {
	decodeFields(d, raw, path, h, healthFields, &h.Extra)
}

// members returns the members of the JSON object raw (sorted by key, the
// last of duplicates) appended to buf[:0], or reports that raw is not an
// object.
func (d *jsonDecoder) members(buf []jsonMember, raw []byte, path string) []jsonMember {
	if raw[0] != '{' {
		d.typeErr(path, "an object", raw)
		return nil
	}
	return splitObjectInto(buf, raw, d.shared)
}

// extra keeps a member the type does not declare in its Extra; inside a
// nested object (a target) it is also listed in unknown, for config files
// to refuse.
func (d *jsonDecoder) extra(e *Extra, m jsonMember, path string) {
	if path != "" {
		d.unknown = append(d.unknown, joinPath(path, m.key))
	}
	if *e == nil {
		*e = Extra{}
	}
	(*e)[m.key] = canonicalRaw(m.raw)
}

func isNull(raw []byte) bool { return len(raw) == 0 || string(raw) == "null" }

// list decodes a JSON list with elem for each item; null items are zero.
func list[E any](d *jsonDecoder, raw []byte, path string, elem func(*jsonDecoder, []byte, string, *E)) []E {
	if isNull(raw) {
		return nil
	}
	if raw[0] != '[' {
		d.typeErr(path, "a list", raw)
		return nil
	}
	items := splitArray(raw)
	out := make([]E, len(items))
	for i, item := range items {
		if !isNull(item) {
			elem(d, item, path+"["+strconv.Itoa(i)+"]", &out[i])
		}
	}
	return out
}

// strInto decodes a string into s (a list's element).
func (d *jsonDecoder) strInto(raw []byte, path string, s *string) { *s = d.str(raw, path) }

func (d *jsonDecoder) str(raw []byte, path string) string {
	if isNull(raw) {
		return ""
	}
	if raw[0] != '"' {
		d.typeErr(path, "a string", raw)
		return ""
	}
	return decodeString(raw, d.shared)
}

func (d *jsonDecoder) integer(raw []byte, path string) int {
	if isNull(raw) {
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || int64(int(n)) != n {
		d.typeErr(path, "an integer", raw)
		return 0
	}
	return int(n)
}

func (d *jsonDecoder) boolean(raw []byte, path string) bool {
	switch string(raw) {
	case "true":
		return true
	case "false", "", "null":
		return false
	}
	d.typeErr(path, "true or false", raw)
	return false
}

// stringMap decodes an object of strings (attrs); a null member is "".
func (d *jsonDecoder) stringMap(raw []byte, path string) map[string]string {
	if isNull(raw) {
		return nil
	}
	if raw[0] != '{' {
		d.typeErr(path, "an object", raw)
		return nil
	}
	var buf [8]jsonMember
	members := splitObjectInto(buf[:0], raw, d.shared)
	out := make(map[string]string, len(members))
	for _, m := range members {
		if !isNull(m.raw) && m.raw[0] == '"' {
			out[m.key] = decodeString(m.raw, d.shared)
		} else {
			out[m.key] = d.str(m.raw, joinPath(path, m.key)) // null, or the error naming it
		}
	}
	return out
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// jsonKind names the JSON type of a value by its first byte.
func jsonKind(raw []byte) string {
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "list"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func (d *jsonDecoder) typeErr(path, want string, raw []byte) {
	d.errs.add("", path, "%s", typeMessage(want, raw))
}

// canonicalRaw returns raw compacted and HTML-escaped, as json.Marshal
// writes it, so that an unknown field is stored in the form it is
// re-encoded in and a decode/encode round trip is stable.
func canonicalRaw(raw []byte) json.RawMessage {
	var c, e bytes.Buffer
	if json.Compact(&c, raw) != nil {
		return append(json.RawMessage(nil), raw...)
	}
	json.HTMLEscape(&e, c.Bytes())
	return e.Bytes()
}

// The decoder's input was validated as JSON (validJSON) before decoding
// starts, so the helpers below only split it, without checking syntax
// again and without encoding/json's reflection.

// jsonMember is a member of a JSON object: its key and raw value.
type jsonMember struct {
	key string
	raw []byte
}

// splitObject returns the members of a valid JSON object sorted by key;
// of duplicate keys the last one wins (as with encoding/json and a map).
func splitObject(raw []byte) []jsonMember { return splitObjectInto(nil, raw, false) }

// splitObjectInto is splitObject appending to buf[:0]: a caller that
// passes an array on its stack decodes a small object without allocating.
// With shared, the keys may share raw's memory.
func splitObjectInto(buf []jsonMember, raw []byte, shared bool) []jsonMember {
	out := buf[:0]
	i := skipWS(raw, 1)
	for i < len(raw) && raw[i] != '}' {
		kEnd := skipValue(raw, i)
		key := decodeKey(raw[i:kEnd], shared)
		vStart := skipWS(raw, skipWS(raw, kEnd)+1) // past ':'
		vEnd := skipValue(raw, vStart)
		out = append(out, jsonMember{key: key, raw: raw[vStart:vEnd]})
		i = skipWS(raw, vEnd)
		if i < len(raw) && raw[i] == ',' {
			i = skipWS(raw, i+1)
		}
	}
	slices.SortStableFunc(out, func(a, b jsonMember) int { return strings.Compare(a.key, b.key) })
	dedup := out[:0]
	for j, m := range out {
		if j+1 < len(out) && out[j+1].key == m.key {
			continue // a later duplicate follows
		}
		dedup = append(dedup, m)
	}
	return dedup
}

// fieldNames holds the member names of the value types, each once: a
// decoded key that is one of them is that string (no allocation per key
// per value, nor a copy kept by every decoded value).
var fieldNames = map[string]string{}

func init() { // filled from the field lists, which refer to the decoder
	add := func(name string) { fieldNames[name] = name }
	for _, f := range poolFields {
		add(f.name)
	}
	for _, f := range targetFields {
		add(f.name)
	}
	for _, f := range routeFields {
		add(f.name)
	}
	for _, f := range residencyFields {
		add(f.name)
	}
	for _, f := range overrideFields {
		add(f.name)
	}
	for _, f := range healthFields {
		add(f.name)
	}
}

// decodeKey decodes a valid JSON string that is an object's key.
func decodeKey(raw []byte, shared bool) string {
	if len(raw) >= 2 {
		if s, ok := fieldNames[string(raw[1:len(raw)-1])]; ok {
			return s
		}
	}
	return decodeString(raw, shared)
}

// splitArray returns the raw items of a valid JSON array.
func splitArray(raw []byte) [][]byte {
	var out [][]byte
	i := skipWS(raw, 1)
	for i < len(raw) && raw[i] != ']' {
		end := skipValue(raw, i)
		out = append(out, raw[i:end])
		i = skipWS(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipWS(raw, i+1)
		}
	}
	return out
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns where the valid JSON value starting at i ends.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		for i = plainRun(b, i+1); i < len(b); i = plainRun(b, i+1) {
			switch b[i] {
			case '\\':
				i++
			case '"':
				return i + 1
			}
		}
		return i
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipValue(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(b) && !strings.ContainsRune(",}] \t\r\n", rune(b[i])) {
		i++
	}
	return i
}

// decodeString decodes a valid JSON string: as is when it has no escapes
// and is valid UTF-8 (sharing raw's memory when shared), else by
// encoding/json (which also replaces invalid UTF-8 as it always did).
func decodeString(raw []byte, shared bool) string {
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		if shared && len(body) > 0 {
			return unsafe.String(&body[0], len(body))
		}
		return string(body)
	}
	var s string
	json.Unmarshal(raw, &s)
	return s
}
