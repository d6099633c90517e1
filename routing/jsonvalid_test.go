package routing

import (
	"encoding/json"
	"strings"
	"testing"
)

// validJSONCases are edge cases of the grammar, each checked against
// encoding/json (the reference validJSON must equal).
var validJSONCases = []string{
	``, ` `, `{}`, ` {} `, `{"a":1}`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{a:1}`, `{"a":1 "b":2}`,
	`[]`, `[1,2]`, `[1,]`, `[,1]`, `[1 2]`, `[`, `]`, `{`, `}`, `[[[]]]`, `[{}]`, `{"a":[{"b":null}]}`,
	`"x"`, `"`, `"\"`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\u00e9"`, `"\u00E9"`, `"\u00g9"`, `"\u00e"`, `"\x"`, `"\'"`,
	"\"a\x01\"", "\"a\x1f\"", "\"a\x7f\"", "\"\xff\xfe\"", "\"é\"", "\"a\tb\"",
	`0`, `-0`, `01`, `-`, `-a`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `-1.5e10`, `00`, `1.5.5`, `+1`, `0x10`,
	`true`, `false`, `null`, `tru`, `nul`, `truex`, `True`, `nulll`, ` null `, "\tnull\r\n", `null null`, `1 2`,
	"\u00a0{}", "{}\x00", `{"a":1}}`, `[1]]`, `{"a":"b"}x`,
}

func TestValidJSONMatchesEncodingJSON(t *testing.T) {
	cases := append([]string(nil), validJSONCases...)
	for _, n := range []int{maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		cases = append(cases, strings.Repeat("[", n)+strings.Repeat("]", n),
			strings.Repeat(`{"a":`, n)+"1"+strings.Repeat("}", n))
	}
	for _, c := range cases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%.40q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

// FuzzValidJSONMatchesEncodingJSON: validJSON and json.Valid agree on
// every input.
func FuzzValidJSONMatchesEncodingJSON(f *testing.F) {
	for _, c := range validJSONCases {
		f.Add([]byte(c))
	}
	f.Add([]byte(`{"host":"edge-fra-1.example.net:443","residency":"eu","status":"active","attrs":{"k":"v"},"x":[1,2.5e3,true,null]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

// BenchmarkValidJSON compares validJSON with json.Valid on a pool value.
func BenchmarkValidJSON(b *testing.B) {
	v := []byte(`{"host":"bench.example.net","region":"bench","residency":"global","status":"active","attrs":{"m":"QB000001Q","pad":"` + strings.Repeat("x", 100) + `"}}`)
	b.Run("validJSON", func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			validJSON(v)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			json.Valid(v)
		}
	})
}
