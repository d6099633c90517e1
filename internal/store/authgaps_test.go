package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
)

// authGapEnv is an etcd with authentication on (root alone), the roles
// and users of plan made by ApplyAuth as root, and the generated
// passwords of those users.
type authGapEnv struct {
	srv  *devetcd.Server
	root *clientv3.Client
	rs   *Store
	plan *AuthPlan
	pw   map[string]string
}

// newAuthGapEnv starts the etcd, turns authentication on and applies the
// plan of spec (users with generated passwords).
func newAuthGapEnv(t *testing.T, ctx context.Context, spec RoleSpec) *authGapEnv {
	t.Helper()
	srv := devetcd.NewTest(t)
	var err error
	e := &authGapEnv{srv: srv, root: devetcd.EnableTestRootAuth(t, srv)}
	e.rs = New(e.root, keyspace.Default(), Options{})
	if e.plan, err = NewRoles(keyspace.Default(), "").Plan(spec); err != nil {
		t.Fatal(err)
	}
	steps := e.steps(t, ctx, true, false)
	if e.pw, _, err = e.rs.ApplyAuth(ctx, steps); err != nil {
		t.Fatal(err)
	}
	return e
}

// steps reads etcd's roles and users as root and returns Steps of them.
func (e *authGapEnv) steps(t *testing.T, ctx context.Context, passwords, revokeExtra bool) []AuthStep {
	t.Helper()
	steps, err := e.stepsErr(t, ctx, passwords, revokeExtra)
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

func (e *authGapEnv) stepsErr(t *testing.T, ctx context.Context, passwords, revokeExtra bool) ([]AuthStep, error) {
	t.Helper()
	cur, err := e.rs.ReadAuth(ctx, e.plan)
	if err != nil {
		t.Fatal(err)
	}
	return e.plan.Steps(cur, passwords, revokeExtra)
}

// as returns a client logged in as user (its generated password).
func (e *authGapEnv) as(t *testing.T, user string) *clientv3.Client {
	t.Helper()
	cli, err := e.srv.ClientAs(user, e.pw[user])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestGapAgentPrefixGrantIsAnExtra guards the match of a held grant with
// the plan's by its whole range (key and range end), not its key alone:
// an agent role whose single-key grants on agents/<node> and
// nodes/<node> were widened by hand to prefixes (which reach
// agents/<node>0, another node's status) is refused by auth apply as
// holding extras, and --revoke-extra cuts the agent off from the other
// node's keys again (on a real etcd with authentication on).
func TestGapAgentPrefixGrantIsAnExtra(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newAuthGapEnv(t, ctx, RoleSpec{Agents: []Binding{{Name: "n1"}}})
	ks := keyspace.Default()
	const user = "regiond-agent-n1"
	for _, k := range []string{ks.Agent("n1"), ks.Node("n1")} {
		if _, err := e.root.RoleGrantPermission(ctx, user, k, clientv3.GetPrefixRangeEnd(k), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			t.Fatal(err)
		}
	}
	agent := e.as(t, user)
	if _, err := agent.Put(ctx, ks.Agent("n10"), "forged"); err != nil {
		t.Fatalf("the widened role cannot write n10's status (the test's premise): %v", err)
	}
	_, err := e.stepsErr(t, ctx, false, false)
	var extra *ExtraGrantsError
	if !errors.As(err, &extra) || len(extra.Extras) != 2 ||
		!strings.Contains(err.Error(), "role regiond-agent-n1 also holds readwrite on /regiond/v1/agents/n1") ||
		!strings.Contains(err.Error(), "role regiond-agent-n1 also holds readwrite on /regiond/v1/nodes/n1") {
		t.Fatalf("an agent role holding agents/n1 and nodes/n1 as prefixes: %v; want both prefixes refused as extras", err)
	}
	steps := e.steps(t, ctx, false, true)
	if _, _, err := e.rs.ApplyAuth(ctx, steps); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{ks.Agent("n10"), ks.Node("n10"), ks.Agent("n1x")} {
		if _, err := agent.Put(ctx, k, "forged"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("agent n1 puts %s after --revoke-extra: %v, want permission denied", k, err)
		}
	}
	for _, k := range []string{ks.Agent("n1"), ks.Node("n1")} {
		if _, err := agent.Put(ctx, k, "{}"); err != nil {
			t.Errorf("agent n1 puts its own %s after --revoke-extra: %v", k, err)
		}
	}
	if steps := e.steps(t, ctx, false, false); len(steps) != 0 {
		t.Errorf("steps after --revoke-extra: %v, want none", steps)
	}
	resp, err := e.root.RoleGet(ctx, user)
	if err != nil || len(resp.Perm) != 3 || !slices.ContainsFunc(resp.Perm, func(p *authpb.Permission) bool { return string(p.Key) == ks.Agent("n1") && len(p.RangeEnd) == 0 }) {
		t.Errorf("role %s after --revoke-extra: %v %v, want its three grants, agents/n1 a single key", user, resp, err)
	}
}

// TestGapFromKeyRoleIsAnExtra guards overlaps' case of a grant from a key
// to the end of the keyspace (etcdctl --from-key, range end "\x00"): one
// that starts inside this deployment's routing/ reaches its keys, so a
// user's role holding it is an extra of the user (refused, revoked by
// --revoke-extra), not another deployment's role to be left alone; after
// the revoke the user may no longer write the residency policy.
func TestGapFromKeyRoleIsAnExtra(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newAuthGapEnv(t, ctx, RoleSpec{Viewers: []string{"view"}})
	ks := keyspace.Default()
	if _, err := e.root.RoleAdd(ctx, "wide"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.root.RoleGrantPermission(ctx, "wide", ks.RoutingKey("policy/"), "\x00", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.root.UserGrantRole(ctx, "view", "wide"); err != nil {
		t.Fatal(err)
	}
	view := e.as(t, "view")
	policy := ks.RoutingKey("policy/residency")
	if _, err := view.Put(ctx, policy, "{}"); err != nil {
		t.Fatalf("the viewer with the role cannot write the policy (the test's premise): %v", err)
	}
	cur, err := e.rs.ReadAuth(ctx, e.plan)
	if err != nil {
		t.Fatal(err)
	}
	if notes := e.plan.OtherDeployments(cur); len(notes) != 0 {
		t.Errorf("a role from routing/policy/ on called another deployment's: %q", notes)
	}
	if _, err := e.plan.Steps(cur, false, false); err == nil || !strings.Contains(err.Error(), "user view also holds role wide") {
		t.Fatalf("a viewer holding a role from routing/policy/ on: %v, want it refused as an extra", err)
	}
	if _, _, err := e.rs.ApplyAuth(ctx, e.steps(t, ctx, false, true)); err != nil {
		t.Fatal(err)
	}
	if _, err := view.Put(ctx, policy, "{}"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the viewer writes the policy after --revoke-extra: %v, want permission denied", err)
	}
}

// TestGapWriteOnlyGrantIsReadAsWrite guards the reading of etcd's
// permission types (WRITE is write, not readwrite): an origin role whose
// grant on its pool's health prefix was narrowed by hand to write (the
// heartbeat then cannot read its key back) is not taken for the plan's
// readwrite: auth apply re-grants readwrite, and a re-read finds nothing
// to do.
func TestGapWriteOnlyGrantIsReadAsWrite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newAuthGapEnv(t, ctx, RoleSpec{Origins: []Binding{{Name: "eu-central"}}})
	const role = "regiond-origin-eu-central"
	g := NewRoles(keyspace.Default(), "").Origin("eu-central").Grants[0]
	if _, err := e.root.RoleGrantPermission(ctx, role, g.Key, g.End, clientv3.PermissionType(clientv3.PermWrite)); err != nil {
		t.Fatal(err)
	}
	cur, err := e.rs.ReadAuth(ctx, e.plan)
	if err != nil {
		t.Fatal(err)
	}
	if got := cur.Roles[role]; len(got) != 1 || got[0].Access != AccessWrite {
		t.Fatalf("role %s read back as %v, want write on %s", role, got, g.Where())
	}
	// Less than the job needs is no extra: without --revoke-extra, the
	// re-grant alone (it was refused "holds write where its job needs
	// readwrite").
	steps := e.steps(t, ctx, false, false)
	if len(steps) != 1 || steps[0].Op != OpRoleGrant || *steps[0].Grant != g {
		t.Fatalf("steps for a write-only origin role: %v, want the re-grant of %s", steps, g)
	}
	if _, _, err := e.rs.ApplyAuth(ctx, steps); err != nil {
		t.Fatal(err)
	}
	key := keyspace.Default().RoutingKey("health/eu-central/fra-1")
	origin := e.as(t, role)
	if _, err := origin.Put(ctx, key, "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := origin.Get(ctx, key); err != nil {
		t.Errorf("the origin reads its health key after the re-grant: %v", err)
	}
	if steps := e.steps(t, ctx, false, false); len(steps) != 0 {
		t.Errorf("steps after the re-grant: %v, want none", steps)
	}
}

// TestGapRangeIntoAnotherRootIsForeign guards underRoot's check of a
// grant's end: in a role of this deployment, a range that starts under
// the root but runs on into another root's keys (/regiond/v1/x up to
// /regiond/w holds /regiond/v2/) is another deployment's grant, refused
// even with --revoke-extra, not an extra of this one to revoke.
func TestGapRangeIntoAnotherRootIsForeign(t *testing.T) {
	ks := keyspace.Default()
	p, err := NewRoles(ks, "").Plan(RoleSpec{})
	if err != nil {
		t.Fatal(err)
	}
	cur := &AuthState{Roles: map[string][]Grant{}, Users: map[string][]string{}}
	for _, role := range p.Roles {
		cur.Roles[role.Name] = slices.Clone(role.Grants)
	}
	cur.Roles["regiond-operator"] = append(cur.Roles["regiond-operator"], Grant{Access: AccessRead, Key: "/regiond/v1/x", End: "/regiond/w"})
	for _, revoke := range []bool{false, true} {
		steps, err := p.Steps(cur, false, revoke)
		var extra *ExtraGrantsError
		if err == nil || errors.As(err, &extra) || !strings.Contains(err.Error(), "these roles serve another prefix") {
			t.Errorf("a range from /regiond/v1/x into /regiond/v2/ (revokeExtra %v): %v %v, want it refused as another deployment's", revoke, steps, err)
		}
	}
}

// TestGapCertificateUsersHaveNoPassword guards the users ApplyAuth adds
// without --passwords (the certificate form): they are made with etcd's
// no-password option, so no one logs in as them with a password at all,
// not even an empty one (made with an empty password instead, anyone
// reaching etcd could log in as any of them: a raw Authenticate, or
// through a grpc-proxy, which forwards password logins).
func TestGapCertificateUsersHaveNoPassword(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := devetcd.EnableTestRootAuth(t, srv)
	plan, err := NewRoles(keyspace.Default(), "").Plan(RoleSpec{Operators: []string{"alice"}, Agents: []Binding{{Name: "n1"}}})
	if err != nil {
		t.Fatal(err)
	}
	rs := New(root, keyspace.Default(), Options{})
	cur, err := rs.ReadAuth(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := plan.Steps(cur, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if pw, _, err := rs.ApplyAuth(ctx, steps); err != nil || len(pw) != 0 {
		t.Fatalf("apply without passwords: %v %v", pw, err)
	}
	anon, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	for _, u := range []string{"alice", "regiond-agent-n1"} {
		if resp, err := anon.Auth.Authenticate(ctx, u, ""); err == nil || resp != nil && resp.Token != "" {
			t.Errorf("user %s logs in with an empty password: %v", u, err)
		} else if !NoPasswordUser(err) {
			t.Errorf("user %s with an empty password: %v, want etcd's refusal of a password for a no-password user", u, err)
		}
	}
}

// TestGapAnonymousAuthApplyNamesRoot guards authAdminErr's case of a
// client without a user (etcd's "user name is empty"): reading the
// roles with authentication on and no credentials says that managing
// roles and users needs etcd's root role.
func TestGapAnonymousAuthApplyNamesRoot(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	devetcd.EnableTestRootAuth(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plan, err := NewRoles(keyspace.Default(), "").Plan(RoleSpec{})
	if err != nil {
		t.Fatal(err)
	}
	anon := devetcd.NewTestClient(t, srv)
	_, err = New(anon, keyspace.Default(), Options{}).ReadAuth(ctx, plan)
	if !errors.Is(err, rpctypes.ErrUserEmpty) || !strings.Contains(err.Error(), "needs etcd's root role") {
		t.Fatalf("ReadAuth without a user: %v, want etcd's user-empty refusal naming the root role", err)
	}
}

// TestNarrowedGrantIsRegrantedNotRefused: a role holding less than its
// job on a range (read, or write, where it needs readwrite: an agent
// then cannot put its status key) gets the job's grant back, with no
// refusal and nothing revoked; more than its job (readwrite where it
// needs read) stays an extra.
func TestNarrowedGrantIsRegrantedNotRefused(t *testing.T) {
	roles := NewRoles(keyspace.Default(), "")
	plan, err := roles.Plan(RoleSpec{Agents: []Binding{{Name: "n1"}}})
	if err != nil {
		t.Fatal(err)
	}
	cur := &AuthState{Roles: map[string][]Grant{}, Users: map[string][]string{}}
	for _, r := range plan.Roles {
		cur.Roles[r.Name] = slices.Clone(r.Grants)
	}
	for _, u := range plan.Users {
		cur.Users[u.Name] = slices.Clone(u.Roles)
	}
	agent := roles.Agent("n1")
	held := cur.Roles[agent.Name]
	for i, g := range held {
		if g.Access != AccessReadWrite {
			continue
		}
		for _, less := range []Access{AccessRead, AccessWrite} {
			held[i].Access = less
			steps, err := plan.Steps(cur, false, false)
			if err != nil || len(steps) != 1 || steps[0].Op != OpRoleGrant || *steps[0].Grant != g {
				t.Errorf("%s holding %s where it needs %s: steps %v, %v; want the grant of %s alone", agent.Name, less, g.Access, steps, err, g)
			}
		}
		held[i].Access = g.Access
	}
	for i, g := range held {
		if g.Access != AccessRead {
			continue
		}
		held[i].Access = AccessReadWrite
		var extra *ExtraGrantsError
		if _, err := plan.Steps(cur, false, false); !errors.As(err, &extra) {
			t.Errorf("%s holding readwrite where it needs read on %s: %v; want an extra refused", agent.Name, g.Where(), err)
		}
		held[i].Access = g.Access
	}
}
