package routing

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// decodeTypes are the value types decodeJSONObject takes.
var decodeTypes = []func() any{
	func() any { return new(Pool) }, func() any { return new(Route) },
	func() any { return new(Residency) }, func() any { return new(Override) },
	func() any { return new(Health) }, func() any { return new(Target) },
}

// compareWithReference decodes raw (if it is a valid JSON object) into
// every value type with the decoder and with the reference, and fails on
// any difference in values, unknown fields or errors.
func compareWithReference(t *testing.T, raw []byte) {
	t.Helper()
	if !json.Valid(raw) || len(raw) == 0 || raw[0] != '{' {
		return
	}
	for _, mk := range decodeTypes {
		compareDecoders(t, raw, mk)
	}
}

// compareDecoders decodes raw into a new value of mk's type with the
// decoder and with the reference, and fails on any difference in values,
// unknown fields or errors.
func compareDecoders(t *testing.T, raw []byte, mk func() any) {
	t.Helper()
	want := mk()
	wu, we := refDecodeJSONObject(raw, want)
	for _, shared := range []bool{false, true} { // copied strings, or strings sharing raw's memory
		got := mk()
		gu, ge := decodeJSONObject(raw, got, shared)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gu, wu) || fmt.Sprint(ge) != fmt.Sprint(we) {
			t.Fatalf("%T %s (shared %v):\n got %+v %q %v\nwant %+v %q %v", got, raw, shared, got, gu, ge, want, wu, we)
		}
	}
}

// TestDecoderTrickyInputs: inputs around escapes, case, numbers, nulls,
// duplicates, UTF-8 and nesting decode as the reference decodes them.
func TestDecoderTrickyInputs(t *testing.T) {
	inputs := []string{
		`{"ho\u0073t":"a","host":"b"}`,
		`{"host":"a","ho\u0073t":"b"}`,
		`{"ho\u0073t":1,"host":"b","ho\u0073t":"c"}`,
		`{"HOST":"a","Host":"b","host":"c"}`,
		`{"tar\u0067ets":[{"po\u006fl":"a","weight":1e2}]}`,
		`{"targets":[{"pool":"a","weight":100,"pool":"b","weight":null}]}`,
		`{"targets":[{"pool":"a","weight":-0},{"weight":1.0},{"weight":1e2},{"weight":-1.5}]}`,
		`{"targets":[{"weight":9223372036854775807},{"weight":9223372036854775808},{"weight":-9223372036854775809},{"weight":99999999999999999999999}]}`,
		`{"targets":[null,{},[],"x",1,true,{"pool":null,"weight":null,"x":null}]}`,
		`{"targets":[{"Pool":"a","WEIGHT":1,"x":{"y":[null]}}]}`,
		`{"targets":null,"fallback":null,"attrs":null,"affinity":null}`,
		`{"targets":[],"fallback":[],"attrs":{}}`,
		`{"fallback":[null,"a",1,{},[]]}`,
		`{"attrs":{"a":1,"b":null,"c":true,"d":{},"e":[],"f":"ok","a":"last"}}`,
		`{"attrs":{"\u0041":"x","A":"y"}}`,
		`{"classes":{"eu":"PL"}}`,
		`{"classes":{"eu":null,"us":[],"x":[1,null,"PL"],"eu":["DE"]}}`,
		`{"classes":[],"unknown_country_class":1}`,
		`{"classes":null}`,
		`{"classes":{}}`,
		"{\"host\":\"\xff\xfe\",\"\xff\":1,\"\\ufffd\":2}",
		"{\"attrs\":{\"\xff\":\"a\",\"\xef\xbf\xbd\":\"b\"}}",
		"{\"host\":\"\xed\xa0\x80\"}",
		`{"host":"\ud800"}`,
		`{"host":"\ud83d\ude00","addr":"\u2028"}`,
		`{"health_check":null}`, `{"health_check":1}`, `{"health_check":"true"}`, `{"health_check":false}`,
		`{"x":{"a":[1,2,{"b":null}]},"y":"<>&","z":1.50e+03}`,
		`{"":1,"\u0000":2}`,
		`{ "host" : "a" , "region" : "b" }`,
		`{"route":"PL","targets":[{"pool":"eu","weight":100,"pool":"eu2"}],"targets":[{"pool":"x"}]}`,
		`{"since":"a\\\"b","addr":"\\"}`,
		`{"x":"\"}]","host":"a"}`,
		`{"x":["\"",{"\"":"]"}],"host":"a"}`,
		`{"pool":1,"weight":1.5,"x":{"y":null},"WEIGHT":2}`,
		`{"x":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `,"host":"h"}`,
		`{"targets":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
	}
	for _, in := range inputs {
		compareWithReference(t, []byte(in))
	}
}

