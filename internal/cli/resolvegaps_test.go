package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/regiond/regiond/routing"
)

// TestResolveGapHealthCheckWithoutLiveKey guards that resolve counts a
// pool with health_check and no live health key as unhealthy, as an agent
// past its grace window does (regionctl.md: "a pool with health_check and
// no live key is unhealthy"): resolve used to answer that pool, where the
// agents send the viewer elsewhere. A live key, whatever its value, makes
// it healthy again.
func TestResolveGapHealthCheckWithoutLiveKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	var pool map[string]any
	mustJSON(t, e.get(e.ks.RoutingKey("pools/eu-central")), &pool)
	pool["health_check"] = true
	b, _ := json.Marshal(pool)
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey("pools/eu-central"), string(b)); err != nil {
		t.Fatal(err)
	}
	var ex routing.Explanation
	mustJSON(t, e.must(ExitOK, "resolve", "DE", "--key", "k", "-o", "json").stdout, &ex)
	if ex.Decision == nil || ex.Decision.Pool == "eu-central" || !slices.Contains(ex.Decision.Degraded, "pool-unhealthy:eu-central") {
		t.Fatalf("resolve DE with eu-central health-checked and no live key: %+v; want another pool and pool-unhealthy:eu-central", ex.Decision)
	}
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey("health/eu-central/i1"), `{"addr":"x"}`); err != nil {
		t.Fatal(err)
	}
	if got := e.resolvePool("DE", "k"); got != "eu-central" {
		t.Fatalf("resolve DE with a live health key of eu-central: %s; want eu-central", got)
	}
}

// TestResolveGapTableSaysTheDecision guards resolve's table output, what
// an operator reads: the decision line names the winning route and the
// fallback depth (not the country's own route), the degraded reasons, the
// chosen route marked with *, a missing route of the chain as "route does
// not exist", and a NoRoute with its reasons. Read from a file: no etcd.
func TestResolveGapTableSaysTheDecision(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.must(ExitOK, "resolve", "DE", "-f", exampleConfig, "--down", "eu-central", "--key", "k")
	if !regexp.MustCompile(`(?m)^DE \(class eu\) → eu-(west|north) \(edge-\S+\) via route eu-general, fallback depth 1$`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "\ndegraded: pool-down:eu-central\n") ||
		!regexp.MustCompile(`(?m)^eu-general \*\s+1\s+eu-central\s+60\s+false\s+pool-down:eu-central$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^DE\s+0\s+eu-central\s+100\s+false\s+pool-down:eu-central$`).MatchString(r.stdout) {
		t.Errorf("resolve DE --down eu-central: %s; want the decision via eu-general at depth 1, degraded, eu-general marked chosen", r)
	}
	// EE has no route of its own: its chain is EE (missing), then _default.
	r = e.must(ExitOK, "resolve", "EE", "-f", exampleConfig, "--key", "k")
	if !regexp.MustCompile(`(?m)^EE \(class eu\) → eu-(central|west) \(edge-\S+\) via route _default, fallback depth 1$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^EE\s+0\s+-\s+-\s+-\s+route does not exist$`).MatchString(r.stdout) {
		t.Errorf("resolve EE: %s; want _default at depth 1 and EE's route said missing", r)
	}
	r = e.run("resolve", "DE", "-f", exampleConfig, "--down", "eu-central,eu-west,eu-north")
	if !regexp.MustCompile(`(?m)^DE \(class eu\): NO ROUTE: .*pool-down:eu-central.*pool-down:eu-west`).MatchString(r.stdout) {
		t.Errorf("resolve DE with every eu pool down: %s; want NO ROUTE with its reasons", r)
	}
}

// TestResolveGapFileWarnsAsValidate guards that resolve -f warns on stderr
// of what validate warns of in the file, taken as the whole config
// (keys-and-values.md: "regionctl validate (and apply/diff/resolve -f of
// such a file) warns"): a policy without the EU's territories.
func TestResolveGapFileWarnsAsValidate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	old := writeFile(t, "eea-only.yaml", strings.Replace(mustRead(t, exampleConfig), ", AX, GF, GP, MF, MQ, RE, YT]", "]", 1))
	r := e.must(ExitOK, "resolve", "RE", "-f", old, "--key", "k")
	if !strings.Contains(r.stderr, "regionctl: warning: "+old+": policy/residency: RE (part of FR) is in no class while FR is in class eu") {
		t.Fatalf("resolve -f of a policy without the territories: %s; want validate's warning naming the file", r)
	}
}

// TestValidateGapJSONShape guards validate -o json and its table line: the
// source, the counts of pools and routes (not swapped), valid true.
func TestValidateGapJSONShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var got map[string]any
	mustJSON(t, e.must(ExitOK, "validate", "-f", exampleConfig, "-o", "json").stdout, &got)
	want := map[string]any{"source": exampleConfig, "pools": 13.0, "routes": 39.0, "valid": true}
	if len(got) != len(want) {
		t.Errorf("validate -o json: %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("validate -o json: %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if r := e.must(ExitOK, "validate", "-f", exampleConfig); r.stdout != "valid: "+exampleConfig+" (13 pools, 39 routes)\n" {
		t.Errorf("validate -f: %q; want the counts", r.stdout)
	}
}

// TestPrintGapC1Boundaries guards termSafe at the ends of the C1 range:
// U+0080 and U+009F (APC, which starts a terminal string) in UTF-8, and
// the lone bytes 0x80 and 0x9f (a terminal reading Latin-1 takes them for
// C1 controls) come out escaped; U+00A0 and 0xa0 are no controls.
func TestPrintGapC1Boundaries(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a\u0080b\u009fc", `a\u0080b\u009fc`},
		{"a\x80b\x9fc", `a\x80b\x9fc`},
		{"\x00\x1f \u00a0", `\x00\x1f ` + "\u00a0"},
	} {
		var b bytes.Buffer
		if _, err := (termSafe{&b}).Write([]byte(tc.in)); err != nil || b.String() != tc.want {
			t.Errorf("termSafe(%q) = %q, %v; want %q", tc.in, b.String(), err, tc.want)
		}
		if got := cellText(tc.in); got != tc.want {
			t.Errorf("cellText(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestPrintGapYAMLOfAnASCIIControlAlone guards -o yaml of a value whose
// only control character is one JSON escapes (\u001b: an ESC, no DEL nor
// format character beside it): written as the text \x1b, as regionctl.md
// says of -o yaml, not left to the YAML encoder.
func TestPrintGapYAMLOfAnASCIIControlAlone(t *testing.T) {
	var b bytes.Buffer
	if err := (printer{format: "yaml", w: &b}).print(map[string]string{"addr": "a\x1b[31mb"}, nil); err != nil {
		t.Fatalf("yaml of an ESC: %v", err)
	}
	if got := b.String(); got != "addr: a\\x1b[31mb\n" {
		t.Errorf("yaml of an ESC: %q; want %q", got, "addr: a\\x1b[31mb\n")
	}
}

// TestResolveGapCertWithoutTLSKey guards resolve's refusal of --cert
// without the TLS key: its --key is the sticky key, so the TLS key must
// come from REGIONCTL_KEY; a usage error (2) that says so, before any dial.
func TestResolveGapCertWithoutTLSKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("--cert", "/nonexistent/c.pem", "resolve", "PL", "--key", "viewer-1")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "set the TLS key with REGIONCTL_KEY") {
		t.Fatalf("resolve --cert without the TLS key: %s; want exit 2 naming REGIONCTL_KEY", r)
	}
}
