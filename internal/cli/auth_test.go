package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// rbacPrefix is the --prefix of the role tests.
const rbacPrefix = "/rbac/v1"

// rbacEnv is an etcd with TLS (client certificates required) and
// authentication on, whose roles and users were made by regionctl auth
// apply, and a way to act as each user: with a password, or with a
// client certificate whose CN is the user.
type rbacEnv struct {
	t         *testing.T
	srv       *devetcd.Server
	certs     *devetcd.TestCerts
	root      *clientv3.Client
	ks        keyspace.Space
	passwords map[string]string // nil: users authenticate with certificates
	certsOf   map[string]devetcd.ClientCert
}

// rbacUsers are the users of the role tests, one per job.
var rbacUsers = []string{"--operator", "op", "--viewer", "view", "--agent", "n1", "--origin", "eu-central"}

// Users the role tests act as.
const (
	rbacOperator = "op"
	rbacViewer   = "view"
	rbacAgent    = "regiond-agent-n1"
	rbacOrigin   = "regiond-origin-eu-central"
)

// newRBACEnv starts the etcd, turns authentication on (root alone) and
// runs regionctl auth apply as root; with passwords the users get
// generated passwords, else none (certificates).
func newRBACEnv(t *testing.T, passwords bool) *rbacEnv {
	t.Helper()
	certs := devetcd.NewTestCerts(t)
	srv := devetcd.NewTestTLS(t, certs)
	e := &rbacEnv{t: t, srv: srv, certs: certs, root: devetcd.EnableTestRootAuth(t, srv), certsOf: map[string]devetcd.ClientCert{}}
	e.ks, _ = keyspace.New(rbacPrefix)
	args := append(e.rootFlags(), append([]string{"auth", "apply", "-o", "json"}, rbacUsers...)...)
	if passwords {
		args = append(args, "--passwords")
	}
	r, _ := runEnv(nil, args...)
	var res authResult
	if r.code != ExitOK || json.Unmarshal([]byte(r.stdout), &res) != nil || !res.Applied || len(res.Steps) != 29 { // 24 before node records, 26 before the viewer had four grants
		t.Fatalf("auth apply: %s", r)
	}
	if passwords {
		e.passwords = res.Passwords
		if len(e.passwords) != 4 {
			t.Fatalf("generated passwords: %v", e.passwords)
		}
	}
	return e
}

func (e *rbacEnv) rootFlags() []string {
	return append(tlsFlags(e.srv, e.certs, rbacPrefix), "--user", "root:"+devetcd.TestRootPassword)
}

// cert returns the client certificate whose CN is user (issued once).
func (e *rbacEnv) cert(user string) devetcd.ClientCert {
	e.t.Helper()
	if cc, ok := e.certsOf[user]; ok {
		return cc
	}
	cc, err := e.certs.IssueClient(user)
	if err != nil {
		e.t.Fatal(err)
	}
	e.certsOf[user] = cc
	return cc
}

// flags are regionctl's connection flags acting as user.
func (e *rbacEnv) flags(user string) []string {
	if e.passwords != nil {
		return append(tlsFlags(e.srv, e.certs, rbacPrefix), "--user", user+":"+e.passwords[user])
	}
	cc := e.cert(user)
	return []string{"--endpoints", e.srv.Endpoints[0], "--cacert", e.certs.CAFile, "--cert", cc.CertFile, "--key", cc.KeyFile,
		"--prefix", rbacPrefix}
}

// as runs regionctl as user.
func (e *rbacEnv) as(user string, args ...string) result {
	r, _ := runEnv(nil, append(e.flags(user), args...)...)
	return r
}

// asResolve runs regionctl resolve as user: its own --key (the sticky
// key) shadows the TLS --key, which goes in REGIONCTL_KEY instead.
func (e *rbacEnv) asResolve(user string, args ...string) result {
	flags := e.flags(user)
	env := map[string]string{}
	for i := 0; i < len(flags); i++ {
		if flags[i] == "--key" {
			env["REGIONCTL_KEY"] = flags[i+1]
			flags = append(flags[:i:i], flags[i+2:]...)
			break
		}
	}
	r, _ := runEnv(env, append(flags, append([]string{"resolve"}, args...)...)...)
	return r
}

