package routing

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const minimalYAML = `
policy:
  residency: {classes: {eu: [PL, NO]}, unknown_country_class: eu}
pools:
  eu-central: {host: edge-fra-1.example.net, region: eu-central, residency: eu, status: active}
routes:
  _default: {targets: [{pool: eu-central, weight: 100}]}
  NO: {targets: [{pool: eu-central, weight: 100}], fallback: [_default]}
`

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(minimalYAML))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Policy: PolicySection{Residency: &Residency{Classes: map[string][]string{"eu": {"PL", "NO"}}, UnknownCountryClass: "eu"}},
		Pools:  map[string]Pool{"eu-central": {Host: "edge-fra-1.example.net", Region: "eu-central", Residency: "eu", Status: StatusActive}},
		Routes: map[string]Route{
			DefaultRoute: {Targets: tg("eu-central", 100), Affinity: AffinitySticky},
			"NO":         {Targets: tg("eu-central", 100), Fallback: []string{DefaultRoute}, Affinity: AffinitySticky},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
}

// TestParseConfigNorway: config files are YAML 1.2, where a bare NO is the
// string "NO" (Norway), not the YAML 1.1 boolean false; the same for the
// other YAML 1.1 booleans that are country codes or attr values.
func TestParseConfigNorway(t *testing.T) {
	_, err := ParseConfig([]byte(`
policy:
  residency:
    classes:
      eu: [NO, IS, LI]
      other: [ON, 'Y']
pools:
  p: {host: h, residency: eu, attrs: {autoplay: on, subtitles: no, hd: yes, tos: off}}
routes:
  _default: {targets: [{pool: p, weight: 100}]}
  NO: {targets: [{pool: p, weight: 100}]}
`))
	if err == nil || !strings.Contains(err.Error(), `classes.other[0]: "ON" is not an ISO 3166-1 alpha-2 code`) {
		t.Fatalf("want ON refused as a country code (it is one only in YAML 1.1 as a bool), got %v", err)
	}
	cfg, err := ParseConfig([]byte(`
policy:
  residency: {classes: {eu: [NO, IS, LI]}}
pools:
  p: {host: h, residency: eu, attrs: {autoplay: on, subtitles: no, hd: yes, tos: off}}
routes:
  _default: {targets: [{pool: p, weight: 100}]}
  NO: {targets: [{pool: p, weight: 100}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Policy.Residency.Classes["eu"]; !slices.Equal(got, []string{"NO", "IS", "LI"}) {
		t.Errorf("classes.eu = %q", got)
	}
	if _, ok := cfg.Routes["NO"]; !ok {
		t.Errorf("route NO missing: %v", sortedKeys(cfg.Routes))
	}
	want := map[string]string{"autoplay": "on", "subtitles": "no", "hd": "yes", "tos": "off"}
	for k, v := range want {
		if got := cfg.Pools["p"].Attrs[k]; got != v {
			t.Errorf("attrs.%s = %q, want %q", k, got, v)
		}
	}
}

func TestParseConfigJSON(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"pools":{"p":{"host":"h","residency":"eu"}},"routes":{"_default":{"targets":[{"pool":"p","weight":100}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy.Residency != nil || cfg.Pools["p"].Status != StatusActive {
		t.Errorf("got %+v", cfg)
	}
}

func TestParseConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string // every line of the error, in order
	}{
		{name: "unknown top-level section", yaml: "pools: {}\nroute: {}\n",
			want: []string{"route: unknown top-level section (want policy, pools, routes)"}},
		{name: "unknown policy", yaml: "policy: {residence: {}}\n",
			want: []string{"policy.residence: unknown policy (want residency)"}},
		{name: "unknown pool field", yaml: "pools:\n  p: {host: h, residency: eu, healthcheck: true}\n",
			want: []string{"pools/p: healthcheck: unknown field (did you mean health_check?)"}},
		{name: "unknown route field", yaml: "routes:\n  PL: {targets: [{pool: p, weight: 100}], fallbacks: [_default]}\n",
			want: []string{"routes/PL: fallbacks: unknown field (did you mean fallback?)"}},
		{name: "unknown target field", yaml: "routes:\n  PL: {targets: [{pool: p, weight: 100, wieght: 5}]}\n",
			want: []string{"routes/PL: targets[0].wieght: unknown field (did you mean weight?)"}},
		{name: "unknown policy field", yaml: "policy:\n  residency: {classes: {eu: [PL]}, unknown_class: eu}\n",
			want: []string{"policy/residency: unknown_class: unknown field"}},
		{name: "case variant of a field", yaml: "pools:\n  p: {Host: h, residency: eu}\n",
			want: []string{`pools/p: Host: differs from the field "host" only by case; refused (a reader matching names without case would take it for "host")`}},
		// A misspelt required field is named beside the check it fails.
		{name: "misspelt required field", yaml: "pools:\n  p: {host: h, residncy: eu}\n",
			want: []string{`pools/p: residency: must be a non-empty lower-case label (eu, us, apac, global…), got ""`, "pools/p: residncy: unknown field (did you mean residency?)"}},
		{name: "wrong type", yaml: "routes:\n  PL: {targets: [{pool: p, weight: '70'}, {pool: q, weight: 30}]}\n",
			want: []string{"routes/PL: targets[0].weight: expected an integer, got the string \"70\" (write it without quotes)"}},
		{name: "wrong type of section", yaml: "pools: [p]\n",
			want: []string{"pools: must be a mapping of id to object"}},
		{name: "null value", yaml: "pools:\n  p:\n",
			want: []string{`pools/p: value must be a JSON object, got "null"`}},
		{name: "bad pool id", yaml: "pools:\n  Edge FRA: {host: h, residency: eu}\n",
			want: []string{`pools/Edge FRA: invalid pool id "Edge FRA" (want lower-case letters, digits, '.', '_', '-')`}},
		{name: "bad route name", yaml: "routes:\n  Poland: {targets: [{pool: p, weight: 100}]}\n",
			want: []string{`routes/Poland: invalid route name "Poland" (want an ISO 3166-1 alpha-2 code in upper case, _default, or a lower-case group name)`}},
		{name: "every problem listed", yaml: "pools:\n  p: {host: '', residency: eu, status: paused}\nroutes:\n  PL: {targets: [{pool: p, weight: 130}], affinity: sticky, colour: red}\n",
			want: []string{
				"pools/p: host: must not be empty",
				`pools/p: status: must be active, draining or down, got "paused"`,
				"routes/PL: colour: unknown field",
				"routes/PL: targets: weights must sum to 100, got 130",
				"routes/PL: targets[0].weight: must be 0..100, got 130",
			}},
		// go-yaml names the line of the collection it was parsing counted
		// from 0: said from 1, with its text.
		{name: "malformed YAML", yaml: "pools:\n  p: {host: h\n",
			want: []string{`parse config: yaml: did not find expected ',' or '}', at line 2: "  p: {host: h" or below (a {…} or […] not closed, or two items without a comma between them)`}},
		{name: "missing comma", yaml: "routes:\n  PL: {targets: [{pool: p, weight: 100}]}\n  DE: {targets: [{pool: p weight: 100}]}\n",
			want: []string{`parse config: yaml: did not find expected ',' or '}', at line 3: "  DE: {targets: [{pool: p weight: 100}]}" or below (a {…} or […] not closed, or two items without a comma between them)`}},
		{name: "scanner error, counted from 1 already", yaml: "pools:\n  a:\n    host: x\nroutes:\n  PL: |x\n    y\n",
			want: []string{`parse config: yaml: line 5: did not find expected comment or line break: "  PL: |x"`}},
		{name: "list item among keys", yaml: "pools:\n  p: {host: h}\n- q\n",
			want: []string{`parse config: yaml: did not find expected key, at line 3: "- q" or below (a line indented wrong, or a list item where a key belongs)`}},
		{name: "attr value not a string", yaml: "routes:\n  PL: {attrs: {cron_minutes: 15}}\n",
			want: []string{"routes/PL: attrs.cron_minutes: expected a string, got the number 15 (quote it: \"15\")"}},
		{name: "tab indentation", yaml: "pools:\n\tp: {}\n",
			want: []string{`parse config: yaml: line 2: found character that cannot start any token: "\tp: {}" (line 2 is indented with a tab: YAML indents with spaces only)`}},
		{name: "tab after spaces", yaml: "pools:\n  p:\n  \thost: h\n",
			want: []string{`parse config: yaml: line 3: found character that cannot start any token: "  \thost: h" (line 3 is indented with a tab: YAML indents with spaces only)`}},
		{name: "no token, no tab", yaml: "pools:\n  p: @x\n",
			want: []string{`parse config: yaml: line 2: found character that cannot start any token: "  p: @x" (YAML reserves @ at the start of a value: quote the value, "@x")`}},
		// go-yaml's scanner errors: the line's text and the usual cause.
		{name: "no token, a list item", yaml: "routes:\n  PL:\n    fallback:\n      - `x\n",
			want: []string{"parse config: yaml: line 4: found character that cannot start any token: \"      - `x\" (YAML reserves ` at the start of a value: quote the value, \"`x\")"}},
		{name: "tab after a line", yaml: "pools:\n  p:\n    host: h\n\tresidency: eu\n",
			want: []string{`parse config: yaml: line 4: found a tab character that violates indentation: "\tresidency: eu" (indented with a tab: YAML indents with spaces only)`}},
		{name: "quote not closed", yaml: "pools:\n  p:\n    host: \"h\n    residency: eu\n",
			want: []string{`parse config: yaml: line 3: found unexpected end of stream: "    host: \"h" (a quoted value not closed on this line: the rest of the file was read into it)`}},
		// A parser error of tags counts its line from 0, as go-yaml's
		// parser does: left as go-yaml says it, no line's text.
		{name: "undefined tag handle", yaml: "pools:\n  p:\n    host: !x!y abc\n",
			want: []string{"parse config: yaml: line 2: found undefined tag handle"}},
		{name: "colon in a value", yaml: "pools:\n  p:\n    host: a: b\n",
			want: []string{`parse config: yaml: line 3: mapping values are not allowed in this context: "    host: a: b" (a value holding ": " is quoted, or the line above lacks the ':' after its key)`}},
		{name: "key without its colon", yaml: "pools:\n  p:\n    host h\n    residency: eu\n",
			want: []string{`parse config: yaml: line 4: mapping values are not allowed in this context: "    residency: eu" (a value holding ": " is quoted, or the line above lacks the ':' after its key)`}},
		{name: "backslash in a double-quoted value", yaml: "pools:\n  p:\n    host: \"a\\qb\"\n",
			want: []string{`parse config: yaml: line 3: found unknown escape character: "    host: \"a\\qb\"" (in a "…" value a backslash starts an escape such as \n: write \\ for a backslash, or quote the value with '…')`}},
		// go-yaml names the mapping's start; the line that breaks it is
		// named too when it is another.
		{name: "line indented one space short", yaml: "routes:\n  _default:\n    affinity: sticky\n   attrs: {}\n",
			want: []string{`parse config: yaml: did not find expected key, at line 2: "  _default:" or below (a line indented wrong, or a list item where a key belongs); lines 1 to 3 parse, line 4 breaks them: "   attrs: {}"`}},
		// A flow collection over lines: go-yaml names its first line,
		// which is where it breaks (a prefix cut inside it fails so).
		{name: "flow over lines", yaml: "routes:\n  PL: {targets: [{pool: p, weight: 100}],\n    affinity: sticky\n    attrs: {}}\n",
			want: []string{`parse config: yaml: did not find expected ',' or '}', at line 2: "  PL: {targets: [{pool: p, weight: 100}]," or below (a {…} or […] not closed, or two items without a comma between them)`}},
		{name: "duplicate key", yaml: "pools:\n  p: {host: h, residency: eu}\n  p: {host: h, residency: us}\n",
			want: []string{`parse config: line 3: key "p" defined twice`}},
		{name: "alias", yaml: "pools:\n  p: &p {host: h, residency: eu}\n  q: *p\n",
			want: []string{"parse config: line 3: YAML aliases are not supported in config files"}},
		{name: "merge key", yaml: "pools:\n  p: {host: h, residency: eu}\n  q: {<<: {host: h}, residency: eu}\n",
			want: []string{"parse config: line 3: YAML merge keys (<<) are not supported in config files"}},
		{name: "two documents", yaml: "pools: {}\n---\nroutes: {}\n",
			want: []string{"parse config: the file holds more than one YAML document"}},
		{name: "empty file", yaml: "# nothing\n",
			want: []string{"parse config: file is empty"}},
		{name: "scalar file", yaml: "hello\n",
			want: []string{`parse config: the file must be a mapping with policy, pools and routes: json: cannot unmarshal string into Go value of type map[string]json.RawMessage`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error; got %+v", cfg)
			}
			if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, tc.want) {
				t.Errorf("error:\n got  %q\n want %q", got, tc.want)
			}
		})
	}
}

