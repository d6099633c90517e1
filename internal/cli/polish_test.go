package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/regiond/regiond/routing"
)

// TestIgnoreNotFound checks --ignore-not-found of the removal verbs: what
// does not exist is a write of nothing (exit 0, a note naming it, etcd
// unchanged, -o json noop), while the flag lets no other refusal through
// and removes what does exist as without it.
func TestIgnoreNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--id", "kr-week")
	rev, n := e.fingerprint()
	for _, tc := range []struct {
		args []string
		note string
	}{
		{[]string{"pool", "rm", "nope"}, "pool nope does not exist: nothing to remove (--ignore-not-found)"},
		{[]string{"route", "rm", "XY"}, "route XY does not exist: nothing to remove (--ignore-not-found)"},
		{[]string{"boost", "cancel", "gone-1"}, "boost gone-1 does not exist: nothing to remove (--ignore-not-found)"},
	} {
		if r := e.run(tc.args...); r.code != ExitRefused {
			t.Errorf("regionctl %s without the flag: %s; want exit 1", strings.Join(tc.args, " "), r)
		}
		r := e.must(ExitOK, append(tc.args, "--ignore-not-found")...)
		if !strings.Contains(r.stdout, "no changes; epoch stays 2\n"+tc.note+"\n") {
			t.Errorf("regionctl %s --ignore-not-found: %s; want no changes and %q", strings.Join(tc.args, " "), r, tc.note)
		}
		r = e.must(ExitOK, append(tc.args, "--ignore-not-found", "-o", "json")...)
		var out writeResult
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !out.NoOp || len(out.Notes) != 1 || out.Notes[0] != tc.note {
			t.Errorf("regionctl %s --ignore-not-found -o json: %v %+v; want noop and the note", strings.Join(tc.args, " "), err, out)
		}
	}
	// Other refusals stay refusals: a pool a route names, a route a
	// fallback names, a route's name given to boost cancel.
	for _, args := range [][]string{
		{"pool", "rm", "kr-music"},
		{"route", "rm", "eu-general"},
		{"boost", "cancel", "KR"},
	} {
		if r := e.run(append(args, "--ignore-not-found")...); r.code != ExitRefused || !strings.Contains(r.stderr, "REFUSED") {
			t.Errorf("regionctl %s --ignore-not-found: %s; want still refused", strings.Join(args, " "), r)
		}
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatalf("etcd changed: newest revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}
	// What exists is removed as without the flag.
	e.must(ExitOK, "boost", "cancel", "kr-week", "--ignore-not-found")
	if v := e.get(e.ks.RoutingKey("overrides/kr-week")); v != "" {
		t.Fatalf("boost cancel --ignore-not-found left kr-week: %s", v)
	}
	if r := e.must(ExitOK, "agent", "rm", "n9", "--ignore-not-found"); !strings.Contains(r.stdout, "node n9 has no record: nothing to forget (--ignore-not-found)") {
		t.Fatalf("agent rm n9 --ignore-not-found: %s", r)
	}
	if r := e.run("agent", "rm", "n9"); r.code != ExitRefused || !strings.Contains(r.stderr, "no node record") {
		t.Fatalf("agent rm n9: %s; want refused", r)
	}
}

// TestGetHealthOfAPoolWhoseValueIsInvalid: a health key of a pool whose
// stored value does not decode (a hand edit the agents skip, serving its
// last good value, whose health keys still count) is noted so, not "no
// such pool" (the cli review's bug).
func TestGetHealthOfAPoolWhoseValueIsInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	ctx := context.Background()
	if _, err := testClient.Put(ctx, e.ks.RoutingKey(routing.HealthKey("eu-west", "ams-1")), `{"addr":"10.0.0.9:443","since":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := testClient.Put(ctx, e.ks.RoutingKey(routing.PoolKey("eu-west")), `{"host":"edge-ams-1.example.net:443","residency":"eu","status":"active","region":"EU WEST"}`); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "get", "health")
	if !regexp.MustCompile(`(?m)^health/eu-west/ams-1 .*its pool's stored value is invalid \(the agents serve its last good value; regionctl get skipped\) *$`).MatchString(r.stdout) ||
		strings.Contains(r.stdout, "no such pool") {
		t.Fatalf("get health: %s; want the key of eu-west noted as its pool's invalid value, not no such pool", r)
	}
}

// TestAgentRmNamesRefusalsBeforeAnEtcdError: agent rm of several nodes
// that meets an etcd error after refusing one still names that refusal
// (it returned the error alone), and ends with the error.
func TestAgentRmNamesRefusalsBeforeAnEtcdError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fail := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.Contains(fmt.Sprint(req), "n-second") {
			return status.Error(codes.Internal, "injected: etcd failed")
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	r := e.runCtx(withInterceptor(fail), "agent", "rm", "n-first", "n-second")
	if r.code == ExitOK || !strings.Contains(r.stderr, "REFUSED "+e.ks.Node("n-first")) || !strings.Contains(r.stderr, "injected: etcd failed") {
		t.Fatalf("agent rm n-first n-second, n-first with no record, n-second meeting an error: %s; want n-first's refusal named and the error", r)
	}
}
