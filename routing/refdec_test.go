package routing

// The decoder as it was before it split JSON by hand (encoding/json for
// every object, list and string), kept as the reference of a differential
// test.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

type structInfo struct {
	fields map[string]int // JSON name -> field index
	extra  int            // index of the Extra field, or -1
}

func infoOf(t reflect.Type) *structInfo {
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

type refDecoder struct {
	errs    Errors
	unknown []string
}

// decodeJSONObject decodes the JSON object raw into v, a pointer to a
// struct.
func refDecodeJSONObject(raw []byte, v any) (unknown []string, errs Errors) {
	var d refDecoder
	d.object(raw, reflect.ValueOf(v).Elem(), "")
	return d.unknown, d.errs
}

// jsonKind names the JSON type of a value by its first byte.

func (d *refDecoder) typeErr(path, want string, raw []byte) {
	d.errs.add("", path, "%s", typeMessage(want, raw))
}

// object decodes a JSON object into the struct v.
func (d *refDecoder) object(raw []byte, v reflect.Value, path string) {
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
		if twin := refCaseTwin(info, k); twin != "" { // a rule added since: a case twin of a known field is refused
			d.errs.add("", joinPath(path, k), "differs from the field %q only by case; refused (a reader matching names without case would take it for %q)", twin, twin)
			continue
		}
		if path != "" || info.extra < 0 { // the one rule changed since: nested unknown fields are kept and listed
			d.unknown = append(d.unknown, joinPath(path, k))
		}
		if info.extra < 0 {
			continue
		}
		ev := v.Field(info.extra)
		if ev.IsNil() {
			ev.Set(reflect.ValueOf(Extra{}))
		}
		ev.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(canonicalRaw(m[k])))
	}
}

// refCaseTwin returns the field of info that k differs from only by
// case, or "".
func refCaseTwin(info *structInfo, k string) string {
	for name := range info.fields {
		if name != k && strings.EqualFold(name, k) {
			return name
		}
	}
	return ""
}

// value decodes one JSON value into v; null leaves v at its zero value.
func (d *refDecoder) value(raw []byte, v reflect.Value, path string) {
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

// TestDecoderMatchesReference: the decoder gives the values, unknown
// fields and errors of the reference decoder, for the example fleet's
// values and thousands of mutations of them (types swapped, nulls,
// duplicates, escapes, unknown fields, nesting).
func TestDecoderMatchesReference(t *testing.T) {
	samples := append([]KV(nil), kvsOf(t, exampleConfig(t))...)
	samples = append(samples,
		KV{Key: "health/eu-west/i-1", Value: []byte(`{"addr":"10.0.0.1:443","since":"x","zone":{"a":[1,2,{"b":null}]}}`)},
		KV{Key: "overrides/b1", Value: []byte(`{"route":"PL","targets":[{"pool":"eu-west","weight":100}],"attrs":{"x":"y"}}`)},
	)
	rng := rand.New(rand.NewPCG(9, 10))
	pieces := []string{`null`, `"s"`, `"\u00e9\n\"q\""`, `7`, `-1.5e3`, `true`, `[]`, `{}`, `[1,"a",null]`, `{"x":1}`, `"\xff"`, `"a\/b"`, ` `, `{"a":{"b":[{}]}}`}
	mutate := func(raw []byte) []byte {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return raw
		}
		var walk func(v any) any
		walk = func(v any) any {
			switch x := v.(type) {
			case map[string]any:
				for k, e := range x {
					switch rng.IntN(6) {
					case 0:
						x[k] = json.RawMessage(pieces[rng.IntN(len(pieces))])
					case 1:
						delete(x, k)
					default:
						x[k] = walk(e)
					}
				}
				if rng.IntN(4) == 0 {
					x["unknown_"+fmt.Sprint(rng.IntN(3))] = json.RawMessage(pieces[rng.IntN(len(pieces))])
				}
			case []any:
				for i := range x {
					x[i] = walk(x[i])
				}
			}
			return v
		}
		b, _ := json.Marshal(walk(v))
		if rng.IntN(5) == 0 && len(b) > 2 { // a duplicate key, the later one wins
			b = append(append([]byte(`{"host":1,`), b[1:len(b)-1]...), []byte(`,"host":"dup.example"}`)...)
		}
		if rng.IntN(5) == 0 {
			b = append(append([]byte(" \n"), b...), '\t')
		}
		return b
	}
	types := map[Kind]func() any{
		KindPool: func() any { return new(Pool) }, KindRoute: func() any { return new(Route) },
		KindPolicy: func() any { return new(Residency) }, KindOverride: func() any { return new(Override) },
		KindHealth: func() any { return new(Health) },
	}
	checked := 0
	for i := 0; i < 20000; i++ {
		kv := samples[rng.IntN(len(samples))]
		k, err := ParseKey(kv.Key)
		if err != nil || types[k.Kind] == nil {
			continue
		}
		raw := bytes.TrimSpace(mutate(kv.Value))
		if !json.Valid(raw) || len(raw) == 0 || raw[0] != '{' {
			continue
		}
		compareDecoders(t, raw, types[k.Kind])
		checked++
	}
	if checked < 10000 {
		t.Fatalf("only %d values checked", checked)
	}
}