// client returns an etcd client acting as user, closed when the test ends.
func (e *rbacEnv) client(user string) *clientv3.Client {
	e.t.Helper()
	var cli *clientv3.Client
	var err error
	if e.passwords != nil {
		cli, err = e.srv.ClientAs(user, e.passwords[user])
	} else {
		tc, terr := e.cert(user).TLSConfig(e.certs.CAFile)
		if terr != nil {
			e.t.Fatal(terr)
		}
		cli, err = e.srv.ClientTLS(tc)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cli.Close() })
	return cli
}

// kvState is every key under the prefix with its value and mod revision,
// and the store's revision: what a refused request must leave unchanged.
type kvState struct {
	Revision int64
	KVs      map[string]string
}

func (e *rbacEnv) state() kvState {
	e.t.Helper()
	resp, err := e.root.Get(context.Background(), rbacPrefix+"/", clientv3.WithPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	st := kvState{Revision: resp.Header.Revision, KVs: map[string]string{}}
	for _, kv := range resp.Kvs {
		st.KVs[string(kv.Key)] = fmt.Sprintf("%s@%d", kv.Value, kv.ModRevision)
	}
	return st
}

// TestRolesWithPasswords and TestRolesWithClientCerts: on an etcd with
// TLS and authentication on, the roles and users that regionctl auth
// apply made let each job do its work (a real agent included) and nothing
// more, and a refused request changes nothing.
func TestRolesWithPasswords(t *testing.T) {
	t.Parallel()
	testRoles(t, newRBACEnv(t, true))
}

func TestRolesWithClientCerts(t *testing.T) {
	t.Parallel()
	testRoles(t, newRBACEnv(t, false))
}

// TestNoPasswordCheckIsBounded: auth apply --passwords checks at most
// maxPasswordChecks users that exist (each check a login etcd refuses, at
// bcrypt's cost for a user with a password), and says how many it did
// not check.
func TestNoPasswordCheckIsBounded(t *testing.T) {
	t.Parallel()
	e := newRBACEnv(t, false)
	var agents []string
	for i := range maxPasswordChecks + 1 {
		agents = append(agents, "--agent", fmt.Sprintf("b%02d", i))
	}
	if r, _ := runEnv(nil, append(e.rootFlags(), append([]string{"auth", "apply"}, agents...)...)...); r.code != ExitOK {
		t.Fatalf("auth apply of %d agents: %s", maxPasswordChecks+1, r)
	}
	r, _ := runEnv(nil, append(e.rootFlags(), append([]string{"auth", "apply", "--passwords"}, agents...)...)...)
	if r.code != ExitOK || !strings.Contains(r.stderr, fmt.Sprintf("regionctl: note: --passwords: 1 of the %d users that exist were not checked", maxPasswordChecks+1)) ||
		!strings.Contains(r.stderr, "regiond-agent-b00,") || strings.Contains(r.stderr, fmt.Sprintf("regiond-agent-b%02d", maxPasswordChecks)) {
		t.Fatalf("auth apply --passwords of %d users without one: %s; want the first %d named, and a note for the rest", maxPasswordChecks+1, r, maxPasswordChecks)
	}
}

func testRoles(t *testing.T, e *rbacEnv) {
	// A re-run of auth apply changes nothing: etcd's auth revision stays.
	before, err := e.root.AuthStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := runEnv(nil, append(e.rootFlags(), append([]string{"auth", "apply"}, rbacUsers...)...)...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "nothing to change") {
		t.Fatalf("auth apply re-run: %s", r)
	}
	if after, err := e.root.AuthStatus(context.Background()); err != nil || after.AuthRevision != before.AuthRevision {
		t.Fatalf("auth apply re-run moved the auth revision %d → %v (%v)", before.AuthRevision, after, err)
	}
	// A re-run with --passwords: users with a password pass its check;
	// users made without one (for certificates) get none, which a warning
	// says, naming them (the auth review: it said "nothing to change").
	r, _ = runEnv(nil, append(e.rootFlags(), append([]string{"auth", "apply", "--passwords"}, rbacUsers...)...)...)
	switch {
	case e.passwords != nil && (r.code != ExitOK || !strings.Contains(r.stdout, "nothing to change")):
		t.Fatalf("auth apply --passwords re-run, users with passwords: %s", r)
	case e.passwords == nil && (r.code != ExitOK || !strings.Contains(r.stdout, "nothing to change") ||
		!strings.Contains(r.stderr, "regionctl: warning: --passwords: user(s) op, regiond-agent-n1, regiond-origin-eu-central, view exist without a password")):
		t.Fatalf("auth apply --passwords re-run, users made for certificates: %s", r)
	}
	operatorJobs(t, e)
	viewerJobs(t, e)
	originJobs(t, e)
	agentJobs(t, e)
	refusals(t, e)
	agentRuns(t, e)
	extras(t, e)
}

// extras: a role granted by hand beyond a user's job is refused by auth
// apply (nothing changed), shown by --dry-run --revoke-extra and revoked
// by --revoke-extra.
func extras(t *testing.T, e *rbacEnv) {
	t.Helper()
	if _, err := e.root.UserGrantRole(context.Background(), rbacViewer, "regiond-operator"); err != nil {
		t.Fatal(err)
	}
	apply := func(extra ...string) result {
		r, _ := runEnv(nil, append(e.rootFlags(), append(append([]string{"auth", "apply"}, rbacUsers...), extra...)...)...)
		return r
	}
	before, _ := e.root.AuthStatus(context.Background())
	if r := apply(); r.code != ExitRefused || !strings.Contains(r.stderr, "user view also holds role regiond-operator") ||
		!strings.Contains(r.stderr, "--revoke-extra") {
		t.Fatalf("auth apply with an extra role: %s", r)
	}
	revoke := "etcdctl user revoke-role view regiond-operator"
	if r := apply("--revoke-extra", "--dry-run"); r.code != ExitOK || !strings.Contains(r.stdout, revoke) || !strings.Contains(r.stdout, "nothing changed") {
		t.Fatalf("auth apply --revoke-extra --dry-run: %s", r)
	}
	if after, _ := e.root.AuthStatus(context.Background()); after.AuthRevision != before.AuthRevision {
		t.Fatal("a refused or dry-run auth apply changed etcd's auth")
	}
	if r := apply("--revoke-extra"); r.code != ExitOK || !strings.Contains(r.stdout, revoke) {
		t.Fatalf("auth apply --revoke-extra: %s", r)
	}
	if r := e.as(rbacViewer, "pool", "drain", "eu-central", "--reason", "v"); r.code != ExitRefused {
		t.Fatalf("viewer write after the extra role was revoked: %s", r)
	}

	// A grant of the job's range with more access than the job needs is
	// an extra too (the plan's grant narrows it under --revoke-extra).
	ctx := context.Background()
	routingPrefix := rbacPrefix + "/routing/"
	if _, err := e.root.RoleGrantPermission(ctx, "regiond-viewer", routingPrefix, clientv3.GetPrefixRangeEnd(routingPrefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if r := apply(); r.code != ExitRefused || !strings.Contains(r.stderr, "role regiond-viewer holds readwrite on "+routingPrefix) ||
		!strings.Contains(r.stderr, "where its job needs read") {
		t.Fatalf("auth apply with the viewer's range granted readwrite: %s", r)
	}
	if r := apply("--revoke-extra"); r.code != ExitOK {
		t.Fatalf("auth apply --revoke-extra (narrowing the viewer): %s", r)
	}
	if r := e.as(rbacViewer, "pool", "drain", "eu-central", "--reason", "v"); r.code != ExitRefused {
		t.Fatalf("viewer write after its grant was narrowed: %s", r)
	}

	// The same role names for another prefix (a second deployment on this
	// etcd, no --role-prefix): refused even with --revoke-extra, which
	// would re-point this deployment's operators and viewers there.
	before, _ = e.root.AuthStatus(ctx)
	other := append(tlsFlags(e.srv, e.certs, "/staging/v1"), "--user", "root:"+devetcd.TestRootPassword)
	for _, extra := range [][]string{nil, {"--revoke-extra"}} {
		r, _ := runEnv(nil, append(other, append([]string{"auth", "apply", "--agent", "n9"}, extra...)...)...)
		if r.code != ExitRefused || !strings.Contains(r.stderr, "role regiond-operator holds") ||
			!strings.Contains(r.stderr, "outside /staging/v1's routing/, audit/, agents/, nodes/: these roles serve another prefix") || !strings.Contains(r.stderr, "--role-prefix") {
			t.Fatalf("auth apply for another prefix %v: %s", extra, r)
		}
	}
	if after, _ := e.root.AuthStatus(ctx); after.AuthRevision != before.AuthRevision {
		t.Fatal("auth apply for another prefix changed etcd's auth")
	}
	nested(t, e)
}

// nested: a deployment whose root lies under this one's (/rbac/v1/inner
// in /rbac/v1), with its own role prefix and this one's operator user (the
// RBAC review: the viewer's grant of all of <root>/ read the inner one's
// keys; the user's role here was an extra that --revoke-extra stripped;
// and an apply of the outer root with the inner's role prefix planned,
// under --revoke-extra, to re-point the inner's roles at the outer).
func nested(t *testing.T, e *rbacEnv) {
	t.Helper()
	ctx := context.Background()
	inner := rbacPrefix + "/inner"
	flags := func(prefix string) []string {
		return append(tlsFlags(e.srv, e.certs, prefix), "--user", "root:"+devetcd.TestRootPassword)
	}
	for _, extra := range [][]string{nil, {"--revoke-extra"}} {
		r, _ := runEnv(nil, append(flags(inner), append([]string{"auth", "apply", "--role-prefix", "in-", "--operator", rbacOperator, "--agent", "n9"}, extra...)...)...)
		if r.code != ExitOK || !strings.Contains(r.stderr, "regionctl: note: user op also holds role regiond-operator, of another deployment") ||
			strings.Contains(r.stdout, "revoke-role") {
			t.Fatalf("auth apply of a nested deployment with the outer's operator %v: %s", extra, r)
		}
	}
	roles, err := e.root.UserGet(ctx, rbacOperator)
	if err != nil || !slices.Contains(roles.Roles, "regiond-operator") || !slices.Contains(roles.Roles, "in-operator") {
		t.Fatalf("user op holds %v (%v), want both deployments' operator roles", roles, err)
	}
	// The outer viewer reads its own sections, not the inner's keys.
	view := e.client(rbacViewer)
	if _, err := view.Get(ctx, e.ks.Epoch()); err != nil {
		t.Fatalf("viewer read of its epoch: %v", err)
	}
	if _, err := view.Get(ctx, inner+"/routing/epoch"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("viewer of %s read the nested deployment's epoch: %v, want permission denied", rbacPrefix, err)
	}
	// The outer root with the inner's role prefix: refused, even with
	// --revoke-extra.
	before, _ := e.root.AuthStatus(ctx)
	for _, extra := range [][]string{nil, {"--revoke-extra"}} {
		r, _ := runEnv(nil, append(flags(rbacPrefix), append([]string{"auth", "apply", "--role-prefix", "in-", "--agent", "n9"}, extra...)...)...)
		if r.code != ExitRefused || !strings.Contains(r.stderr, "role in-operator holds") || !strings.Contains(r.stderr, "serve another prefix") {
			t.Fatalf("auth apply of the outer root with the nested deployment's role prefix %v: %s", extra, r)
		}
	}
	if after, _ := e.root.AuthStatus(ctx); after.AuthRevision != before.AuthRevision {
		t.Fatal("a refused auth apply changed etcd's auth")
	}
}

// TestAuthApplyMigratesTheOldLayout: on an etcd whose roles an earlier
// auth apply made (the operator with readwrite on all of routing/ and on
// locks/, the viewer with read on all of the root), auth apply refuses the
// extras and names --revoke-extra, not another prefix; --revoke-extra
// --dry-run changes nothing; --revoke-extra leaves each role exactly the
// current layout's grants (docs/regionctl.md §Roles; the auth review: the
// locks/ grant was called another deployment's, even with --revoke-extra).
func TestAuthApplyMigratesTheOldLayout(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	root := devetcd.EnableTestRootAuth(t, srv)
	ctx := context.Background()
	ks := keyspace.Default()
	grant := func(role string, perm clientv3.PermissionType, prefix string) {
		t.Helper()
		if _, err := root.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), perm); err != nil {
			t.Fatal(err)
		}
	}
	rw, read := clientv3.PermissionType(clientv3.PermReadWrite), clientv3.PermissionType(clientv3.PermRead)
	for _, role := range []string{"regiond-operator", "regiond-viewer"} {
		if _, err := root.RoleAdd(ctx, role); err != nil {
			t.Fatal(err)
		}
	}
	grant("regiond-operator", rw, ks.Routing())
	grant("regiond-operator", rw, ks.AuditPrefix())
	grant("regiond-operator", rw, ks.Root()+"/locks/")
	grant("regiond-operator", read, ks.AgentsPrefix())
	grant("regiond-viewer", read, ks.Root()+"/")
	if _, err := root.UserAdd(ctx, "alice", "alice-secret"); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctx, "alice", "regiond-operator"); err != nil {
		t.Fatal(err)
	}

	apply := func(extra ...string) result {
		args := []string{"--endpoints", srv.Endpoints[0], "--user", "root:" + devetcd.TestRootPassword, "auth", "apply", "--operator", "alice"}
		r, _ := runEnv(nil, append(args, extra...)...)
		return r
	}
	before, err := root.AuthStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := apply()
	if r.code != ExitRefused || !strings.Contains(r.stderr, "role regiond-operator also holds readwrite on /regiond/v1/locks/") ||
		!strings.Contains(r.stderr, "role regiond-operator holds readwrite on /regiond/v1/routing/ where its job needs read") ||
		!strings.Contains(r.stderr, "role regiond-viewer also holds read on /regiond/v1/") ||
		!strings.Contains(r.stderr, "--revoke-extra") || strings.Contains(r.stderr, "another prefix") {
		t.Fatalf("auth apply on the old layout: %s; want its extras refused, naming --revoke-extra", r)
	}
	revokeLocks := "etcdctl role revoke-permission regiond-operator --prefix=true /regiond/v1/locks/"
	readRouting := "etcdctl role grant-permission regiond-operator --prefix=true read /regiond/v1/routing/"
	if r := apply("--revoke-extra", "--dry-run"); r.code != ExitOK || !strings.Contains(r.stdout, revokeLocks) ||
		!strings.Contains(r.stdout, readRouting) || !strings.Contains(r.stdout, "nothing changed") {
		t.Fatalf("auth apply --revoke-extra --dry-run on the old layout: %s", r)
	}
	if after, err := root.AuthStatus(ctx); err != nil || after.AuthRevision != before.AuthRevision {
		t.Fatalf("a refused or dry-run auth apply changed etcd's auth: revision %d → %v (%v)", before.AuthRevision, after, err)
	}
	if r := apply("--revoke-extra"); r.code != ExitOK || !strings.Contains(r.stdout, revokeLocks) {
		t.Fatalf("auth apply --revoke-extra on the old layout: %s", r)
	}
	roles := store.NewRoles(ks, "")
	for _, want := range []store.Role{roles.Operator(), roles.Viewer()} {
		resp, err := root.RoleGet(ctx, want.Name)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range resp.Perm {
			got = append(got, fmt.Sprintf("%s %q %q", p.PermType, p.Key, p.RangeEnd))
		}
		var wantS []string
		for _, g := range want.Grants {
			wantS = append(wantS, fmt.Sprintf("%s %q %q", strings.ToUpper(string(g.Access)), g.Key, g.End))
		}
		slices.Sort(got)
		slices.Sort(wantS)
		if !reflect.DeepEqual(got, wantS) {
			t.Errorf("role %s after --revoke-extra holds\n%s\nwant exactly\n%s", want.Name, strings.Join(got, "\n"), strings.Join(wantS, "\n"))
		}
	}
	if r := apply(); r.code != ExitOK || !strings.Contains(r.stdout, "nothing to change") {
		t.Fatalf("auth apply after the migration: %s", r)
	}
}

