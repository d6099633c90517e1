package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
)

// TestApplyAuth: on a real etcd, ApplyAuth of the steps from ReadAuth
// makes every role and user of the plan (before authentication is on);
// once it is on, root's re-read finds nothing to do and the auth revision
// does not move; a generated password logs in; a non-root user is told
// that managing roles needs the root role; a role granted by hand is
// refused as an extra.
func TestApplyAuth(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ks := keyspace.Default()
	plan, err := NewRoles(ks, "").Plan(RoleSpec{Operators: []string{"alice"}, Agents: []Binding{{Name: "n1"}}})
	if err != nil {
		t.Fatal(err)
	}
	anon := devetcd.NewTestClient(t, srv)
	s := New(anon, ks, Options{})
	cur, err := s.ReadAuth(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := plan.Steps(cur, true, false)
	if err != nil || len(steps) != 23 { // 2 more grants since node records, 3 since the viewer's four
		t.Fatalf("steps from an empty etcd: %d %v", len(steps), err)
	}
	pw, meanwhile, err := s.ApplyAuth(ctx, steps)
	if err != nil || len(pw) != 2 || len(pw["alice"]) != 24 || len(meanwhile) != 0 {
		t.Fatalf("apply: %v %v (made meanwhile: %v)", pw, err, meanwhile)
	}
	// The same steps again, as a second run that read etcd before the
	// first made them: its users and roles were made meanwhile, and it
	// says so; no password of its own (the writes review: it printed
	// user add lines of users it did not add, with no password for them).
	again, meanwhile, err := s.ApplyAuth(ctx, steps)
	var added []string
	for _, m := range meanwhile {
		added = append(added, m.User+m.Role)
	}
	if err != nil || len(again) != 0 || !slices.Contains(added, "alice") || len(meanwhile) != 2+len(plan.Roles) {
		t.Fatalf("the same steps again: passwords %v, made meanwhile %v, %v; want alice, the other user and every role", again, added, err)
	}
	root := devetcd.EnableTestRootAuth(t, srv)
	rs := New(root, ks, Options{})
	before, err := root.AuthStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur, err = rs.ReadAuth(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if steps, err := plan.Steps(cur, true, false); err != nil || len(steps) != 0 {
		t.Fatalf("re-read after apply: %v %v, want nothing to do", steps, err)
	}
	if after, err := root.AuthStatus(ctx); err != nil || after.AuthRevision != before.AuthRevision {
		t.Fatalf("auth revision %d → %v (%v): a re-read changed etcd's auth", before.AuthRevision, after, err)
	}

	alice, err := srv.ClientAs("alice", pw["alice"])
	if err != nil {
		t.Fatalf("log in with the generated password: %v", err)
	}
	defer alice.Close()
	if _, err := alice.Put(ctx, ks.RoutingKey("pools/x"), "{}"); err != nil {
		t.Fatalf("operator put under routing/: %v", err)
	}
	_, err = New(alice, ks, Options{}).ReadAuth(ctx, plan)
	if err == nil || !strings.Contains(err.Error(), "needs etcd's root role") {
		t.Fatalf("ReadAuth as a non-root user: %v", err)
	}

	if _, err := root.RoleGrantPermission(ctx, "regiond-agent-n1", ks.Routing(), clientv3.GetPrefixRangeEnd(ks.Routing()),
		clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if _, err := root.RoleGrantPermission(ctx, "regiond-agent-n1", ks.AgentsPrefix(), clientv3.GetPrefixRangeEnd(ks.AgentsPrefix()),
		clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	cur, err = rs.ReadAuth(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	_, err = plan.Steps(cur, false, false)
	var extra *ExtraGrantsError
	// Both widenings are named: the range it should not hold, and the
	// write it gained on the range it reads.
	if !errors.As(err, &extra) || len(extra.Extras) != 2 || !strings.Contains(extra.Extras[0], "readwrite on /regiond/v1/agents/") ||
		!strings.Contains(extra.Extras[1], "holds readwrite on /regiond/v1/routing/ where its job needs read") {
		t.Fatalf("a role widened by hand: %v", err)
	}
	steps, err = plan.Steps(cur, false, true)
	if err != nil || len(steps) != 2 { // read again on routing/, revoke agents/
		t.Fatalf("with revokeExtra: %v %v", steps, err)
	}
	if _, _, err := rs.ApplyAuth(ctx, steps); err != nil {
		t.Fatal(err)
	}
	cur, err = rs.ReadAuth(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	got, want := cur.Roles["regiond-agent-n1"], NewRoles(ks, "").Agent("n1").Grants
	if len(got) != len(want) || !slices.Contains(got, want[0]) || !slices.Contains(got, want[1]) {
		t.Fatalf("agent role after revoking the extras: %v, want %v", got, want)
	}
}

// TestStepsGrantsElsewhere: in a role of this deployment (a grant in its
// sections), a grant elsewhere under the root (the earlier layout's
// locks/) or covering it (all of "/") is an extra, revoked by revokeExtra;
// a grant in another
// deployment's keys (another root, or a section of a root nested in this
// one) is refused even with revokeExtra, as is a role with no grant in
// this deployment's sections (a nested root's alone included, and so
// locks/ alone: the two are alike); the
// refusal suggests a --role-prefix made of the root.
func TestStepsGrantsElsewhere(t *testing.T) {
	ks := keyspace.Default()
	p, err := NewRoles(ks, "").Plan(RoleSpec{})
	if err != nil {
		t.Fatal(err)
	}
	state := func(operator ...Grant) *AuthState {
		cur := &AuthState{Roles: map[string][]Grant{}, Users: map[string][]string{}}
		for _, role := range p.Roles {
			cur.Roles[role.Name] = slices.Clone(role.Grants)
		}
		cur.Roles["regiond-operator"] = operator
		return cur
	}
	own := NewRoles(ks, "").Operator().Grants
	locks := prefixGrant(AccessReadWrite, "/regiond/v1/locks/")
	steps, err := p.Steps(state(append(slices.Clone(own), locks)...), false, true)
	if err != nil || len(steps) != 1 || steps[0].Etcdctl() != "etcdctl role revoke-permission regiond-operator --prefix=true /regiond/v1/locks/" {
		t.Fatalf("locks/ beside the operator's grants, revokeExtra: %v %v, want its revoke", steps, err)
	}
	var extra *ExtraGrantsError
	if _, err := p.Steps(state(append(slices.Clone(own), locks)...), false, false); !errors.As(err, &extra) ||
		len(extra.Extras) != 1 || extra.Extras[0] != "role regiond-operator also holds readwrite on /regiond/v1/locks/" {
		t.Fatalf("locks/ beside the operator's grants: %v, want an extra", err)
	}
	// A grant covering this deployment (all of "/") beside its own is an
	// extra too.
	if steps, err := p.Steps(state(append(slices.Clone(own), prefixGrant(AccessRead, "/"))...), false, true); err != nil || len(steps) != 1 ||
		steps[0].Op != OpRoleRevoke || steps[0].Grant.Key != "/" {
		t.Fatalf("all of / beside the operator's grants, revokeExtra: %v %v, want its revoke", steps, err)
	}
	for name, grants := range map[string][]Grant{
		"a nested root's section beside this one's": append(slices.Clone(own), prefixGrant(AccessRead, "/regiond/v1/x/routing/")),
		"a nested root's key beside this one's":     append(slices.Clone(own), Grant{Access: AccessReadWrite, Key: "/regiond/v1/x/routing/epoch"}),
		"another root's section beside this one's":  append(slices.Clone(own), prefixGrant(AccessRead, "/staging/v1/routing/")),
		"a nested root alone":                       {prefixGrant(AccessRead, "/regiond/v1/x/")},
		"locks/ alone":                              {locks},
		"another root alone":                        {prefixGrant(AccessRead, "/staging/v1/routing/")},
	} {
		for _, revoke := range []bool{false, true} {
			_, err := p.Steps(state(grants...), false, revoke)
			if err == nil || errors.As(err, &extra) || !strings.Contains(err.Error(), "these roles serve another prefix") ||
				!strings.Contains(err.Error(), "--role-prefix regiond-v1-)") {
				t.Errorf("%s (revokeExtra %v): %v, want it refused as another deployment's", name, revoke, err)
			}
		}
	}
	staging, _ := keyspace.New("/staging/v1")
	for prefix, want := range map[string]string{"": "(e.g. --role-prefix regiond-staging-v1-)", "regiond-staging-v1-": "another --role-prefix"} {
		sp, err := NewRoles(staging, prefix).Plan(RoleSpec{})
		if err != nil {
			t.Fatal(err)
		}
		cur := &AuthState{Roles: map[string][]Grant{sp.Roles[0].Name: own}}
		if _, err := sp.Steps(cur, false, true); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("/staging/v1 with role prefix %q over /regiond/v1's operator: %v, want %q", prefix, err, want)
		}
	}
}
