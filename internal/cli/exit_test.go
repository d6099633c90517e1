package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/regiond/regiond/internal/freeport"
)

// TestExitUsage: bad flags and arguments exit 2 before touching etcd.
func TestExitUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	rev, n := e.fingerprint()
	for _, args := range [][]string{
		{"bogus"},
		{"get", "--bogus"},
		{"get", "bogus-section"},
		{"pool"},
		{"pool", "fly", "x"},
		{"pool", "drain"},
		{"pool", "drain", "a", "b"},
		{"pool", "set", "new-pool", "--residency", "eu"},
		{"route", "set", "PL", "--target", "eu-central"},
		{"route", "set", "PL", "--target", "eu-central=lots"},
		{"route", "set", "NEWGROUP"},
		{"apply"},
		{"apply", "-f", "/does/not/exist.yaml"},
		{"get", "-o", "xml"},
		{"pool", "drain", "eu-north", "--retry", "many"},
		{"heartbeat", "eu-central"},
		{"resolve"},
		{"resolve", "PL", "--down", "nope"},
		{"history", "x"},
		{"--prefix", "no-slash", "get"},
		{"--user", "bob", "get"},
		{"--endpoints", "htps://127.0.0.1:2379", "get"},
		{"--endpoints", "127.0.0.1:2379,,", "get"},
	} {
		if r := e.run(args...); r.code != ExitUsage || !strings.Contains(r.stderr, "regionctl: ") {
			t.Errorf("regionctl %s: want exit 2, got %s", strings.Join(args, " "), r)
		}
	}
	for args, want := range map[string]string{
		"boost list":            `unknown regionctl boost command "list"; did you mean regionctl boost ls?`,
		"boost cancle kr-1":     `unknown regionctl boost command "cancle"; did you mean regionctl boost cancel?`,
		"pool drian eu-north x": `did you mean regionctl pool drain?`,
		// A host without its port: the port is missing, not the scheme.
		"--endpoints 127.0.0.1 get": `--endpoints "127.0.0.1": want host:port or scheme://host:port: the port is missing (127.0.0.1:2379 for etcd's usual client port)`,
		// A verb typed without its group names the group's.
		"drain eu-west":   `regionctl: unknown command "drain"; did you mean regionctl pool drain?` + "\nRun 'regionctl --help' for usage.",
		"undrian eu-west": `unknown command "undrian"; did you mean regionctl pool undrain?`,
		"boost PL":        `--ttl is required`, // a country's route, not a typo of ls
		// A systemd env file keeps a comment after a value in the value.
		"heartbeat eu-central --instance fra-1a --addr 10.0.0.12:443 # the address": `--addr: "10.0.0.12:443 # the address" is not a host name or IP address`,
		// A flag typo names the flag meant, and the hint names the verb's help.
		"--endpoint 127.0.0.1:2379 get":                                  "unknown flag: --endpoint; did you mean --endpoints?\nRun 'regionctl get --help' for usage.",
		"pool drain eu-north --reson x":                                  "unknown flag: --reson; did you mean --reason?\nRun 'regionctl pool drain --help' for usage.",
		"pool drain eu-north --wait-converged 30s":                       `--wait-converged takes its value after '=' (--wait-converged=30s): "30s" was taken as an argument`,
		"diff fleet.yaml":                                                "give the config file with -f: regionctl diff -f fleet.yaml\nRun 'regionctl diff --help' for usage.",
		"heartbeat EU-central --instance fra-1a --addr 10.0.0.12:443":    `pool "EU-central": want a pool id`,
		"heartbeat eu-central --instance fra-1a --addr http://10.0.0.12": `--addr: "http://10.0.0.12" is a URL`,
		"heartbeat eu-central --instance fra-1a --addr 10.0.0.12:0":      `--addr: "10.0.0.12:0": port must be 1..65535`,
		// A value that would quietly mean something else.
		"pool drain eu-north --wait-converged=-5s": "--wait-converged=-5s: want a timeout above 0 (the bare flag waits 1m0s)",
		"pool drain eu-north --retry -1":           "--retry -1: want 0 (the default: no retry) or more",
		"history --limit -1":                       "--limit -1: want 0 (all) or more",
		"--command-timeout 0 get":                  "--command-timeout 0s: want a timeout above 0",
		// A value that does not parse as its flag's type says what it takes.
		"status --max-lag N":         `invalid value "N" for --max-lag: want a whole number`,
		"--command-timeout 5 get":    `invalid value "5" for --command-timeout: want a duration such as 30s, 5m or 1h30m`,
		"status --expect-agents 1e9": `invalid value "1e9" for --expect-agents: want a whole number`,
		"--dial-timeout -1s get":     "--dial-timeout -1s: want a timeout above 0",
		// A name or value near a known one names it.
		"get pool":                    `get "pool": want one of pools, routes, boosts, health, policy, skipped; did you mean pools?`,
		"get -o yml":                  `-o "yml": want table, json or yaml; did you mean yaml?`,
		"resolve DE --down eu-centrl": "--down eu-centrl: no such pool; did you mean eu-central?",
	} {
		argv := strings.Fields(args)
		if i := slices.Index(argv, "--addr"); i >= 0 { // the rest is the flag's value, spaces and all
			argv = append(argv[:i+1], strings.Join(argv[i+1:], " "))
		}
		if r := e.run(argv...); r.code != ExitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("regionctl %s: want exit 2 with %q, got %s", args, want, r)
		}
	}
	// A config file that does not exist, or cannot be read (a directory),
	// is a usage error (2), not a refusal (1), for every verb that reads one.
	dir := t.TempDir()
	for _, args := range [][]string{
		{"apply", "-f", "/does/not/exist.yaml"},
		{"apply", "-f", dir},
		{"diff", "-f", "/does/not/exist.yaml"},
		{"validate", "-f", dir},
		{"resolve", "PL", "-f", "/does/not/exist.yaml"},
	} {
		if r := e.run(args...); r.code != ExitUsage || !strings.Contains(r.stderr, "regionctl: read config file: ") {
			t.Errorf("regionctl %s: want exit 2 saying the file cannot be read, got %s", strings.Join(args, " "), r)
		}
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatal("a usage error wrote to etcd")
	}
}