// TestAuthRoles: auth roles prints every role and user as etcdctl
// commands without contacting etcd (the endpoint is dead), in JSON too;
// bad names are usage errors; the help teaches the roles and the
// certificate form.
func TestAuthRoles(t *testing.T) {
	t.Parallel()
	dead := []string{"--endpoints", "127.0.0.1:1", "--dial-timeout", "100ms", "--prefix", "/fleet/v2", "--role-prefix", "rd-"}
	r, _ := runEnv(nil, append(dead, "auth", "roles", "--agent", "edge-fra-1=fra1.example.net", "--origin", "eu-central", "--viewer", "grafana")...)
	for _, want := range []string{
		"# rd-agent-edge-fra-1: the regiond agent of node edge-fra-1\netcdctl role add rd-agent-edge-fra-1\n",
		"etcdctl role grant-permission rd-agent-edge-fra-1 --prefix=true read /fleet/v2/routing/\n",
		"etcdctl role grant-permission rd-agent-edge-fra-1 readwrite /fleet/v2/agents/edge-fra-1\n",
		"etcdctl role grant-permission rd-origin-eu-central --prefix=true readwrite /fleet/v2/routing/health/eu-central/\n",
		"etcdctl role grant-permission rd-operator --prefix=true read /fleet/v2/agents/\n",
		"etcdctl user add fra1.example.net --no-password\netcdctl user grant-role fra1.example.net rd-agent-edge-fra-1\n",
		"etcdctl user add grafana --no-password\netcdctl user grant-role grafana rd-viewer\n",
		"etcd was not contacted (regionctl --user root auth apply, with the same flags, makes what etcd lacks of them)\n",
	} {
		if r.code != ExitOK || !strings.Contains(r.stdout, want) {
			t.Fatalf("auth roles: want %q in %s", want, r)
		}
	}
	if strings.Contains(r.stdout, "dry run") {
		t.Errorf("auth roles: %s; it contacts no etcd: not a dry run", r)
	}
	r, _ = runEnv(nil, append(dead, "auth", "roles", "--operator", "alice", "--passwords", "-o", "json")...)
	var res authResult
	if r.code != ExitOK || json.Unmarshal([]byte(r.stdout), &res) != nil || len(res.Roles) != 2 || len(res.Users) != 1 ||
		res.Steps[len(res.Steps)-2].Etcdctl != "etcdctl user add alice # prompts for the password" {
		t.Fatalf("auth roles -o json: %s", r)
	}
	for _, args := range [][]string{{"--agent", "a/b"}, {"--operator", "root"}, {"--origin", "eu-central="}, {"--origin", "EU central"},
		{"--agent", "n1=u", "--agent", "n2=u"}, {"--origin", "BAD"}} {
		if r, _ := runEnv(nil, append(dead, append([]string{"auth", "roles"}, args...)...)...); r.code != ExitUsage {
			t.Errorf("auth roles %v: want exit 2, got %s", args, r)
		}
	}
	if r, _ := runEnv(nil, append(dead, "auth", "roles", "--origin", "BAD")...); !strings.Contains(r.stderr, `--origin "BAD": want a pool id (lower-case`) {
		t.Errorf("auth roles --origin BAD: %s; want the pool id's grammar named", r)
	}
	r, _ = runEnv(nil, "auth", "apply", "--help")
	for _, want := range []string{"regiond-origin-POOL", "readwrite the keys <root>/agents/NODE and\n                         <root>/nodes/NODE (its node record) alone", "<root>/nodes/ (agent rm)", "--client-cert-auth",
		"common name (CN)", "--no-password", "--revoke-extra", "--dry-run", "root role"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("auth apply --help lacks %q:\n%s", want, r.stdout)
		}
	}
}

