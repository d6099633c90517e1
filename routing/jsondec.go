package routing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// jsonDecoder decodes JSON into the value types of this package (Pool,
// Route, Residency, Override, Health) more strictly than encoding/json:
// field names match exactly (encoding/json also accepts "HOST" for "host"),
// every type error is collected with its full path ("targets[1].weight"),
// and fields a type does not declare are kept in its Extra (top level) or
// listed in unknown (inside nested objects such as a target), which config
// files refuse.
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

var structInfos sync.Map // reflect.Type -> *structInfo

func infoOf(t reflect.Type) *structInfo {
	if v, ok := structInfos.Load(t); ok {
		return v.(*structInfo)
	}
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
	structInfos.Store(t, info)
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
	var m map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
		d.typeErr(path, "an object", raw)
		return
	}
	info := infoOf(v.Type())
	for _, k := range sortedKeys(m) {
		if i, ok := info.fields[k]; ok {
			d.value(m[k], v.Field(i), joinPath(path, k))
			continue
		}
		if info.extra < 0 {
			d.unknown = append(d.unknown, joinPath(path, k))
			continue
		}
		ev := v.Field(info.extra)
		if ev.IsNil() {
			ev.Set(reflect.ValueOf(Extra{}))
		}
		ev.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(canonicalRaw(m[k])))
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
		var items []json.RawMessage
		if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
			d.typeErr(path, "a list", raw)
			return
		}
		s := reflect.MakeSlice(v.Type(), len(items), len(items))
		for i, item := range items {
			d.value(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		var m map[string]json.RawMessage
		if raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
			d.typeErr(path, "an object", raw)
			return
		}
		out := reflect.MakeMapWithSize(v.Type(), len(m))
		for _, k := range sortedKeys(m) {
			e := reflect.New(v.Type().Elem()).Elem()
			d.value(m[k], e, joinPath(path, k))
			out.SetMapIndex(reflect.ValueOf(k), e)
		}
		v.Set(out)
	case reflect.String:
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			d.typeErr(path, "a string", raw)
			return
		}
		v.SetString(s)
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
