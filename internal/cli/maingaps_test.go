package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/regiond/regiond/internal/devetcd"
)

// TestMainGapCommandLineBeatsEnvironment guards the precedence of
// docs/regionctl.md's "Global flags": REGIONCTL_<FLAG> sets only a flag
// not given on the command line. A variable left set in a shell (another
// prefix, another output, another verb's value) must never override what
// the operator typed.
func TestMainGapCommandLineBeatsEnvironment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.env = map[string]string{
		"REGIONCTL_PREFIX": "no-slash", // the runner gives --prefix
		"REGIONCTL_OUTPUT": "yaml",
		"REGIONCTL_DOWN":   "no-such-pool",
	}
	r := e.must(ExitOK, "get", "policy", "-o", "json")
	if !json.Valid([]byte(r.stdout)) {
		t.Fatalf("get -o json with REGIONCTL_OUTPUT=yaml: stdout is not JSON: %s", r)
	}
	// A verb's own flag too.
	r = e.must(ExitOK, "resolve", "PL", "-f", exampleConfig, "--down", "eu-west", "-o", "json")
	if !strings.Contains(r.stdout, `"eu-west"`) || strings.Contains(r.stdout+r.stderr, "no-such-pool") {
		t.Fatalf("resolve --down eu-west with REGIONCTL_DOWN set: %s", r)
	}
}

// TestMainGapBadEnvValueIsUsage guards that a REGIONCTL_<FLAG> value of
// the wrong form is a usage error (exit 2) naming the variable, as a
// typed one is: ignored, the command would run with the default (a
// history of 20 records, the default timeouts) and nothing would say so.
func TestMainGapBadEnvValueIsUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, v := range map[string]string{
		"REGIONCTL_LIMIT":   "lots",  // history's own flag
		"REGIONCTL_VERBOSE": "maybe", // a global one
	} {
		e.env = map[string]string{name: v}
		r := e.run("history")
		if r.code != ExitUsage || !strings.Contains(r.stderr, name+`="`+v+`"`) {
			t.Errorf("%s=%s: want exit 2 naming the variable, got %s", name, v, r)
		}
	}
}

// TestMainGapResolveStickyKeyNotFromEnv guards that REGIONCTL_KEY, the
// TLS client key of the global --key, never sets resolve's own --key (the
// sticky key): with it set for TLS, a resolve would otherwise answer for
// a viewer whose sticky key is a file's path.
func TestMainGapResolveStickyKeyNotFromEnv(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.env = map[string]string{"REGIONCTL_KEY": "/etc/regiond/client-key.pem"}
	r := e.must(ExitOK, "resolve", "FR", "-f", exampleConfig, "-o", "json")
	var ex struct {
		Pick *struct {
			Method string `json:"method"`
		} `json:"pick"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ex); err != nil || ex.Pick == nil {
		t.Fatalf("resolve -o json: %v: %s", err, r)
	}
	if ex.Pick.Method != "random" {
		t.Fatalf("resolve FR without --key, REGIONCTL_KEY set: pick method %q, want random (no sticky key): %s", ex.Pick.Method, r)
	}
}

// TestMainGapTypedPasswordBeatsEnvironment guards the password's
// precedence: --user name:password on the command line is used even with
// REGIONCTL_PASSWORD set (a stale one in the shell, another user's), as
// every typed flag beats its variable; and a refused login never prints
// the password it tried.
func TestMainGapTypedPasswordBeatsEnvironment(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	const prefix = "/pw"
	a := devetcd.EnableTestAuth(t, srv, prefix+"/")
	flags := []string{"--endpoints", srv.Endpoints[0], "--prefix", prefix, "--dial-timeout", "10s"}
	stale := map[string]string{"REGIONCTL_PASSWORD": "stale-password"}
	if r, _ := runEnv(stale, append(flags, "--user", a.User+":"+a.Password, "get", "policy")...); r.code != ExitOK {
		t.Fatalf("--user name:password with another REGIONCTL_PASSWORD set: %s", r)
	}
	r, _ := runEnv(nil, append(flags, "--user", a.User+":wrong-s3cret", "get", "policy")...)
	if r.code != ExitRefused || !strings.Contains(r.stderr, "authentication failed for user "+a.User) || strings.Contains(r.stdout+r.stderr, "wrong-s3cret") {
		t.Fatalf("a refused login: want exit 1 naming the user and never the password, got %s", r)
	}
}