// operatorJobs: the operator writes (with the audit record naming it),
// waits for convergence, reads history and status.
func operatorJobs(t *testing.T, e *rbacEnv) {
	t.Helper()
	if r := e.as(rbacOperator, "apply", "-f", exampleConfig, "--reason", "seed"); r.code != ExitOK || !strings.Contains(r.stdout, "epoch 0 → 1") {
		t.Fatalf("operator apply: %s", r)
	}
	// No agent runs yet: the wait reads and watches agents/ (a refusal
	// would name the permission) and finds nothing that confirms the write.
	if r := e.as(rbacOperator, "pool", "drain", "eu-north", "--reason", "x", "--wait-converged=2s"); r.code != ExitNotConverged ||
		!strings.Contains(r.stderr, "no live agent under "+e.ks.AgentsPrefix()+" confirmed it") || strings.Contains(r.stderr, "permission") {
		t.Fatalf("operator drain --wait-converged: %s", r)
	}
	if r := e.as(rbacOperator, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--reason", "b"); r.code != ExitOK {
		t.Fatalf("operator boost: %s", r)
	}
	for _, args := range [][]string{{"history"}, {"status"}, {"get", "pools"}} {
		if r := e.as(rbacOperator, args...); r.code != ExitOK {
			t.Fatalf("operator %v: %s", args, r)
		}
	}
	resp, err := e.root.Get(context.Background(), e.ks.Audit(2))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("audit 2: %v", err)
	}
	var rec routing.Audit
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || rec.User != rbacOperator {
		t.Fatalf("audit record user %q (%v), want %s (the --user, or the certificate's CN)", rec.User, err, rbacOperator)
	}
}