// TestTargetUnmarshalJSON: a target on its own (json.Unmarshal into a
// Target or a []Target) decodes through the package's decoder. Found in
// review: the typed decoder had no case for it.
func TestTargetUnmarshalJSON(t *testing.T) {
	var tg Target
	if err := json.Unmarshal([]byte(`{"pool":"eu-west","weight":100}`), &tg); err != nil {
		t.Fatalf("json.Unmarshal into Target: %v", err)
	}
	if tg.Pool != "eu-west" || tg.Weight != 100 {
		t.Fatalf("got %+v", tg)
	}
	var ts []Target
	if err := json.Unmarshal([]byte(`[{"pool":"a","weight":40},{"pool":"b","weight":60,"x":1}]`), &ts); err != nil {
		t.Fatalf("json.Unmarshal into []Target: %v", err)
	}
	if len(ts) != 2 || ts[1].Pool != "b" || string(ts[1].Extra["x"]) != "1" {
		t.Fatalf("got %+v", ts)
	}
}

// TestDecoderRandomJSON: random JSON objects built from the fields of
// every value type (names escaped, recased, duplicated; values of every
// JSON type, nested) decode as the reference decodes them.
func TestDecoderRandomJSON(t *testing.T) {
	n := 40000
	if testing.Short() || raceEnabled {
		n = 5000
	}
	rng := rand.New(rand.NewPCG(11, 12))
	names := []string{"host", "region", "residency", "status", "health_check", "attrs", "targets", "fallback",
		"affinity", "classes", "unknown_country_class", "route", "reason", "author", "addr", "since", "pool", "weight",
		"Host", "WEIGHT", "x", "", "eu", "PL"}
	escName := func(s string) string {
		if s == "" || rng.IntN(4) != 0 {
			if rng.IntN(20) == 0 {
				return "\"" + s + "\xff\""
			}
			return `"` + s + `"`
		}
		i := rng.IntN(len(s))
		return fmt.Sprintf(`"%s\u%04x%s"`, s[:i], s[i], s[i+1:])
	}
	scalars := []string{`null`, `""`, `"s"`, `"PL"`, `"eu-west"`, `"a\"b"`, `"\u00e9"`, "\"\xff\"", `"\ud800"`,
		`0`, `-0`, `1`, `100`, `-1`, `1.0`, `1e2`, `-1.5e3`, `9223372036854775807`, `9223372036854775808`,
		`-9223372036854775808`, `-9223372036854775809`, `true`, `false`, `"<&>"`}
	var value func(depth int) string
	// object is a JSON object of up to members-1 members whose values are
	// value(depth).
	object := func(depth, members int, colon string) string {
		var b strings.Builder
		b.WriteByte('{')
		for i := range rng.IntN(members) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(escName(names[rng.IntN(len(names))]))
			b.WriteString(colon)
			b.WriteString(value(depth))
		}
		b.WriteByte('}')
		return b.String()
	}
	value = func(depth int) string {
		switch r := rng.IntN(10); {
		case depth > 4 || r < 5:
			return scalars[rng.IntN(len(scalars))]
		case r < 7:
			var b strings.Builder
			b.WriteByte('[')
			for i := range rng.IntN(4) {
				if i > 0 {
					b.WriteString(" ,")
				}
				b.WriteString(value(depth + 1))
			}
			b.WriteByte(']')
			return b.String()
		default:
			return object(depth+1, 5, " : ")
		}
	}
	checked := 0
	for range n {
		raw := []byte(object(0, 7, ":"))
		if !json.Valid(raw) {
			continue
		}
		compareWithReference(t, raw)
		checked++
	}
	if checked < n/2 {
		t.Fatalf("only %d checked", checked)
	}
}

// FuzzDecoderMatchesReference: the decoder against the reference on any
// valid JSON object (go test -fuzz FuzzDecoderMatchesReference ./routing).
func FuzzDecoderMatchesReference(f *testing.F) {
	for _, s := range []string{`{"host":"a"}`, `{"targets":[{"pool":"a","weight":1}]}`, `{"classes":{"eu":["PL"]}}`,
		`{"attrs":{"a":"b"}}`, `{"ho\u0073t":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { compareWithReference(t, raw) })
}

// TestDecodeValueNeverSharesTheInput: DecodeValue's value stays as it was
// when the caller reuses its buffer (decodeKept's shares it, and only the
// table's own last good values, never changed, are decoded that way).
func TestDecodeValueNeverSharesTheInput(t *testing.T) {
	raw := []byte(`{"host":"edge.example.net","region":"fra","residency":"eu","status":"active","attrs":{"tier":"gold"}}`)
	orig := append([]byte(nil), raw...)
	v, err := DecodeValue("pools/fra", raw)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := decodeKept("pools/fra", raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v, kept) {
		t.Fatalf("decodeKept %+v, DecodeValue %+v", kept, v)
	}
	for i := range raw {
		if raw[i] >= 'a' && raw[i] <= 'z' {
			raw[i] -= 'a' - 'A' // the caller's buffer, reused
		}
	}
	want, _ := DecodeValue("pools/fra", orig)
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("DecodeValue's value changed with its input: %+v", v)
	}
	if p := kept.(*Pool); p.Host != "EDGE.EXAMPLE.NET" {
		t.Fatalf("decodeKept copied the strings (host %q): it should share the input", p.Host)
	}
}
