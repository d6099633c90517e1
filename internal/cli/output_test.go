package cli

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestOutputFormats: every read verb prints valid JSON and YAML with -o.
func TestOutputFormats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--attr", "lang=en", "--ttl", "1h", "--id", "kr")
	verbs := [][]string{{"get"}, {"get", "routes"}, {"history"}, {"history", "1"}, {"status"},
		{"boost", "ls"}, {"resolve", "KR", "--key", "v1"}, {"resolve", "PL", "-f", exampleConfig, "--down", "eu-central"},
		{"validate"}, {"export"}, {"diff", "-f", exampleConfig}, {"pool", "drain", "eu-north", "--dry-run"}}
	for _, v := range verbs {
		js := e.must(ExitOK, append(v, "-o", "json")...)
		if !json.Valid([]byte(js.stdout)) {
			t.Errorf("regionctl %s -o json: invalid JSON:\n%s", strings.Join(v, " "), js.stdout)
		}
		y := e.must(ExitOK, append(v, "-o", "yaml")...)
		var any map[string]any
		if err := yaml.Unmarshal([]byte(y.stdout), &any); err != nil && !strings.HasPrefix(y.stdout, "- ") {
			t.Errorf("regionctl %s -o yaml: %v:\n%s", strings.Join(v, " "), err, y.stdout)
		}
		e.must(ExitOK, v...)
	}
	r := e.must(ExitOK, "resolve", "PL", "-f", exampleConfig, "--down", "eu-central", "--key", "v1")
	if !strings.Contains(r.stdout, "pool-down:eu-central") || !strings.Contains(r.stdout, "→ eu-west") {
		t.Fatalf("what-if resolve:\n%s", r)
	}
	// Without --key the pick among several eligible pools is random:
	// said, so two runs that differ do not look like a fault.
	const random = "(no --key: a weighted random pick among the eligible pools"
	if r := e.must(ExitOK, "resolve", "PL", "-f", exampleConfig); !strings.Contains(r.stdout, random) {
		t.Errorf("resolve PL without --key: %s; want the random pick said", r)
	}
	// With a key, the sticky scores that chose the pool.
	if r := e.must(ExitOK, "resolve", "PL", "-f", exampleConfig, "--key", "v1"); !regexp.MustCompile(`pick: sticky, by the key's rendezvous scores \(lowest wins\): eu-central [0-9.e-]+, eu-west [0-9.e-]+\n`).MatchString(r.stdout) {
		t.Errorf("resolve PL --key v1: %s; want the sticky scores", r)
	}
	for _, args := range [][]string{{"resolve", "PL", "-f", exampleConfig, "--key", "v1"}, {"resolve", "PL", "-f", exampleConfig, "--down", "eu-central"}} {
		if r := e.must(ExitOK, args...); strings.Contains(r.stdout, random) {
			t.Errorf("regionctl %s: %s; want no random pick said (a key, or one eligible pool)", strings.Join(args, " "), r)
		}
	}
	if r := e.run("--cacert", "/nonexistent.pem", "get"); r.code != ExitUsage {
		t.Fatalf("bad --cacert: %s", r)
	}
}