// viewerJobs: the viewer reads everything, dry runs included.
func viewerJobs(t *testing.T, e *rbacEnv) {
	t.Helper()
	for _, args := range [][]string{{"get", "pools"}, {"status"}, {"history"},
		{"pool", "drain", "eu-central", "--dry-run"}, {"diff", "-f", exampleConfig}, {"validate"}} {
		if r := e.as(rbacViewer, args...); r.code != ExitOK {
			t.Fatalf("viewer %v: %s", args, r)
		}
	}
	if r := e.asResolve(rbacViewer, "DE", "--key", "v"); r.code != ExitOK || !strings.Contains(r.stdout, "edge-") {
		t.Fatalf("viewer resolve: %s", r)
	}
}

// originHeartbeat is `regionctl heartbeat eu-central --instance fra-1`
// run as the origin's user, until stop.
type originHeartbeat struct {
	key       string
	out, errb logbuf.Buffer // read while it runs
	cancel    context.CancelFunc
	done      chan int
	present   func() bool // the key exists, under a lease
}

// startOriginHeartbeat starts the origin's heartbeat and waits (bounded)
// until its health key is there; it fails the test otherwise.
func (e *rbacEnv) startOriginHeartbeat(t *testing.T) *originHeartbeat {
	t.Helper()
	return e.startOriginHeartbeatCtx(t, context.Background())
}