// TestConfigRoundTrip: export (YAML) then parse gives the same config, for
// the example fleet; Values then Compile keeps every value.
func TestConfigRoundTrip(t *testing.T) {
	cfg := exampleConfig(t)
	y, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseConfig(y)
	if err != nil {
		t.Fatalf("parse exported YAML: %v\n%s", err, y)
	}
	if !reflect.DeepEqual(cfg, back) {
		t.Errorf("round trip through YAML changed the config")
	}
	if _, ok := back.Routes["NO"]; !ok {
		t.Errorf("route NO lost in export:\n%s", y)
	}
	clone := cfg.Clone()
	if !reflect.DeepEqual(cfg, clone) {
		t.Errorf("Clone differs")
	}
	clone.Pools["eu-central"] = Pool{}
	if cfg.Pools["eu-central"].Host == "" {
		t.Errorf("Clone shares pools")
	}
	tbl := compileCfg(t, cfg, CompileOptions{})
	if len(tbl.Skipped()) > 0 {
		t.Errorf("skipped: %v", tbl.Skipped())
	}
	if got, want := len(tbl.PoolIDs()), len(cfg.Pools); got != want {
		t.Errorf("%d pools, want %d", got, want)
	}
	if got, want := len(tbl.RouteNames()), len(cfg.Routes); got != want {
		t.Errorf("%d routes, want %d", got, want)
	}
}