// TestDiffJSONSaysWhyNotValid: diff -o json of a file apply would refuse
// says valid false with the problems, whether the file's own values are
// bad (it printed nothing then) or the state it makes is refused; exit 1
// either way.
func TestDiffJSONSaysWhyNotValid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	type result struct {
		Valid    *bool    `json:"valid"`
		Problems []string `json:"problems"`
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"value", "pools:\n  p: {host: \"\", residency: eu, status: active}\n", "pools/p: host: must not be empty"},
		{"state", strings.Replace(mustRead(t, exampleConfig), "status: active", "status: draining", -1), "would have no eligible pool"},
	} {
		r := e.run("-o", "json", "diff", "-f", writeFile(t, tc.name+".yaml", tc.yaml))
		var got result
		if r.code != ExitRefused || json.Unmarshal([]byte(r.stdout), &got) != nil || got.Valid == nil || *got.Valid ||
			!strings.Contains(strings.Join(got.Problems, "\n"), tc.want) {
			t.Errorf("%s: diff -o json: %s; want valid false and a problem naming %q", tc.name, r, tc.want)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestControlCharactersFromEtcdAreEscaped: values from etcd reach the
// operator's terminal; regionctl writes their control characters escaped
// (an ESC could rewrite the screen, OSC 52 the clipboard), in every
// output: resolve's attrs, a write's diff, status's versions and node
// names (the node is the key's, not what the value claims). JSON output
// stays valid and decodes to the same values.
func TestControlCharactersFromEtcdAreEscaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	bad := "v\x1b[31m\x1b]52;c;SGVsbG8=\x07\u009d\x7f"
	route, _ := json.Marshal(map[string]any{"targets": []map[string]any{{"pool": "eu-central", "weight": 100}}, "attrs": map[string]string{"cdn": bad}})
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey("routes/SE"), string(route)); err != nil {
		t.Fatal(err)
	}
	status, _ := json.Marshal(map[string]any{"node": "n2", "revision": 1, "epoch": 1, "connected": true, "version": "v1" + bad})
	if _, err := testClient.Put(context.Background(), e.ks.Agent("n1"), string(status)); err != nil {
		t.Fatal(err)
	}
	raw := func(s string) bool { return strings.ContainsAny(s, "\x1b\x07\x7f\u009d") }
	for _, args := range [][]string{
		{"resolve", "SE", "--key", "k"},
		{"route", "set", "SE", "--unset-attr", "cdn", "--dry-run"},
		{"status"},
		{"get", "routes"},
	} {
		r := e.run(args...)
		if raw(r.stdout) || raw(r.stderr) {
			t.Errorf("regionctl %s wrote a control character from etcd raw:\n%q\n%q", strings.Join(args, " "), r.stdout, r.stderr)
		}
		if args[0] != "get" && !strings.Contains(r.stdout+r.stderr, `\x1b[31m`) {
			t.Errorf("regionctl %s: want the value shown escaped (\\x1b[31m):\n%s", strings.Join(args, " "), r)
		}
	}
	if r := e.run("status"); !strings.Contains(r.stdout, "n1") || strings.Contains(r.stdout, "n2 ") {
		t.Errorf("status names the node its value claims (n2), not its key's (n1):\n%s", r.stdout)
	}
	var got struct {
		Routes map[string]struct{ Attrs map[string]string } `json:"routes"`
	}
	mustJSON(t, e.must(ExitOK, "get", "routes", "-o", "json").stdout, &got)
	if got.Routes["SE"].Attrs["cdn"] != bad {
		t.Errorf("get -o json: attr %q, want %q as stored", got.Routes["SE"].Attrs["cdn"], bad)
	}
}

// TestTableCellsEscapeAsDocumented: a table cell shows a value's control
// characters as every other output does (\x1b, DEL as \u007f, \u0085,
// \u202e), and its quotes and backslashes as they are: the table quoted
// the cell as Go does (DEL as \x7f, \" and \\ added).
func TestTableCellsEscapeAsDocumented(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	var pool map[string]any
	mustJSON(t, e.get(e.ks.RoutingKey("pools/eu-north")), &pool)
	pool["attrs"] = map[string]string{"x": "a\x1b[31mRED\x7f\u0085\u202eevil", "y": `say "hi" C:\tmp`}
	b, _ := json.Marshal(pool)
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey("pools/eu-north"), string(b)); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "get", "pools")
	if want := `x=a\x1b[31mRED\u007f\u0085\u202eevil,y=say "hi" C:\tmp`; !strings.Contains(r.stdout, want) {
		t.Errorf("get pools: want the attrs cell %s:\n%s", want, r.stdout)
	}
}