// TestExitUnreachable: an etcd that does not answer gives exit 4 within
// seconds, naming the endpoints tried.
func TestExitUnreachable(t *testing.T) {
	t.Parallel()
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	ep := fmt.Sprintf("127.0.0.1:%d", port)
	for _, tc := range []struct {
		args  []string
		write bool   // says nothing was written
		cause string // the dial's error named
	}{
		{[]string{"get"}, false, "connection refused"},
		{[]string{"pool", "drain", "eu-north"}, true, "connection refused"},
		{[]string{"status"}, false, "connection refused"},
		{[]string{"rollback", "1"}, true, "connection refused"},
		{[]string{"agent", "rm", "n1"}, true, "connection refused"},
		// auth apply dials with no probe (root need not read regiond's
		// keys): its first read of etcd's roles meets the timeout.
		{[]string{"--command-timeout", "1s", "auth", "apply", "--agent", "n1"}, true, "read role regiond-"},
		{[]string{"--command-timeout", "1s", "auth", "apply", "--agent", "n1", "--dry-run"}, false, "read role regiond-"},
	} {
		args := tc.args
		start := time.Now()
		var out, errb strings.Builder
		code := run(context.Background(), append([]string{"--endpoints", ep}, args...), &out, &errb, func(string) string { return "" })
		took := time.Since(start)
		// A bound on retrying (backoff would take 30s+), not a speed check.
		if code != ExitUnreachable || !strings.Contains(errb.String(), "etcd unreachable at "+ep) ||
			!strings.Contains(errb.String(), tc.cause) || took > 10*time.Second {
			t.Errorf("regionctl %s against %s: exit %d after %s, stderr %q", strings.Join(args, " "), ep, code, took, errb.String())
		}
		// A write says nothing was written (no Txn was sent); a read does
		// not speak of writing.
		if strings.HasSuffix(strings.TrimSpace(errb.String()), "; nothing was written") != tc.write {
			t.Errorf("regionctl %s against %s: stderr %q; want it to end \"; nothing was written\" only for a write", strings.Join(args, " "), ep, errb.String())
		}
	}

	var out0, err0 strings.Builder
	if code := run(context.Background(), []string{"--endpoints", "", "get"}, &out0, &err0, func(string) string { return "" }); code != ExitUsage ||
		!strings.Contains(err0.String(), "--endpoints is empty") {
		t.Errorf("regionctl --endpoints '' get: exit %d, stderr %q; want 2 saying --endpoints is empty", code, err0.String())
	}

	// A gRPC server that is not etcd: exit 4, saying so.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go srv.Serve(ln)
	defer srv.Stop()
	var out, errb strings.Builder
	code := run(context.Background(), []string{"--endpoints", ln.Addr().String(), "get"}, &out, &errb, func(string) string { return "" })
	if code != ExitUnreachable || !strings.Contains(errb.String(), "does not speak etcd's API") {
		t.Errorf("regionctl get against a gRPC server that is not etcd: exit %d, stderr %q; want 4 saying it is not etcd", code, errb.String())
	}

	// An HTTP/1 server that is not etcd (regiond's own API is the usual
	// mix-up): exit 4, saying so.
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	out.Reset()
	errb.Reset()
	code = run(context.Background(), []string{"--endpoints", web.URL, "--dial-timeout", "500ms", "get"}, &out, &errb, func(string) string { return "" })
	if code != ExitUnreachable || !strings.Contains(errb.String(), web.URL+": an HTTP server that is not etcd answers there") {
		t.Errorf("regionctl get against an HTTP server that is not etcd: exit %d, stderr %q; want 4 saying it is not etcd", code, errb.String())
	}
}