func TestIsConfigKey(t *testing.T) {
	for rel, want := range map[string]bool{
		"pools/p": true, "routes/PL": true, "policy/residency": true,
		"overrides/x": false, "health/p/i": false, "epoch": false, "bogus": false,
	} {
		if got := IsConfigKey(rel); got != want {
			t.Errorf("IsConfigKey(%q) = %v", rel, got)
		}
	}
}

// A line indented one space short deep in a long file (the operator
// drill's): go-yaml names the first key of the mapping (line 2); the
// error names line 451 too, found in about log2(lines) parses, not one per
// line.
func TestYAMLErrorNamesBreakingLine(t *testing.T) {
	var b strings.Builder
	b.WriteString("routes:\n")
	for i := 0; strings.Count(b.String(), "\n") < 10000; i++ {
		fmt.Fprintf(&b, "  g%d:\n    affinity: sticky\n    attrs: {}\n", i)
	}
	lines := strings.SplitAfter(b.String(), "\n")
	lines[450] = strings.TrimPrefix(lines[450], " ") // "   attrs: {}", under "    affinity: sticky"
	data := []byte(strings.Join(lines, ""))
	_, err := ParseConfig(data)
	want := `parse config: yaml: did not find expected key, at line 2: "  g0:" or below (a line indented wrong, or a list item where a key belongs); lines 1 to 450 parse, line 451 breaks them: "   attrs: {}"`
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n got  %v\n want %s", err, want)
	}
	parses := 0
	count := func(p []byte) error { parses++; return parseYAML(p) }
	if got := breakingLine(data, "yaml: line 1: did not find expected key", count); got != 451 {
		t.Fatalf("breakingLine = %d, want 451", got)
	}
	if n := strings.Count(string(data), "\n"); parses > 15 {
		t.Fatalf("%d parses for a file of %d lines: want about log2 of it", parses, n)
	}
}

// TestParseConfigErrorsOfUTF16: a UTF-16 file's scanner error is left as
// go-yaml says it: its bytes' lines are not the file's, so no line's text
// is shown (it would be the wrong one, or the bytes of half a character).
func TestParseConfigErrorsOfUTF16(t *testing.T) {
	src := "pools:\n\tp: {}\n"
	b := []byte{0xff, 0xfe}
	for _, r := range src {
		b = append(b, byte(r), 0)
	}
	_, err := ParseConfig(b)
	if err == nil || err.Error() != "parse config: yaml: line 2: found character that cannot start any token" {
		t.Errorf("ParseConfig of a UTF-16 file indented with a tab: %v; want go-yaml's error as it is", err)
	}
}