// startOriginHeartbeatCtx is startOriginHeartbeat under parent (which may
// carry a dialOptionsHook).
func (e *rbacEnv) startOriginHeartbeatCtx(t *testing.T, parent context.Context) *originHeartbeat {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	h := &originHeartbeat{key: e.ks.RoutingKey(routing.HealthKey("eu-central", "fra-1")), cancel: cancel, done: make(chan int, 1)}
	t.Cleanup(cancel)
	go func() {
		args := append(e.flags(rbacOrigin), "heartbeat", "eu-central", "--instance", "fra-1", "--addr", "10.0.0.1:443", "--ttl", "5s")
		h.done <- run(ctx, args, &h.out, &h.errb, func(string) string { return "" })
	}()
	h.present = func() bool {
		resp, err := e.root.Get(context.Background(), h.key)
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease != 0
	}
	if _, ok := poll.Until(10*time.Second, h.present); !ok {
		h.stop()
		t.Fatalf("origin heartbeat wrote no health key:\n%s%s", h.out.String(), h.errb.String())
	}
	return h
}

// stop ends the heartbeat (as a SIGTERM does) and returns its exit code.
func (h *originHeartbeat) stop() int {
	h.cancel()
	return <-h.done
}

// originJobs: an origin keeps its pool's health key alive, and the key
// goes when the heartbeat stops.
func originJobs(t *testing.T, e *rbacEnv) {
	t.Helper()
	h := e.startOriginHeartbeat(t)
	// Deleted by root while it runs: the origin's role alone reads,
	// watches and puts it back.
	if _, err := e.root.Delete(context.Background(), h.key); err != nil {
		t.Fatal(err)
	}
	if _, ok := poll.Until(10*time.Second, h.present); !ok {
		h.stop()
		t.Fatalf("origin heartbeat did not put its deleted key back:\n%s%s", h.out.String(), h.errb.String())
	}
	if code := h.stop(); code != ExitOK || h.present() || strings.Contains(h.errb.String(), "cannot follow the marker") {
		t.Fatalf("origin heartbeat stopped: exit %d, key present %v:\n%s%s", code, h.present(), h.out.String(), h.errb.String())
	}
}

