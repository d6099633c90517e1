package cli

// Gap tests from a mutation review of regionctl's auth (auth.go),
// heartbeat (heartbeat.go), agent rm (agent.go) and get's health section
// (get.go): each fails with a plausible bug that the package's other tests
// let through, and runs in well under 3 s. They use the package's shared
// embedded etcd (auth apply runs there with authentication off, as etcd
// allows, under a --role-prefix and user names of its own, removed when
// the test ends) and gRPC interceptors (dialOptionsHook) for what etcd
// does only under load, a fault or authentication: a step of auth apply
// refused, a role made by another run meanwhile, a lease that ended or
// cannot be read, a key deleted between two reads, a permission denied.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
)

// withInterceptor is a context that makes regionctl's etcd client run
// intercept on each unary call.
func withInterceptor(intercept grpc.UnaryClientInterceptor) context.Context {
	return context.WithValue(context.Background(), dialOptionsHook{}, []grpc.DialOption{grpc.WithChainUnaryInterceptor(intercept)})
}

// gapAuthNames returns a role prefix and a user-name maker of the test's
// own in the shared etcd (roles and users are etcd-wide, not under
// --prefix), and removes every role and user under them when it ends.
func gapAuthNames(t *testing.T) (rolePrefix string, user func(string) string) {
	t.Helper()
	tag := fmt.Sprintf("gap%d-", prefixSeq.Add(1))
	t.Cleanup(func() {
		ctx := context.Background()
		if users, err := testClient.UserList(ctx); err == nil {
			for _, u := range users.Users {
				if strings.HasPrefix(u, tag) {
					testClient.UserDelete(ctx, u)
				}
			}
		}
		if roles, err := testClient.RoleList(ctx); err == nil {
			for _, r := range roles.Roles {
				if strings.HasPrefix(r, tag) {
					testClient.RoleDelete(ctx, r)
				}
			}
		}
	})
	return tag, func(name string) string { return tag + name }
}

// noHash makes a user-add request add the user without a password, so
// that etcd spends no bcrypt hash on it (at its default cost, which the
// shared test etcd has, a good part of a second under -race): the
// passwords auth apply prints are its own all the same.
func noHash(req any) {
	if add, ok := req.(*pb.AuthUserAddRequest); ok {
		add.Password, add.Options = "", &authpb.UserAddOptions{NoPassword: true}
	}
}

// TestGapAuthApplyTable: auth apply --passwords prints the users' steps
// under one "# users" header, says how many changes it applied, and
// prints the generated passwords one per user, sorted by user (they are
// shown once: a script or an operator reads them off in that order); a
// plan with users has no "# no users" line, one without has. Guards the
// table's header, count and password order (mutants: the sort dropped,
// the header repeated per user step, the no-users condition inverted).
func TestGapAuthApplyTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rp, u := gapAuthNames(t)
	// Nine users: more than a small Go map keeps in insertion order.
	var viewers []string
	for _, n := range []string{"kilo", "alpha", "india", "echo", "hotel", "bravo", "golf", "delta", "charlie"} {
		viewers = append(viewers, u(n))
	}
	args := []string{"auth", "apply", "--role-prefix", rp, "--viewer", strings.Join(viewers, ","), "--passwords"}
	var dry authResult
	mustJSON(t, e.must(ExitOK, append(args, "--dry-run", "-o", "json")...).stdout, &dry)
	cheap := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		noHash(req)
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	r := e.runCtx(withInterceptor(cheap), args...)
	if r.code != ExitOK {
		t.Fatalf("auth apply: %s", r)
	}
	if n := strings.Count(r.stdout, "\n# users\n"); n != 1 {
		t.Errorf("auth apply: %d \"# users\" headers, want 1:\n%s", n, r.stdout)
	}
	if want := fmt.Sprintf("\n# applied %d change(s)\n", len(dry.Steps)); !strings.Contains(r.stdout, want) {
		t.Errorf("auth apply: want %q (the dry run's %d steps):\n%s", want, len(dry.Steps), r.stdout)
	}
	if strings.Contains(r.stdout, "# no users") {
		t.Errorf("auth apply with users says it has none:\n%s", r.stdout)
	}
	var shown []string
	for _, m := range regexp.MustCompile(`(?m)^# password of user (\S+): \S+ \(shown once\)$`).FindAllStringSubmatch(r.stdout, -1) {
		shown = append(shown, m[1])
	}
	sorted := slices.Clone(viewers)
	slices.Sort(sorted)
	if !slices.Equal(shown, sorted) {
		t.Errorf("auth apply --passwords printed the passwords of %v, want each user once, sorted: %v\n%s", shown, sorted, r.stdout)
	}
	// No users: the line saying how to name some.
	if r := e.must(ExitOK, "auth", "roles", "--role-prefix", rp); !strings.Contains(r.stdout, "# no users: add --operator USER, --viewer USER, --agent NODE or --origin POOL\n") {
		t.Errorf("auth roles without users: want the no-users line:\n%s", r.stdout)
	}
}

