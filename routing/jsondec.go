package routing

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// jsonDecoder decodes JSON into the value types of this package (Pool,
// Route, Residency, Override, Health) more strictly than encoding/json:
// field names match exactly (encoding/json also accepts "HOST" for "host"),
// every type error is collected with its full path ("targets[1].weight"),
// and fields a type does not declare are kept in its Extra (values keep
// them, forward compatible); those inside nested objects (a target) are
// also listed in unknown, which config files refuse.
type jsonDecoder struct {
	errs    Errors
	unknown []string
}

// decodeJSONObject decodes the JSON object raw into v, a pointer to a
// struct.
func decodeJSONObject(raw []byte, v any) (unknown []string, errs Errors) {
	var d jsonDecoder
	d.object(raw, reflect.ValueOf(v).Elem(), "")
	return d.unknown, d.errs
}

type structInfo struct {
	fields map[string]int // JSON name -> field index
	extra  int            // index of the Extra field, or -1
}

// structInfos holds the structInfo of every struct type the decoder
// meets (the value types and Target), made once: a plain map read without
// locks, as decoding runs on the agent's path from a watch event to the
// table.
var structInfos = func() map[reflect.Type]*structInfo {
	m := map[reflect.Type]*structInfo{}
	for _, v := range []any{Pool{}, Route{}, Target{}, Residency{}, Override{}, Health{}} {
		t := reflect.TypeOf(v)
		m[t] = newStructInfo(t)
	}
	return m
}()

func infoOf(t reflect.Type) *structInfo {
	if info, ok := structInfos[t]; ok {
		return info
	}
	return newStructInfo(t) // a type not listed above (tests): made each time
}

func newStructInfo(t reflect.Type) *structInfo {
	info := &structInfo{fields: map[string]int{}, extra: -1}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Type == reflect.TypeOf(Extra(nil)) {
			info.extra = i
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" && f.IsExported() {
			info.fields[name] = i
		}
	}
	return info
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
	got := "JSON " + jsonKind(raw)
	if got == "JSON number" {
		got += " " + truncate(raw)
	}
	d.errs.add("", path, "expected %s, got %s", want, got)
}

// object decodes a JSON object into the struct v.
func (d *jsonDecoder) object(raw []byte, v reflect.Value, path string) {
	if raw[0] != '{' {
		d.typeErr(path, "an object", raw)
		return
	}
	info := infoOf(v.Type())
	for _, m := range splitObject(raw) {
		k := m.key
		if i, ok := info.fields[k]; ok {
			d.value(m.raw, v.Field(i), joinPath(path, k))
			continue
		}
		if path != "" || info.extra < 0 {
			// Inside a nested object (a target) an unknown field is also
			// listed, for config files to refuse; values keep it in Extra.
			d.unknown = append(d.unknown, joinPath(path, k))
		}
		if info.extra < 0 {
			continue
		}
		ev := v.Field(info.extra)
		if ev.IsNil() {
			ev.Set(reflect.ValueOf(Extra{}))
		}
		ev.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(canonicalRaw(m.raw)))
	}
}

// value decodes one JSON value into v; null leaves v at its zero value.
func (d *jsonDecoder) value(raw []byte, v reflect.Value, path string) {
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.object(raw, v, path)
	case reflect.Slice:
		if raw[0] != '[' {
			d.typeErr(path, "a list", raw)
			return
		}
		items := splitArray(raw)
		s := reflect.MakeSlice(v.Type(), len(items), len(items))
		for i, item := range items {
			d.value(item, s.Index(i), path+"["+strconv.Itoa(i)+"]")
		}
		v.Set(s)
	case reflect.Map:
		if raw[0] != '{' {
			d.typeErr(path, "an object", raw)
			return
		}
		members := splitObject(raw)
		if v.Type() == reflect.TypeOf(map[string]string(nil)) { // attrs: the common case, without reflection
			out := make(map[string]string, len(members))
			for _, m := range members {
				if string(m.raw) == "null" {
					out[m.key] = "" // as value() leaves a null
					continue
				}
				if m.raw[0] != '"' {
					d.typeErr(joinPath(path, m.key), "a string", m.raw)
					out[m.key] = ""
					continue
				}
				out[m.key] = decodeString(m.raw)
			}
			v.Set(reflect.ValueOf(out))
			return
		}
		out := reflect.MakeMapWithSize(v.Type(), len(members))
		for _, m := range members {
			e := reflect.New(v.Type().Elem()).Elem()
			d.value(m.raw, e, joinPath(path, m.key))
			out.SetMapIndex(reflect.ValueOf(m.key), e)
		}
		v.Set(out)
	case reflect.String:
		if raw[0] != '"' {
			d.typeErr(path, "a string", raw)
			return
		}
		v.SetString(decodeString(raw))
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || v.OverflowInt(n) {
			d.typeErr(path, "an integer", raw)
			return
		}
		v.SetInt(n)
	case reflect.Bool:
		switch string(raw) {
		case "true":
			v.SetBool(true)
		case "false":
			v.SetBool(false)
		default:
			d.typeErr(path, "true or false", raw)
		}
	default:
		d.errs.add("", path, "cannot decode into %s", v.Type())
	}
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

// The decoder's input was validated as JSON (json.Valid) before decoding
// starts, so the helpers below only split it, without checking syntax
// again and without encoding/json's reflection.

// jsonMember is a member of a JSON object: its key and raw value.
type jsonMember struct {
	key string
	raw []byte
}

// splitObject returns the members of a valid JSON object sorted by key;
// of duplicate keys the last one wins (as with encoding/json and a map).
func splitObject(raw []byte) []jsonMember {
	var out []jsonMember
	i := skipWS(raw, 1)
	for i < len(raw) && raw[i] != '}' {
		kEnd := skipValue(raw, i)
		key := decodeString(raw[i:kEnd])
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
		for i++; i < len(b); i++ {
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
// and is valid UTF-8, else by encoding/json (which also replaces invalid
// UTF-8 as it always did).
func decodeString(raw []byte) string {
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body)
	}
	var s string
	json.Unmarshal(raw, &s)
	return s
}