// TestExitConflict: a write whose epoch moved between its read and its Txn
// exits 3 with the epochs; --retry re-reads and succeeds.
func TestExitConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	var bumped, others atomic.Int32
	hook := func() {
		if bumped.Add(1) == 1 { // another operator writes in between, once
			e.must(ExitOK, "pool", "set", "eu-west", "--attr", fmt.Sprintf("other=%d", others.Add(1)))
		}
	}
	ctx := context.WithValue(context.Background(), afterReadHook{}, hook)
	r := e.runCtx(ctx, "pool", "set", "eu-central", "--attr", "mine=1")
	if r.code != ExitConflict || !strings.Contains(r.stderr, "config changed concurrently (epoch 1 → 2); re-run (it builds on the new state: regionctl history 2 shows what changed)") {
		t.Fatalf("want exit 3, got %s", r)
	}
	bumped.Store(0)
	r = e.runCtx(ctx, "pool", "set", "eu-central", "--attr", "mine=1", "--retry", "2")
	if r.code != ExitOK || !strings.Contains(r.stdout, "epoch 3 → 4") || e.audit(4).Command != "pool set eu-central --attr mine=1 --retry 2" {
		t.Fatalf("--retry: %s", r)
	}
	if !strings.Contains(e.get(e.ks.RoutingKey("pools/eu-central")), `"mine":"1"`) || !strings.Contains(e.get(e.ks.RoutingKey("pools/eu-west")), `"other":"2"`) {
		t.Fatal("an update was lost")
	}
}

// TestEnvFlags: REGIONCTL_<FLAG> sets flags not given; the password comes
// from REGIONCTL_PASSWORD and never reaches the audit record.
func TestEnvFlags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	var out, errb strings.Builder
	env := map[string]string{
		"REGIONCTL_ENDPOINTS": strings.Join(testServer.Endpoints, ","),
		"REGIONCTL_PREFIX":    e.prefix,
		"REGIONCTL_REASON":    "from the environment",
		"REGIONCTL_USER":      "alice",
		"REGIONCTL_PASSWORD":  "s3cret",
	}
	code := run(context.Background(), []string{"pool", "drain", "eu-north"}, &out, &errb, func(k string) string { return env[k] })
	if code != ExitOK {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	rec := e.audit(2)
	if rec.Reason != "from the environment" || rec.User != "alice" || strings.Contains(e.get(e.ks.Audit(2)), "s3cret") {
		t.Fatalf("audit: %+v", rec)
	}
	// The verb's flags from the environment are in the audit command, as
	// a shell shows them; the connection flags are not.
	if want := "REGIONCTL_REASON='from the environment' pool drain eu-north"; rec.Command != want {
		t.Fatalf("audit command %q, want %q", rec.Command, want)
	}
	// A bad value from the environment names the variable, not the flag.
	for k, want := range map[string]string{
		"REGIONCTL_OUTPUT":          `REGIONCTL_OUTPUT "jsn": want table, json or yaml`,
		"REGIONCTL_COMMAND_TIMEOUT": "REGIONCTL_COMMAND_TIMEOUT 0s: want a timeout above 0",
	} {
		bad := map[string]string{"REGIONCTL_OUTPUT": "jsn", "REGIONCTL_COMMAND_TIMEOUT": "0s"}[k]
		var out, errb strings.Builder
		code := run(context.Background(), []string{"get"}, &out, &errb, func(n string) string {
			if n == k {
				return bad
			}
			return env[n]
		})
		if code != ExitUsage || !strings.Contains(errb.String(), want) {
			t.Errorf("%s=%s: exit %d %q; want exit 2 naming %q", k, bad, code, errb.String(), want)
		}
	}
	r := e.must(ExitOK, "pool", "undrain", "eu-north", "--user", "bob:hunter2")
	if rec := e.audit(3); rec.User != "bob" || strings.Contains(e.get(e.ks.Audit(3)), "hunter2") {
		t.Fatalf("audit with user:password: %+v %s", rec, r)
	}
}