// TestGapAuthApplyFailedPartWayPrintsPasswords: when a step of auth apply
// fails after it added a user with a generated password, the password is
// printed with the error (a re-run skips existing users, so it is shown
// now or never; docs/regionctl.md §Roles). Guards the print on the error
// path (mutant: dropped).
func TestGapAuthApplyFailedPartWayPrintsPasswords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rp, u := gapAuthNames(t)
	refuse := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.Auth/UserGrantRole" {
			return status.Error(codes.Internal, "injected: grant refused")
		}
		noHash(req)
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	r := e.runCtx(withInterceptor(refuse), "auth", "apply", "--role-prefix", rp, "--operator", u("alice"), "--passwords")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "injected: grant refused") ||
		!regexp.MustCompile(`(?m)^# password of user `+regexp.QuoteMeta(u("alice"))+`: \S+ \(shown once\)$`).MatchString(r.stdout) {
		t.Fatalf("auth apply failing after adding a user with a password: %s; want exit 1 with the error, and the password on stdout", r)
	}
	// With -o json, stdout is the result as JSON, applied false, with
	// the password (it printed the table's comment lines).
	rp, u = gapAuthNames(t)
	r = e.runCtx(withInterceptor(refuse), "auth", "apply", "--role-prefix", rp, "--operator", u("alice"), "--passwords", "-o", "json")
	var res struct {
		Applied   bool              `json:"applied"`
		Passwords map[string]string `json:"passwords"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); r.code != ExitRefused || err != nil || res.Applied || res.Passwords[u("alice")] == "" {
		t.Fatalf("auth apply -o json failing after adding a user with a password: %s (%v); want exit 1 and JSON with its password, applied false", r, err)
	}
}

// TestGapAuthApplyNamesStepsMadeMeanwhile: a role another run made between
// this run's read and its change is named, in the table ("# of which 1
// were made meanwhile by another run") and in -o json (made_meanwhile),
// and the changes are counted whole ("# applied N"). Guards the
// made_meanwhile bookkeeping (mutants: not collected, the line printed
// only for more than one, the count net of them) and dry_run false for a
// run that applied (mutant: true).
func TestGapAuthApplyNamesStepsMadeMeanwhile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, output := range []string{"table", "json"} {
		rp, u := gapAuthNames(t)
		var raced atomic.Bool
		// The first RoleAdd is sent twice: the first send stands for
		// another run's, so this run's finds the role made.
		race := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == "/etcdserverpb.Auth/RoleAdd" && raced.CompareAndSwap(false, true) {
				if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
					return err
				}
			}
			return invoke(ctx, method, req, reply, cc, opts...)
		}
		args := []string{"auth", "apply", "--role-prefix", rp, "--operator", u("alice"), "-o", output}
		var dry authResult
		mustJSON(t, e.must(ExitOK, append(args[:len(args)-2:len(args)-2], "--dry-run", "-o", "json")...).stdout, &dry)
		first := "etcdctl role add " + dry.Steps[0].Role
		r := e.runCtx(withInterceptor(race), args...)
		if r.code != ExitOK || !raced.Load() {
			t.Fatalf("auth apply -o %s with a role made meanwhile: %s", output, r)
		}
		if output == "json" {
			var res authResult
			mustJSON(t, r.stdout, &res)
			if !slices.Equal(res.Meanwhile, []string{first}) || !res.Applied || res.DryRun || len(res.Steps) != len(dry.Steps) {
				t.Errorf("auth apply -o json: made_meanwhile %q, applied %v, dry_run %v, %d steps; want [%q], true, false, %d",
					res.Meanwhile, res.Applied, res.DryRun, len(res.Steps), first, len(dry.Steps))
			}
			continue
		}
		want := fmt.Sprintf("# applied %d change(s)\n# of which 1 were made meanwhile by another run, not this one (a password it generated was shown there): %s\n", len(dry.Steps), first)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("auth apply: want %q:\n%s", want, r.stdout)
		}
	}
}

// TestGapHeartbeatTTLBounds: heartbeat without --instance or without
// --addr is a usage error naming both; its --ttl is 10s by default; below
// 1s is a usage error (exit 2); 60s is taken without a warning and 24h,
// the cap, with one (docs/regionctl.md: above 60 s warned, above 24 h a
// usage error). Guards the flags' check (mutant: only both missing
// refused) and the TTL's default and bounds (mutants: another default, the 1s floor dropped or made exit 1, >= for > at 60s and 24h).
func TestGapHeartbeatTTLBounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "eu-central", "--health-check", "--force") // no health_check warning
	for args, want := range map[string]string{"--instance fra-1": "heartbeat needs --addr too", "--addr 10.0.0.1:443": "heartbeat needs --instance too", "": "heartbeat needs --instance and --addr"} {
		if r := e.run(append([]string{"heartbeat", "eu-central"}, strings.Fields(args)...)...); r.code != ExitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("heartbeat %v: %s; want exit 2 with %q", args, r, want)
		}
	}
	if r := e.run("heartbeat", "eu-central", "--instance", "sub", "--addr", "10.0.0.1:443", "--ttl", "999ms"); r.code != ExitUsage ||
		!strings.Contains(r.stderr, "--ttl 999ms: want at least 1s") {
		t.Errorf("heartbeat --ttl 999ms: %s; want exit 2, at least 1s", r)
	}
	def := e.startHeartbeatIn(t, "eu-central", "def", "10.0.0.1:443")
	minute := e.startHeartbeatIn(t, "eu-central", "minute", "10.0.0.1:443", "--ttl", "60s")
	day := e.startHeartbeatIn(t, "eu-central", "day", "10.0.0.1:443", "--ttl", "24h")
	for _, c := range []struct {
		h       *bgHeartbeat
		ttl     string
		warning bool
	}{{def, "10s", false}, {minute, "1m0s", false}, {day, "24h0m0s", true}} {
		lease := c.h.waitUp(t)
		if !strings.Contains(c.h.out.String(), fmt.Sprintf("alive under lease %x (ttl %s)\n", lease, c.ttl)) {
			t.Errorf("want a lease of ttl %s, as asked:\n%s", c.ttl, c.h)
		}
		if warned := strings.Contains(c.h.errOut.String(), "warning: --ttl"); warned != c.warning {
			t.Errorf("--ttl %s: warned %v, want %v:\n%s", c.ttl, warned, c.warning, c.h)
		}
		if code := c.h.stop(); code != ExitOK {
			t.Errorf("stop: exit %d\n%s", code, c.h)
		}
	}
}

// TestGapHeartbeatRetriesSoon: a heartbeat that cannot reach etcd at its
// start retries within 1 s (jittered by half: at most 1.5 s), as
// docs/regionctl.md says (1 s doubling to 30 s), not after the cap; a
// stop meanwhile exits 0, also one during a dial etcd does not answer.
// Guards the backoff's first wait (mutant: 30 s from the start, which
// TestHeartbeatWaitsForEtcd's minute-long wait lets through) and the stop
// during the dial (mutant: the check of the context after the dial
// dropped, so the interrupt exits 1).
func TestGapHeartbeatRetriesSoon(t *testing.T) {
	t.Parallel()
	port, err := freeport.Get() // reserved, never listened on
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut logbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--endpoints", fmt.Sprintf("127.0.0.1:%d", port), "--dial-timeout", "200ms",
			"heartbeat", "eu-central", "--instance", "early", "--addr", "10.0.0.1:443"}, &out, &errOut, func(string) string { return "" })
	}()
	re := regexp.MustCompile(`heartbeat: etcd unreachable; retrying.* retry_in=(\S+)`)
	var m []string
	deadline := time.Now().Add(10 * time.Second)
	for m == nil && time.Now().Before(deadline) {
		m = re.FindStringSubmatch(errOut.String())
		time.Sleep(20 * time.Millisecond)
	}
	if m == nil {
		t.Fatalf("no retry logged:\n%s%s", out.String(), errOut.String())
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d <= 0 || d > 1500*time.Millisecond {
		t.Errorf("first retry in %s (%v), want 1s ±50%%:\n%s", m[1], err, errOut.String())
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Errorf("stopped while waiting for etcd: exit %d, want 0:\n%s", code, errOut.String())
	}

	// Stopped during a dial that etcd does not answer (a member that
	// takes the connection and says nothing): exit 0 too, not the
	// interrupt's exit 1 of the other verbs.
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		ln.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	var errDial logbuf.Buffer
	go func() {
		done <- run(ctx, []string{"--endpoints", fmt.Sprintf("127.0.0.1:%d", port), "--dial-timeout", "20s",
			"heartbeat", "eu-central", "--instance", "early", "--addr", "10.0.0.1:443"}, &out, &errDial, func(string) string { return "" })
	}()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case code := <-done:
		if code != ExitOK || errDial.String() != "" {
			t.Errorf("stopped during a dial etcd does not answer: exit %d, stderr %q; want 0 and nothing", code, errDial.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("heartbeat did not stop during its dial")
	}
}

// TestGapAgentRmSaysWhatItForgot: agent rm prints what each record said
// (revision, epoch and version, in that order; "-" for a version it does
// not name) or that it did not decode,
// and an error of etcd (a permission denied) exits 1 naming it, forgets
// nothing and prints no "forgot". Guards the record's fields (mutants:
// revision and epoch swapped, a record that does not decode shown as
// revision 0, an empty version printed as nothing) and the error path (mutant: the error swallowed, exit 0).
func TestGapAgentRmSaysWhatItForgot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	ctx := context.Background()
	for node, value := range map[string]string{
		"good":   `{"node":"good","revision":7,"epoch":3,"version":"v1.2.3"}`,
		"broken": `not json`,
		"kept":   `{"node":"kept","revision":9,"epoch":4,"version":"v1"}`,
		"old":    `{"node":"old","revision":5,"epoch":2}`,
	} {
		if _, err := testClient.Put(ctx, e.ks.Node(node), value); err != nil {
			t.Fatal(err)
		}
	}
	r := e.must(ExitOK, "agent", "rm", "good", "broken", "old")
	if !strings.Contains(r.stdout, "forgot node good (its record said revision 7, epoch 3, version v1.2.3)\n") ||
		!strings.Contains(r.stdout, "forgot node old (its record said revision 5, epoch 2, version -)\n") ||
		!strings.Contains(r.stdout, "forgot node broken (its record did not decode: ") {
		t.Errorf("agent rm good broken: %s; want each record's revision, epoch and version, or that it did not decode", r)
	}
	denied := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.KV/Txn" {
			return rpctypes.ErrGRPCPermissionDenied
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	r = e.runCtx(withInterceptor(denied), "agent", "rm", "kept")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "permission denied") || strings.Contains(r.stdout, "forgot") || e.get(e.ks.Node("kept")) == "" {
		t.Errorf("agent rm refused by etcd: %s; want exit 1 naming the permission, nothing forgotten", r)
	}
}

// gapHealthValue is a health key's value.
const gapHealthValue = `{"addr":"10.0.0.1:443","since":"2026-01-01T00:00:00Z"}`

// TestGapGetHealthTable: get health lists its keys sorted, "-" for a
// value without since, each key's lease's remaining life as etcd gives it
// (table and -o json alike), "ended" for a lease etcd says is over, and
// names no pool without health_check as having 0 live instances. Guards
// the order, the since placeholder, the TTL's seconds and the "ended"
// case, and the pool line's health_check condition.
func TestGapGetHealthTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "eu-central", "--health-check", "--force")
	lease := grantLease(t)
	ctx := context.Background()
	var keys []string
	for _, i := range []string{"k", "c", "j", "a", "f", "h", "b", "e", "i", "d", "g"} {
		rel := routing.HealthKey("eu-central", "fra-"+i)
		keys = append(keys, rel)
		if _, err := testClient.Put(ctx, e.ks.RoutingKey(rel), gapHealthValue, clientv3.WithLease(lease)); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(keys)
	nosince := routing.HealthKey("eu-central", "nosince")
	if _, err := testClient.Put(ctx, e.ks.RoutingKey(nosince), `{"addr":"10.0.0.2:443"}`, clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	// etcd's answer for the lease: 42 s left, then ended (-1).
	var ttl atomic.Int64
	ttl.Store(42)
	fix := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoke(ctx, method, req, reply, cc, opts...)
		if resp, ok := reply.(*pb.LeaseTimeToLiveResponse); ok && err == nil {
			resp.TTL = ttl.Load()
		}
		return err
	}
	r := e.runCtx(withInterceptor(fix), "get", "health")
	if r.code != ExitOK {
		t.Fatalf("get health: %s", r)
	}
	var rows []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "health/eu-central/fra-") {
			rows = append(rows, f[0])
			if !regexp.MustCompile(`^\S+ +10\.0\.0\.1:443 +2026-01-01T00:00:00Z +42s +- *$`).MatchString(l) {
				t.Errorf("get health row %q: want its addr, since, TTL 42s (etcd's) and no note", l)
			}
		}
	}
	if !slices.Equal(rows, keys) {
		t.Errorf("get health rows %v, want them sorted: %v", rows, keys)
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(nosince) + ` +10\.0\.0\.2:443 +- +42s +- *$`).MatchString(r.stdout) {
		t.Errorf("get health: %s; want %s with since \"-\"", r, nosince)
	}
	// Of the pools (examples/routing.yaml), none but eu-central has
	// health_check: none is named as having no live instance.
	if strings.Contains(r.stdout, "0 live instances") {
		t.Errorf("get health: %s; want no pool named with 0 live instances (only eu-central has health_check, and it has keys)", r)
	}
	var js struct {
		TTLs map[string]*int64 `json:"health_ttl_seconds"`
	}
	mustJSON(t, e.runCtx(withInterceptor(fix), "get", "health", "-o", "json").stdout, &js)
	if s := js.TTLs[keys[0]]; s == nil || *s != 42 {
		t.Errorf("get health -o json: health_ttl_seconds[%s] = %v, want 42 (etcd's)", keys[0], s)
	}
	ttl.Store(-1)
	if r := e.runCtx(withInterceptor(fix), "get", "health"); !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(keys[0]) + ` +10\.0\.0\.1:443 +\S+ +ended +- *$`).MatchString(r.stdout) {
		t.Errorf("get health with the lease over: %s; want TTL ended", r)
	}
}

// seedLeasedHealthKey seeds e with eu-central health-checked and puts
// its health key of instance fra-1 under a new lease; it returns the
// key's relative name.
func (e *tenv) seedLeasedHealthKey(t *testing.T) string {
	t.Helper()
	e.seed()
	e.must(ExitOK, "pool", "set", "eu-central", "--health-check", "--force")
	rel := routing.HealthKey("eu-central", "fra-1")
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey(rel), gapHealthValue, clientv3.WithLease(grantLease(t))); err != nil {
		t.Fatal(err)
	}
	return rel
}

// TestGapGetHealthLeasesUnread: when the health keys' leases cannot be
// read, get health still shows the keys and exits 0, with a warning; the
// TTL is "-" (not known), never "no lease", and no key is noted as
// leaseless. Guards the warning path (mutants: the error returned, exit
// 1; "no lease" shown for every key when the TTLs were not read).
func TestGapGetHealthLeasesUnread(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rel := e.seedLeasedHealthKey(t)
	fail := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.Lease/LeaseTimeToLive" {
			return rpctypes.ErrGRPCPermissionDenied
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	r := e.runCtx(withInterceptor(fail), "get", "health")
	if r.code != ExitOK || !strings.Contains(r.stderr, "regionctl: warning: the health keys' remaining lives are not shown: ") ||
		!regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(rel)+` +10\.0\.0\.1:443 +2026-01-01T00:00:00Z +- +- *$`).MatchString(r.stdout) {
		t.Fatalf("get health with the leases unread: %s; want exit 0, a warning, the key with TTL \"-\"", r)
	}
}

// TestGapGetHealthReadsLeasesAtItsRevision: the leases shown are those of
// the keys get read, at its revision: a key deleted between the read of
// the state and the read of its lease is shown with its lease's TTL, not
// as "no lease" ("live until deleted", which it is not). Guards
// WithRev(cur.Revision) on the leases' read (mutant: dropped).
func TestGapGetHealthReadsLeasesAtItsRevision(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rel := e.seedLeasedHealthKey(t)
	key := e.ks.RoutingKey(rel)
	healthPrefix := e.ks.RoutingKey("health/")
	var deleted atomic.Bool
	del := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if rr, ok := req.(*pb.RangeRequest); ok && string(rr.Key) == healthPrefix && deleted.CompareAndSwap(false, true) {
			if _, err := testClient.Delete(ctx, key); err != nil {
				return err
			}
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	r := e.runCtx(withInterceptor(del), "get", "health")
	if r.code != ExitOK || !deleted.Load() ||
		!regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(rel)+` +10\.0\.0\.1:443 +2026-01-01T00:00:00Z +[0-9]+s +- *$`).MatchString(r.stdout) {
		t.Fatalf("get health, the key deleted before its lease was read: %s; want it with its lease's TTL", r)
	}
}

// TestGapGetJSONSections: get -o json has health_ttl_seconds beside
// health whenever the leases were read, null for a key without a lease,
// also when no key has one; and get pools -o json has no health section
// (docs/regionctl.md: the sections asked for, the others absent). Guards
// the TTL map's condition (mutant: present only when a lease was found)
// and the health section's (mutant: shown with the pools too).
func TestGapGetJSONSections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	rel := routing.HealthKey("eu-central", "hand")
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey(rel), gapHealthValue); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "get", "health", "-o", "json")
	var all map[string]json.RawMessage
	mustJSON(t, r.stdout, &all)
	var ttls bytes.Buffer
	if err := json.Compact(&ttls, all["health_ttl_seconds"]); err != nil || ttls.String() != `{"`+rel+`":null}` {
		t.Errorf("get health -o json, one key, without a lease: health_ttl_seconds %s, want {%q: null}", all["health_ttl_seconds"], rel)
	}
	all = nil
	mustJSON(t, e.must(ExitOK, "get", "pools", "-o", "json").stdout, &all)
	for _, k := range []string{"health", "health_ttl_seconds", "routes", "boosts"} {
		if _, ok := all[k]; ok {
			t.Errorf("get pools -o json has %s, want the pools alone", k)
		}
	}
}

// TestGapGetSectionsAlone: a prefix holding only health keys (heartbeats
// started before any config was applied) is not called empty; get health
// names its one invalid health key on stderr (it has no SKIPPED part, and
// the key must not read as absent); get boosts shows each boost's lease's
// remaining life. Guards the empty-prefix test's health count, the
// warning of one hidden invalid value (mutants: health keys not counted,
// health missing from the sections the warning covers, the warning only
// for two or more) and the boosts' TTLs in get's table (mutant: read for
// -o json only).
func TestGapGetSectionsAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := testClient.Put(ctx, e.ks.RoutingKey(routing.HealthKey("eu-central", "early")), gapHealthValue); err != nil {
		t.Fatal(err)
	}
	if r := e.must(ExitOK, "get", "health"); strings.Contains(r.stderr, "nothing is stored") {
		t.Errorf("get health with a health key stored: %s; want no \"nothing is stored\" warning", r)
	}
	e.seed()
	bad := routing.HealthKey("eu-central", "bad")
	if _, err := testClient.Put(ctx, e.ks.RoutingKey(bad), `"up"`); err != nil {
		t.Fatal(err)
	}
	if r := e.must(ExitOK, "get", "health"); !strings.Contains(r.stderr, "regionctl: warning: 1 stored value(s) of health are invalid, so not shown") ||
		!strings.Contains(r.stderr, bad+" (") {
		t.Errorf("get health with an invalid health key: %s; want it named on stderr", r)
	}
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--id", "gap-kr", "--reason", "gap")
	if r := e.must(ExitOK, "get", "boosts"); !regexp.MustCompile(`(?m)^gap-kr +KR +kr-music 100 +- +(59m[0-9]+s|1h0m0s) `).MatchString(r.stdout) {
		t.Errorf("get boosts: %s; want the boost with its lease's remaining life", r)
	}
}

// TestGapHeartbeatRefusalNamesTheRoleOfItsPrefix: a heartbeat refused by
// etcd names the origin role of --role-prefix in its hint, both when it
// cannot tell whether the pool id is right (its first read refused) and
// when it read the pool and its put was refused (the user lacks the
// role). Guards the role name in heartbeatPermHint (mutant: the default
// prefix's). The refusals are injected: with authentication off, etcd
// refuses nothing.
func TestGapHeartbeatRefusalNamesTheRoleOfItsPrefix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	healthKey := e.ks.RoutingKey(routing.HealthKey("eu-central", "fra-1"))
	for _, c := range []struct {
		deny func(method string, req any) bool
		want string
	}{
		{func(_ string, req any) bool {
			rr, ok := req.(*pb.RangeRequest)
			return ok && string(rr.Key) == healthKey
		}, "; is eu-central the pool's id? the role rd-origin-eu-central covers only its own pool's health keys"},
		{func(method string, _ any) bool { return method == "/etcdserverpb.KV/Txn" },
			" lacks the role rd-origin-eu-central, which alone writes its health keys: run the heartbeat as the pool's origin user (regionctl --prefix "},
		// The way out names --role-prefix too (the second read's C5).
		{func(method string, _ any) bool { return method == "/etcdserverpb.KV/Txn" },
			" auth apply --role-prefix rd- --origin eu-central makes user rd-origin-eu-central with that role alone"},
	} {
		deny := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if c.deny(method, req) {
				return rpctypes.ErrGRPCPermissionDenied
			}
			return invoke(ctx, method, req, reply, cc, opts...)
		}
		r := e.runCtx(withInterceptor(deny), "--role-prefix", "rd-", "heartbeat", "eu-central", "--instance", "fra-1", "--addr", "10.0.0.1:443")
		if r.code != ExitRefused || !strings.Contains(r.stderr, c.want) {
			t.Errorf("heartbeat refused: %s; want exit 1 with %q", r, c.want)
		}
	}
	if lease, _ := keyOf(t, healthKey); lease != -1 {
		t.Errorf("a refused heartbeat left its key (lease %x)", lease)
	}
}