// agentJobs: an agent's user reads the routing policy and puts its own
// status key under a lease (what the agent does; TestAgentWithAgentRole
// runs a real one).
func agentJobs(t *testing.T, e *rbacEnv) {
	t.Helper()
	cli := e.client(rbacAgent)
	ctx := context.Background()
	if resp, err := cli.Get(ctx, e.ks.Routing(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count == 0 {
		t.Fatalf("agent reads routing/: %v %v", resp, err)
	}
	lease, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, e.ks.Agent("n1"), `{"node":"n1"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatalf("agent puts its status key: %v", err)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatalf("agent revokes its status key's lease: %v", err)
	}
}

// refusals: each user is refused what its job does not need, with a
// message naming the key, the permission and the role; nothing changes.
func refusals(t *testing.T, e *rbacEnv) {
	t.Helper()
	before := e.state()
	ctx := context.Background()
	p := rbacPrefix
	for _, tc := range []struct{ user, key string }{
		{rbacAgent, p + "/routing/policy/residency"},
		{rbacAgent, p + "/routing/pools/eu-central"},
		{rbacAgent, p + "/agents/n2"},
		{rbacAgent, p + "/nodes/n2"}, // another node's record
		{rbacViewer, p + "/nodes/n1"},
		{rbacOrigin, p + "/nodes/n1"},
		{rbacAgent, p + "/audit/00000000000000000009"},
		{rbacOrigin, p + "/routing/health/us-east/x"},
		{rbacOrigin, p + "/routing/health/eu-central-2/x"},
		{rbacOrigin, p + "/routing/pools/eu-central"},
		{rbacViewer, p + "/routing/pools/eu-central"},
		{rbacViewer, p + "/routing/health/eu-central/x"},
		{rbacViewer, p + "/audit/00000000000000000009"},
		{rbacViewer, p + "/agents/n1"},
		{rbacOperator, p + "/agents/n1"},
		{rbacOperator, p + "/routing/health/eu-central/x"}, // an operator cannot forge a pool's health
		{rbacOperator, p + "/routing/garbage"},
	} {
		if _, err := e.client(tc.user).Put(ctx, tc.key, `{"classes":{}}`); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("%s put %s: %v, want permission denied", tc.user, tc.key, err)
		}
	}
	if _, err := e.client(rbacViewer).Delete(ctx, p+"/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("viewer delete of the prefix: %v, want permission denied", err)
	}
	if _, err := e.client(rbacAgent).Get(ctx, p+"/audit/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("agent read of audit/: %v, want permission denied", err)
	}
	ep := e.srv.Endpoints[0]
	for _, tc := range []struct {
		user string
		args []string
		want string
	}{
		{rbacViewer, []string{"pool", "drain", "eu-central", "--reason", "v"},
			"regionctl: permission denied for user view at " + ep + ": commit epoch 4 needs " + commitNeeds(p) +
				" (role regiond-operator), nothing written: etcdserver: permission denied"},
		{rbacOrigin, []string{"heartbeat", "us-east", "--instance", "x", "--addr", "a:1"},
			"regionctl: permission denied for user regiond-origin-eu-central at " + ep + ": read " + p + "/routing/health/us-east/x needs readwrite on " +
				p + "/routing/health/us-east/ (role regiond-origin-us-east)"},
		// The viewer may read the health key, not write it: refused at the
		// put, at once (not retried until the heartbeat is stopped).
		{rbacViewer, []string{"heartbeat", "eu-central", "--instance", "x", "--addr", "a:1"},
			"regionctl: heartbeat: permission denied for user view at " + ep + ": put " + p + "/routing/health/eu-central/x needs readwrite on " +
				p + "/routing/health/eu-central/ (role regiond-origin-eu-central), nothing written"},
		{rbacOrigin, []string{"get", "pools"},
			"read " + p + "/routing/epoch needs read on " + p + "/routing/ (role regiond-viewer or regiond-operator)"},
		{rbacAgent, []string{"route", "set", "PL", "--target", "eu-central=100", "--reason", "a"},
			"regionctl: permission denied for user regiond-agent-n1 at " + ep + ": commit epoch 4 needs " + commitNeeds(p) +
				" (role regiond-operator), nothing written"},
		{rbacOrigin, []string{"route", "set", "PL", "--target", "eu-central=100", "--reason", "a"},
			"read " + p + "/routing/epoch needs " + commitNeeds(p) + " (role regiond-operator)"},
		{rbacAgent, []string{"history"}, "read the audit records " + p + "/audit/ needs read on " + p + "/audit/ (role regiond-viewer or regiond-operator)"},
		{rbacOrigin, []string{"auth", "apply", "--viewer", "x"}, "needs etcd's root role"},
	} {
		r := e.as(tc.user, tc.args...)
		if r.code != ExitRefused || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s %v: want exit 1 with %q, got %s", tc.user, tc.args, tc.want, r)
		}
	}
	if after := e.state(); !reflect.DeepEqual(after, before) {
		t.Fatalf("refused requests changed etcd:\nbefore %+v\nafter  %+v", before, after)
	}
}

// commitNeeds is how a refused guarded write names what it needs under
// the root p: the operator's write grants.
func commitNeeds(p string) string {
	return "readwrite on " + p + "/routing/pools/, " + p + "/routing/routes/, " + p + "/routing/policy/, " +
		p + "/routing/overrides/, the key " + p + "/routing/epoch and " + p + "/audit/"
}
