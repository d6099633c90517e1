package routing

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeValue(t *testing.T) {
	cases := []struct {
		name string
		key  string
		raw  string
		want Value
	}{
		{name: "pool with defaults", key: "pools/eu-central",
			raw:  `{"host":"edge-fra-1.example.net:443","residency":"eu"}`,
			want: &Pool{Host: "edge-fra-1.example.net:443", Residency: "eu", Status: StatusActive}},
		{name: "pool in full", key: "pools/eu-central",
			raw:  `{"host":"10.1.2.3","region":"eu-central","residency":"eu","status":"draining","health_check":true,"attrs":{"shard":"eu-1"}}`,
			want: &Pool{Host: "10.1.2.3", Region: "eu-central", Residency: "eu", Status: StatusDraining, HealthCheck: true, Attrs: map[string]string{"shard": "eu-1"}}},
		{name: "route with default affinity", key: "routes/PL",
			raw:  `{"targets":[{"pool":"eu-central","weight":70},{"pool":"eu-west","weight":30}],"fallback":["eu-general","_default"]}`,
			want: &Route{Targets: tg("eu-central", 70, "eu-west", 30), Fallback: []string{"eu-general", "_default"}, Affinity: AffinitySticky}},
		{name: "route without targets", key: "routes/apac-general", raw: ` {"affinity":"random"} `,
			want: &Route{Affinity: AffinityRandom}},
		{name: "route null fields", key: "routes/_default", raw: `{"targets":null,"attrs":null,"fallback":null}`,
			want: &Route{Affinity: AffinitySticky}},
		{name: "policy default classes", key: "policy/residency", raw: `{}`,
			want: &Residency{Classes: map[string][]string{"eu": EEA()}, UnknownCountryClass: "eu"}},
		{name: "policy explicit", key: "policy/residency", raw: `{"classes":{"eu":["PL","DE"],"uk":["GB"]},"unknown_country_class":"uk"}`,
			want: &Residency{Classes: map[string][]string{"eu": {"PL", "DE"}, "uk": {"GB"}}, UnknownCountryClass: "uk"}},
		{name: "override", key: "overrides/kr-comeback",
			raw:  `{"route":"KR","targets":[{"pool":"kr-music","weight":100}],"attrs":{},"reason":"comeback week","author":"ana"}`,
			want: &Override{Route: "KR", Targets: tg("kr-music", 100), Reason: "comeback week", Author: "ana"}},
		{name: "health", key: "health/eu-central/i-1", raw: `{"addr":"10.0.0.1:443","since":"2026-03-01T12:00:00Z"}`,
			want: &Health{Addr: "10.0.0.1:443", Since: "2026-03-01T12:00:00Z"}},
		{name: "epoch", key: "epoch", raw: " 42\n", want: int64(42)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeValue(tc.key, []byte(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestDecodeValueErrors(t *testing.T) {
	big := `{"host":"h","residency":"eu","attrs":{"x":"` + strings.Repeat("a", MaxValueSize) + `"}}`
	cases := []struct {
		name string
		key  string
		raw  string
		want string
	}{
		// Wrong types are named by key and full field path.
		{name: "weight as string", key: "routes/PL", raw: `{"targets":[{"pool":"a","weight":50},{"pool":"b","weight":"50"}]}`,
			want: `routes/PL: targets[1].weight: expected an integer, got the string "50" (write it without quotes)`},
		{name: "weight as fraction", key: "routes/PL", raw: `{"targets":[{"pool":"a","weight":50.5},{"pool":"b","weight":49.5}]}`,
			want: "routes/PL: targets[0].weight: expected an integer, got the number 50.5\nroutes/PL: targets[1].weight: expected an integer, got the number 49.5"},
		{name: "weight overflowing int64", key: "routes/PL", raw: `{"targets":[{"pool":"a","weight":99999999999999999999}]}`,
			want: "routes/PL: targets[0].weight: expected an integer, got the number 99999999999999999999"},
		{name: "weight out of range", key: "routes/PL", raw: `{"targets":[{"pool":"a","weight":-30},{"pool":"b","weight":130}]}`,
			want: "routes/PL: targets[0].weight: must be 0..100, got -30\nroutes/PL: targets[1].weight: must be 0..100, got 130"},
		{name: "weights not summing to 100", key: "routes/PL", raw: `{"targets":[{"pool":"a","weight":60},{"pool":"b","weight":30}]}`,
			want: "routes/PL: targets: weights must sum to 100, got 90"},
		{name: "targets not a list", key: "routes/PL", raw: `{"targets":{"pool":"a","weight":100}}`,
			want: "routes/PL: targets: expected a list, got an object"},
		{name: "target not an object", key: "routes/PL", raw: `{"targets":["eu-central"]}`,
			want: `routes/PL: targets[0]: expected an object, got the string "eu-central"`},
		{name: "fallback not a list", key: "routes/PL", raw: `{"fallback":"_default"}`,
			want: `routes/PL: fallback: expected a list, got the string "_default"`},
		{name: "attr value not a string", key: "routes/PL", raw: `{"attrs":{"cron_minutes":15}}`,
			want: "routes/PL: attrs.cron_minutes: expected a string, got the number 15 (quote it: \"15\")"},
		{name: "bad affinity", key: "routes/PL", raw: `{"affinity":"roundrobin"}`,
			want: `routes/PL: affinity: must be sticky or random, got "roundrobin"`},
		{name: "health_check not a bool", key: "pools/eu-central", raw: `{"host":"h","residency":"eu","health_check":"yes"}`,
			want: `pools/eu-central: health_check: expected true or false, got the string "yes"`},
		{name: "host not a string", key: "pools/eu-central", raw: `{"host":443,"residency":"eu"}`,
			want: `pools/eu-central: host: expected a string, got the number 443 (quote it: "443")`},
		{name: "bad status and residency together", key: "pools/eu-central", raw: `{"host":"h","residency":"EU","status":"up"}`,
			want: "pools/eu-central: status: must be active, draining or down, got \"up\"\npools/eu-central: residency: must be a non-empty lower-case label (eu, us, apac, global…), got \"EU\""},
		{name: "classes not an object", key: "policy/residency", raw: `{"classes":["PL"]}`,
			want: "policy/residency: classes: expected an object, got a list"},
		{name: "class member not a country", key: "policy/residency", raw: `{"classes":{"eu":["PL","Norway"]}}`,
			want: `policy/residency: classes.eu[1]: "Norway" is not an ISO 3166-1 alpha-2 code in upper case`},
		{name: "override route not a string", key: "overrides/x", raw: `{"route":7,"targets":[{"pool":"a","weight":100}]}`,
			want: `overrides/x: route: expected a string, got the number 7 (quote it: "7")`},
		{name: "override without effect", key: "overrides/x", raw: `{"route":"KR"}`,
			want: "overrides/x: an override must set targets or attrs"},
		{name: "health addr not a string", key: "health/eu-central/i-1", raw: `{"addr":["10.0.0.1"]}`,
			want: "health/eu-central/i-1: addr: expected a string, got a list"},
		// Whole-value problems.
		{name: "not JSON", key: "routes/PL", raw: `targets: []`,
			want: `routes/PL: value must be a JSON object, got "targets: []"`},
		{name: "syntax error", key: "routes/PL", raw: `{"targets":[}`,
			want: "routes/PL: invalid JSON at byte 13: invalid character '}' looking for beginning of value"},
		{name: "null", key: "pools/eu-central", raw: `null`,
			want: `pools/eu-central: value must be a JSON object, got "null"`},
		{name: "empty", key: "pools/eu-central", raw: ``,
			want: `pools/eu-central: value must be a JSON object, got ""`},
		{name: "list", key: "pools/eu-central", raw: `[1]`,
			want: `pools/eu-central: value must be a JSON object, got "[1]"`},
		{name: "trailing garbage", key: "pools/eu-central", raw: `{"host":"h","residency":"eu"} x`,
			want: "pools/eu-central: invalid JSON at byte 31: invalid character 'x' after top-level value"},
		{name: "oversize", key: "pools/eu-central", raw: big,
			want: fmt.Sprintf("pools/eu-central: value is %d bytes, larger than the 65536-byte limit", len(big))},
		{name: "epoch not a number", key: "epoch", raw: `forty-two`,
			want: `epoch: epoch must be a decimal integer from 0 to 9007199254740991, got "forty-two"`},
		{name: "epoch negative", key: "epoch", raw: `-1`,
			want: `epoch: epoch must be a decimal integer from 0 to 9007199254740991, got "-1"`},
		{name: "epoch past what JSON readers hold exactly", key: "epoch", raw: `9007199254740993`,
			want: `epoch: epoch must be a decimal integer from 0 to 9007199254740991, got "9007199254740993"`},
		// Keys outside the grammar.
		{name: "lower-case route that is not a group", key: "routes/Poland", raw: `{}`,
			want: `key "routes/Poland": invalid route name "Poland" (want an ISO 3166-1 alpha-2 code in upper case, _default, or a lower-case group name)`},
		{name: "pool id with upper case", key: "pools/EU", raw: `{}`,
			want: `key "pools/EU": invalid pool id "EU" (want lower-case letters, digits, '.', '_', '-')`},
		{name: "health without instance", key: "health/eu-central", raw: `{}`,
			want: `key "health/eu-central": want health/<pool>/<instance>`},
		{name: "unknown kind", key: "flags/x", raw: `{}`,
			want: `key "flags/x": not in the routing key grammar (pools/, routes/, policy/residency, overrides/, health/, epoch)`},
		{name: "other policy", key: "policy/cdn", raw: `{}`,
			want: `key "policy/cdn": not in the routing key grammar (pools/, routes/, policy/residency, overrides/, health/, epoch)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := DecodeValue(tc.key, []byte(tc.raw))
			if err == nil {
				t.Fatalf("no error; decoded %#v", v)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got  %s\n want %s", err, tc.want)
			}
		})
	}
}

func TestDecodeValueOversizeIsPerValue(t *testing.T) {
	// Exactly 64 KiB is accepted.
	pad := MaxValueSize - len(`{"host":"h","residency":"eu","attrs":{"x":""}}`)
	raw := `{"host":"h","residency":"eu","attrs":{"x":"` + strings.Repeat("a", pad) + `"}}`
	if len(raw) != MaxValueSize {
		t.Fatalf("test value is %d bytes", len(raw))
	}
	if _, err := DecodeValue("pools/p", []byte(raw)); err != nil {
		t.Fatal(err)
	}
}

// TestCaseTwinOfAKnownFieldIsRefused: a field differing from a known one
// only by case is not kept as unknown (it was, and copied beside the known
// one into the table JSON, where a reader matching names without case,
// as Go's encoding/json does, took it: "HOST":"evil" for "host"); it is
// refused, naming both, inside a target too.
func TestCaseTwinOfAKnownFieldIsRefused(t *testing.T) {
	for _, tc := range []struct{ key, raw, want string }{
		{"pools/eu-central", `{"host":"h","residency":"eu","HOST":"evil"}`, `HOST: differs from the field "host" only by case`},
		{"pools/eu-central", `{"host":"h","residency":"eu","Status":"down"}`, `Status: differs from the field "status" only by case`},
		{"routes/PL", `{"targets":[{"pool":"a","weight":100,"Pool":"b"}]}`, `targets[0].Pool: differs from the field "pool" only by case`},
		// The table JSON's computed "healthy" too: "HEALTHY":true stood
		// beside "healthy":false there.
		{"pools/eu-north", `{"host":"h","residency":"eu","health_check":true,"HEALTHY":true}`, `HEALTHY: differs from the field "healthy" the table adds only by case`},
	} {
		_, err := DecodeValue(tc.key, []byte(tc.raw))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want it refused: %s", tc.key, tc.raw, err, tc.want)
		}
	}
}

// TestDecodeValueTooDeepIsRefused: a value nested more than MaxValueDepth
// levels (an unknown field, kept and copied into the table JSON, where
// PHP's json_decode gives up at 512 for every country) is refused, naming
// the depth; MaxValueDepth levels are accepted. A health value too.
func TestDecodeValueTooDeepIsRefused(t *testing.T) {
	nest := func(levels int) string { // the pool's object is level 1
		return `{"host":"h","residency":"eu","x":` + strings.Repeat("[", levels-1) + strings.Repeat("]", levels-1) + `}`
	}
	if _, err := DecodeValue("pools/p", []byte(nest(MaxValueDepth))); err != nil {
		t.Fatalf("a value %d levels deep: %v", MaxValueDepth, err)
	}
	_, err := DecodeValue("pools/p", []byte(nest(MaxValueDepth+1)))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("nested %d levels deep", MaxValueDepth+1)) {
		t.Fatalf("a value %d levels deep: %v, want it refused naming the depth", MaxValueDepth+1, err)
	}
	health := `{"addr":"a","x":` + strings.Repeat("{\"a\":", MaxValueDepth) + "1" + strings.Repeat("}", MaxValueDepth) + `}`
	if msg := checkHealthValue("health/p/i", []byte(health)); !strings.Contains(msg, "levels deep") {
		t.Fatalf("a health value %d levels deep: %q, want it refused", MaxValueDepth+1, msg)
	}
	// The agent's check of a health value (it does not decode them) and
	// regionctl's decode refuse the same case twin.
	twin := []byte(`{"addr":"a","ADDR":"b"}`)
	_, err = DecodeValue("health/p/i", twin)
	if msg := checkHealthValue("health/p/i", twin); err == nil || !strings.Contains(msg, `ADDR: differs from the field "addr" only by case`) {
		t.Fatalf("a health value with a case twin: agent %q, regionctl %v; want both to refuse it", msg, err)
	}
	if msg := checkHealthValue("health/p/i", []byte(`{"addr":"a","pid":1}`)); msg != "" {
		t.Fatalf("a health value with an unknown field: %q, want it accepted", msg)
	}
}

// TestUnknownFieldsKept: values are forward compatible. Fields this version
// does not know survive a decode/encode round trip and change nothing else;
// a field differing from a known one only by case is not taken for it.
func TestUnknownFieldsKept(t *testing.T) {
	cases := []struct {
		name, key, raw, want string
	}{
		{name: "pool", key: "pools/eu-central",
			raw:  `{"host":"h","residency":"eu","weight_class":"gold","future":{"b":[1, 2],"a":null}}`,
			want: `{"host":"h","residency":"eu","status":"active","future":{"b":[1,2],"a":null},"weight_class":"gold"}`},
		{name: "route", key: "routes/PL",
			raw:  `{"targets":[{"pool":"a","weight":100}],"canary":{"pct":5}}`,
			want: `{"targets":[{"pool":"a","weight":100}],"affinity":"sticky","canary":{"pct":5}}`},
		{name: "policy", key: "policy/residency",
			raw:  `{"classes":{"eu":["PL"]},"unknown_country_class":"eu","audited":true}`,
			want: `{"classes":{"eu":["PL"]},"unknown_country_class":"eu","audited":true}`},
		{name: "override", key: "overrides/x",
			raw:  `{"route":"KR","attrs":{"a":"b"},"expires_hint":"6h"}`,
			want: `{"route":"KR","attrs":{"a":"b"},"expires_hint":"6h"}`},
		{name: "health", key: "health/p/i", raw: `{"addr":"a","pid":42}`, want: `{"addr":"a","pid":42}`},
		{name: "inside a target", key: "routes/PL",
			raw:  `{"targets":[{"pool":"a","weight":60,"zone":"fra-1"},{"pool":"b","weight":40}]}`,
			want: `{"targets":[{"pool":"a","weight":60,"zone":"fra-1"},{"pool":"b","weight":40}],"affinity":"sticky"}`},
		{name: "inside an override's target", key: "overrides/x",
			raw:  `{"route":"KR","targets":[{"pool":"a","weight":100,"note":{"by":"ops"}}]}`,
			want: `{"route":"KR","targets":[{"pool":"a","weight":100,"note":{"by":"ops"}}]}`},
		{name: "other names are kept whatever their case", key: "pools/eu-central",
			raw:  `{"host":"h","residency":"eu","Hostname":"x","FUTURE":1}`,
			want: `{"host":"h","residency":"eu","status":"active","FUTURE":1,"Hostname":"x"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := DecodeValue(tc.key, []byte(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			b, err := EncodeValue(v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("re-encoded:\n got  %s\n want %s", b, tc.want)
			}
			// And the re-encoded value decodes to the same thing.
			v2, err := DecodeValue(tc.key, b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v, v2) {
				t.Errorf("second round trip differs:\n %#v\n %#v", v, v2)
			}
		})
	}
}

// TestTypesUnmarshalJSON: the value types decode the same way through
// encoding/json (as inside a table file or a config clone).
func TestTypesUnmarshalJSON(t *testing.T) {
	var p Pool
	if err := json.Unmarshal([]byte(`{"host":"h","residency":"eu","Hostname":"x","x":1}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.Host != "h" || len(p.Extra) != 2 {
		t.Errorf("got %#v", p)
	}
	if err := json.Unmarshal([]byte(`{"host":"h","residency":"eu","HOST":"x"}`), &p); err == nil {
		t.Errorf("a case twin of host decoded: %#v", p)
	}
	var r Route
	err := json.Unmarshal([]byte(`{"targets":[{"pool":"a","weight":"x"}]}`), &r)
	if err == nil || err.Error() != `targets[0].weight: expected an integer, got the string "x"` {
		t.Errorf("error: %v", err)
	}
	// Decoding into a used value starts afresh.
	r = Route{Fallback: []string{"old"}, Extra: Extra{"old": json.RawMessage(`1`)}}
	if err := json.Unmarshal([]byte(`{"attrs":{"a":"b"}}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Fallback != nil || r.Extra != nil || r.Attrs["a"] != "b" {
		t.Errorf("got %#v", r)
	}
}

func TestParseKey(t *testing.T) {
	cases := []struct {
		rel  string
		want Key
	}{
		{"pools/eu-central", Key{Kind: KindPool, ID: "eu-central"}},
		{"pools/edge.fra_1", Key{Kind: KindPool, ID: "edge.fra_1"}},
		{"routes/PL", Key{Kind: KindRoute, ID: "PL"}},
		{"routes/NO", Key{Kind: KindRoute, ID: "NO"}},
		{"routes/_default", Key{Kind: KindRoute, ID: "_default"}},
		{"routes/apac-general", Key{Kind: KindRoute, ID: "apac-general"}},
		{"policy/residency", Key{Kind: KindPolicy, ID: "residency"}},
		{"overrides/KR-2026.03", Key{Kind: KindOverride, ID: "KR-2026.03"}},
		{"health/eu-central/10.0.0.1:443", Key{Kind: KindHealth, ID: "eu-central", Instance: "10.0.0.1:443"}},
		{"epoch", Key{Kind: KindEpoch}},
	}
	for _, tc := range cases {
		t.Run(tc.rel, func(t *testing.T) {
			k, err := ParseKey(tc.rel)
			if err != nil {
				t.Fatal(err)
			}
			if k != tc.want {
				t.Errorf("got %+v, want %+v", k, tc.want)
			}
			if k.String() != tc.rel {
				t.Errorf("String() = %q", k.String())
			}
		})
	}
	for _, rel := range []string{"", "pools/", "pools/-x", "pools/a/b", "routes/", "routes/XX", "routes/T1", "routes/pl-", "routes/EU",
		"policy/", "policy/residency/x", "overrides/", "overrides/-x", "health/p", "health/p/", "health//i",
		"health/p/i/j", "epoch/", "epoch/1", "agents/n", "/pools/p"} {
		t.Run("invalid "+rel, func(t *testing.T) {
			if k, err := ParseKey(rel); err == nil {
				t.Errorf("ParseKey(%q) = %+v, want an error", rel, k)
			}
		})
	}
}

// TestNameGrammars checks the hand-written name checks against the
// regular expressions of the key grammar.
func TestNameGrammars(t *testing.T) {
	grammars := []struct {
		name  string
		re    *regexp.Regexp
		valid func(string) bool
	}{
		{"pool id", regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`), ValidPoolID},
		{"route name", regexp.MustCompile(`^(_default|[A-Z]{2}|[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)$`), func(s string) bool {
			return ValidRouteName(s) || (len(s) == 2 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'A' && s[1] <= 'Z')
		}},
		{"label", regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`), ValidLabel},
		{"instance", regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`), ValidInstanceID},
		{"override id", regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`), ValidOverrideID},
	}
	alphabet := "az09AZ._-:_ /é\x00"
	r := rand.New(rand.NewPCG(5, 6))
	inputs := []string{"", "a", "-", "a-", "-a", "eu-central", "_default", "PL", "XX", "a.b", "a_b", strings.Repeat("a", 63), strings.Repeat("a", 64),
		strings.Repeat("A", 128), strings.Repeat("A", 129), "10.0.0.1:443"}
	for i := 0; i < 20000; i++ {
		b := make([]byte, r.IntN(8))
		for j := range b {
			b[j] = alphabet[r.IntN(len(alphabet))]
		}
		inputs = append(inputs, string(b))
	}
	for _, g := range grammars {
		for _, s := range inputs {
			if got, want := g.valid(s), g.re.MatchString(s); got != want {
				t.Errorf("%s %q: %v, regexp says %v", g.name, s, got, want)
			}
		}
	}
}

// TestValueNotUTF8IsRefused: a value holding bytes that are not UTF-8,
// anywhere (a known string, an unknown field kept and copied into the
// table JSON raw, an unknown field's name, a health value the agent only
// checks), is refused naming the key, the byte and its offset; so is a
// character cut short at the end. encoding/json accepts such bytes and
// json.Compact copied them into /v1/table and the snapshot file, where
// PHP's json_decode refuses the whole table and a lone 0x9b is the 8-bit
// CSI of a terminal. Valid UTF-8 beyond ASCII is accepted.
func TestValueNotUTF8IsRefused(t *testing.T) {
	for _, tc := range []struct{ key, raw, want string }{
		{"pools/p", "{\"host\":\"h:443\",\"residency\":\"eu\",\"x\":\"a\x9b31mb\"}", "pools/p: value is not valid UTF-8 (JSON must be): byte 0x9b at offset 39 (counting from 0) begins no UTF-8 character"},
		{"pools/p", "{\"host\":\"h:443\",\"residency\":\"eu\",\"x\x9b\":1}", "byte 0x9b at offset 35"},
		{"pools/p", "{\"host\":\"h:443\",\"residency\":\"eu\",\"attrs\":{\"a\":\"\xc3\"}}", "byte 0xc3 at offset 47"},
		{"routes/PL", "{\"targets\":[{\"pool\":\"a\",\"weight\":100,\"note\":\"\xff\"}]}", "routes/PL: value is not valid UTF-8 (JSON must be): byte 0xff at offset 45"},
		{"overrides/o1", "{\"route\":\"PL\",\"attrs\":{\"a\":\"b\"},\"reason\":\"\xe2\x82\"}", "byte 0xe2 at offset 42"},
		{"policy/residency", "{\"classes\":{},\"x\":\"\xed\xa0\x80\"}", "byte 0xed at offset 19"}, // a surrogate's encoding is no UTF-8
		{"health/p/i", "{\"addr\":\"a\x9b\"}", "health/p/i: value is not valid UTF-8 (JSON must be): byte 0x9b at offset 10"},
		{"epoch", "4\x9b", "epoch: value is not valid UTF-8 (JSON must be): byte 0x9b at offset 1"},
	} {
		_, err := DecodeValue(tc.key, []byte(tc.raw))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want it refused: %s", tc.key, tc.raw, err, tc.want)
		}
		if err != nil && !utf8.ValidString(err.Error()) {
			t.Errorf("%s: the refusal %q is not valid UTF-8 itself", tc.key, err)
		}
	}
	// The agent checks a health value without decoding it, and refuses it too.
	if msg := checkHealthValue("health/p/i", []byte("{\"addr\":\"a\",\"x\":\"\x9b\"}")); !strings.Contains(msg, "health/p/i: value is not valid UTF-8 (JSON must be): byte 0x9b at offset 17") {
		t.Errorf("the agent's check of a health value not UTF-8: %q, want it refused naming the offset", msg)
	}
	// UTF-8 beyond ASCII, raw and escaped, is fine, in an unknown field too.
	if _, err := DecodeValue("pools/p", []byte(`{"host":"h:443","residency":"eu","x":"é😀\u00e9","attrs":{"ü":"ß"}}`)); err != nil {
		t.Errorf("a value in UTF-8 beyond ASCII: %v, want it accepted", err)
	}
}

// TestLoneSurrogateEscapeIsRefused: a \u escape of half a UTF-16
// surrogate pair without its other half encodes no character. JSON's
// grammar and encoding/json accept it, and json.Compact copied it, in an
// unknown field, into the table JSON, where PHP's json_decode refuses the
// whole table (JSON_ERROR_UTF16); in a known field it was decoded as
// U+FFFD, not what was written. Such a value is refused anywhere, a health
// value too, naming the escape and its offset; a whole pair, in either
// case of hex digits, is a character and accepted.
func TestLoneSurrogateEscapeIsRefused(t *testing.T) {
	for _, tc := range []struct{ key, raw, want string }{
		{"pools/p", `{"host":"h:443","residency":"eu","x":"a\ud800b"}`, `pools/p: value holds the escape \ud800 at offset 39 (counting from 0), half of a UTF-16 surrogate pair without its other half`},
		{"pools/p", ` {"host":"h:443","residency":"eu","x":"\uDC00\ud83d\ude00"}`, `escape \uDC00 at offset 39`},
		{"pools/p", `{"host":"h:443","residency":"eu","x":"\ud83d\u0041"}`, `escape \ud83d at offset 38`},
		{"pools/p", `{"host":"h:443","residency":"eu","x":"\ud83d"}`, `escape \ud83d at offset 38`},
		{"pools/p", `{"host":"h:443","residency":"eu","attrs":{"a":"\ud800"}}`, `escape \ud800 at offset 47`},
		{"routes/PL", `{"targets":[{"pool":"a","weight":100,"\udfff":1}]}`, `routes/PL: value holds the escape \udfff at offset 38`},
	} {
		_, err := DecodeValue(tc.key, []byte(tc.raw))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want it refused: %s", tc.key, tc.raw, err, tc.want)
		}
	}
	if msg := checkHealthValue("health/p/i", []byte(`{"addr":"a","x":"\ud800"}`)); !strings.Contains(msg, `health/p/i: value holds the escape \ud800 at offset 17`) {
		t.Errorf("the agent's check of a health value with a lone surrogate: %q, want it refused naming the offset", msg)
	}
	for _, raw := range []string{
		`{"host":"h:443","residency":"eu","x":"\ud83d\ude00 \uD83D\uDE00 \ud7ff \ue000 \\ud800"}`,
		`{"host":"h:443","residency":"eu","attrs":{"a":"\ud83d\ude00"},"y":["\u00e9"]}`,
	} {
		if _, err := DecodeValue("pools/p", []byte(raw)); err != nil {
			t.Errorf("%s: %v, want it accepted (whole pairs, no surrogates, an escaped backslash)", raw, err)
		}
	}
}

// TestParseEpoch: the one reading of the epoch key's value that the
// agents' decoder and regionctl's checks share: decimal, 0 to MaxEpoch,
// spaces around allowed; anything else is not an epoch (0, false).
func TestParseEpoch(t *testing.T) {
	for raw, want := range map[string]int64{"0": 0, "7": 7, " 42\n": 42, "9007199254740991": MaxEpoch} {
		if n, ok := ParseEpoch([]byte(raw)); !ok || n != want {
			t.Errorf("ParseEpoch(%q) = %d, %v; want %d, true", raw, n, ok, want)
		}
	}
	for _, raw := range []string{"", "-1", "9007199254740992", "1e3", "0x10", "5 6", "99999999999999999999"} {
		if n, ok := ParseEpoch([]byte(raw)); ok || n != 0 {
			t.Errorf("ParseEpoch(%q) = %d, %v; want 0, false", raw, n, ok)
		}
		if _, err := DecodeValue(EpochKey, []byte(raw)); err == nil {
			t.Errorf("the decoder took %q as an epoch", raw)
		}
	}
}