// TestUnknownEnvWarned: a REGIONCTL_ variable that sets no flag of any
// verb and is none of the others regionctl reads is named in a warning,
// with the variable meant when one is close; the command still runs.
// A typo (REGIONCTL_PRFIX) used to be ignored without a word, so a write
// meant for one prefix went to the default one.
func TestUnknownEnvWarned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.env = map[string]string{
		"REGIONCTL_PRFIX":         "/staging/v1",
		"REGIONCTL_ENDPOINT":      "127.0.0.1:1",
		"REGIONCTL_COLOUR":        "yes",
		"REGIONCTL_EMPTY":         "",  // unset, as far as regionctl goes
		"REGIONCTL_EXPECT_AGENTS": "3", // another verb's flag
		"REGIONCTL_TTL":           "10s",
		"REGIONCTL_ARGS":          "--verbose",
		"REGIONCTL_PASSWORD":      "unused",
		"REGIONCTL_REASON":        "from the environment",
	}
	r := e.must(ExitOK, "get", "policy")
	want := []string{
		"regionctl: warning: REGIONCTL_COLOUR is set, but regionctl reads no such variable, so it is ignored; REGIONCTL_<FLAG> sets a flag (REGIONCTL_ENDPOINTS for --endpoints), and REGIONCTL_PASSWORD the password of --user",
		"regionctl: warning: REGIONCTL_ENDPOINT is set, but regionctl reads no such variable, so it is ignored; did you mean REGIONCTL_ENDPOINTS?",
		"regionctl: warning: REGIONCTL_PRFIX is set, but regionctl reads no such variable, so it is ignored; did you mean REGIONCTL_PREFIX?",
	}
	if got := otherWarnings(r.stderr); !slices.Equal(got, want) {
		t.Fatalf("unknown REGIONCTL_ variables: %s; want exactly the warnings %q", r, want)
	}
}

// TestHelpEverywhere: every verb has --help with an example.
func TestHelpEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := &app{getenv: func(string) string { return "" }}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		r := e.must(ExitOK, append(path, "--help")...)
		if !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "regionctl") {
			t.Errorf("regionctl %s --help has no example:\n%s", strings.Join(path, " "), r.stdout)
		}
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub)
			}
		}
	}
	walk(a.rootCmd())
}

// TestInterruptWhileDialing: an interrupt (Ctrl-C, SIGTERM) while
// regionctl waits for etcd's first answer exits 1 saying so, and that
// nothing was written; it used to exit 4 as if etcd were unreachable
// ("context deadline exceeded (…: dial: operation was canceled)").
func TestInterruptWhileDialing(t *testing.T) {
	t.Parallel()
	// With a user, the client logs in first: that login waited out
	// --dial-timeout whatever the interrupt (5 minutes here: the test
	// would wait them out). Without, the interrupt ends the first request.
	for _, user := range []string{"alice:pw", ""} {
		e := newEnv(t)
		// A member that takes connections and never answers: a stopped
		// (SIGSTOP) etcd, whose kernel still accepts.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		e.endpoints = []string{ln.Addr().String()}
		ctx, interrupt := context.WithCancel(context.Background())
		defer interrupt()
		go func() {
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				held = append(held, c)
				interrupt() // the operator's Ctrl-C, once regionctl is dialing
			}
		}()
		done := make(chan result, 1)
		go func() {
			done <- e.runCtx(ctx, "--dial-timeout", "5m", "--user", user, "pool", "drain", "apac-tokyo", "--reason", "x")
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("--user %q: still dialing a minute after the interrupt: it waits out --dial-timeout (5m)", user)
		}
		want := "regionctl: interrupted before etcd at " + ln.Addr().String() + " answered: nothing was written"
		if r.code != ExitRefused || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "unreachable") {
			t.Errorf("an interrupt while dialing, --user %q: %s; want exit 1 saying %q", user, r, want)
		}
	}
}
