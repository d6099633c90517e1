package store

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/regiond/regiond/internal/keyspace"
)

func testRoles() Roles { return NewRoles(keyspace.Default(), "") }

// TestRoleGrants: each role holds exactly its job's permissions (the
// contract of docs/regionctl.md), and no agent or origin role may write a key
// of the routing policy.
func TestRoleGrants(t *testing.T) {
	r := testRoles()
	for _, tc := range []struct {
		role Role
		want []string
	}{
		{r.Operator(), []string{"read on /regiond/v1/routing/", "readwrite on /regiond/v1/routing/pools/",
			"readwrite on /regiond/v1/routing/routes/", "readwrite on /regiond/v1/routing/policy/",
			"readwrite on /regiond/v1/routing/overrides/", "readwrite on the key /regiond/v1/routing/epoch",
			"readwrite on /regiond/v1/audit/", "read on /regiond/v1/agents/", "readwrite on /regiond/v1/nodes/"}},
		{r.Viewer(), []string{"read on /regiond/v1/routing/", "read on /regiond/v1/audit/", "read on /regiond/v1/agents/", "read on /regiond/v1/nodes/"}},
		{r.Agent("edge-fra-1"), []string{"read on /regiond/v1/routing/", "readwrite on the key /regiond/v1/agents/edge-fra-1",
			"readwrite on the key /regiond/v1/nodes/edge-fra-1"}},
		{r.Origin("eu-central"), []string{"readwrite on /regiond/v1/routing/health/eu-central/"}},
	} {
		var got []string
		for _, g := range tc.role.Grants {
			got = append(got, g.String())
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.role.Name, got, tc.want)
		}
	}
	policy := Grant{Access: AccessWrite, Key: "/regiond/v1/routing/policy/residency"}
	for _, role := range []Role{r.Agent("n1"), r.Origin("eu-central"), r.Viewer()} {
		if role.holds([]Grant{policy}) {
			t.Errorf("%s may write the residency policy", role.Name)
		}
	}
	if r.Operator().holds([]Grant{{Access: AccessWrite, Key: "/regiond/v1/routing/health/eu-central/i1"}}) {
		t.Error("the operator role may write a pool's health (forge it)")
	}
	if r.Origin("eu").holds([]Grant{{Access: AccessWrite, Key: "/regiond/v1/routing/health/eu-central/i1"}}) {
		t.Error("the origin role of pool eu may write pool eu-central's health (prefix without its '/')")
	}
	if r.Agent("n1").holds([]Grant{{Access: AccessWrite, Key: "/regiond/v1/agents/n10"}}) {
		t.Error("the agent role of n1 may write n10's status")
	}
}

// TestHolding: a refused request names the roles that would allow it,
// least privileged first.
func TestHolding(t *testing.T) {
	r := testRoles()
	for _, tc := range []struct {
		name  string
		needs []Grant
		want  []string
	}{
		{"read routing", []Grant{r.ReadNeed("/regiond/v1/routing/epoch")}, []string{"regiond-viewer", "regiond-operator"}},
		{"read agents", []Grant{r.ReadNeed("/regiond/v1/agents/")}, []string{"regiond-viewer", "regiond-operator"}},
		{"commit", r.CommitNeeds(), []string{"regiond-operator"}},
		{"heartbeat", []Grant{r.WriteNeed("/regiond/v1/routing/health/eu-central/fra-1")},
			[]string{"regiond-origin-eu-central"}},
		{"status key", []Grant{{Access: AccessReadWrite, Key: "/regiond/v1/agents/n1"}}, []string{"regiond-agent-n1"}},
		{"outside the prefix", []Grant{{Access: AccessRead, Key: "/elsewhere/k"}}, nil},
	} {
		if got := r.Holding(tc.needs...); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	for key, want := range map[string]string{
		"/regiond/v1/routing/pools/x":    "readwrite on /regiond/v1/routing/pools/",
		"/regiond/v1/routing/epoch":      "readwrite on the key /regiond/v1/routing/epoch",
		"/regiond/v1/audit/000000000001": "readwrite on /regiond/v1/audit/",
		"/regiond/v1/routing/garbage":    "readwrite on the key /regiond/v1/routing/garbage",
	} {
		if got := r.WriteNeed(key).String(); got != want {
			t.Errorf("WriteNeed(%s) = %s, want %s", key, got, want)
		}
	}
}

// TestPlan: users get their job's role (the role's own name by default),
// agents and origins one role per node and pool; bad names are refused.
func TestPlan(t *testing.T) {
	r := NewRoles(keyspace.Default(), "rd-")
	p, err := r.Plan(RoleSpec{Operators: []string{"alice"}, Viewers: []string{"grafana", "alice"},
		Agents:  []Binding{{Name: "n1"}, {Name: "n2", User: "CN-n2"}},
		Origins: []Binding{{Name: "eu-central"}, {Name: "eu-central", User: "fra-1b"}}})
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, role := range p.Roles {
		roles = append(roles, role.Name)
	}
	wantRoles := []string{"rd-operator", "rd-viewer", "rd-agent-n1", "rd-agent-n2", "rd-origin-eu-central"}
	if !reflect.DeepEqual(roles, wantRoles) {
		t.Errorf("roles %q, want %q", roles, wantRoles)
	}
	want := []User{{"CN-n2", []string{"rd-agent-n2"}}, {"alice", []string{"rd-operator", "rd-viewer"}},
		{"fra-1b", []string{"rd-origin-eu-central"}}, {"grafana", []string{"rd-viewer"}},
		{"rd-agent-n1", []string{"rd-agent-n1"}}, {"rd-origin-eu-central", []string{"rd-origin-eu-central"}}}
	if !reflect.DeepEqual(p.Users, want) {
		t.Errorf("users %+v\nwant %+v", p.Users, want)
	}
	for name, spec := range map[string]RoleSpec{
		"root user":          {Operators: []string{"root"}},
		"node with a slash":  {Agents: []Binding{{Name: "a/b"}}},
		"bad pool":           {Origins: []Binding{{Name: "EU central"}}},
		"one user, 2 agents": {Agents: []Binding{{Name: "n1", User: "u"}, {Name: "n2", User: "u"}}},
		"empty user":         {Viewers: []string{""}},
	} {
		if _, err := r.Plan(spec); err == nil {
			t.Errorf("%s: planned", name)
		}
	}
}

// TestSteps: from nothing every role, grant, user and role grant; from
// the plan itself nothing; a changed permission type is re-granted; an
// extra permission or role is refused, or revoked with revokeExtra.
func TestSteps(t *testing.T) {
	r := testRoles()
	p, err := r.Plan(RoleSpec{Agents: []Binding{{Name: "n1"}}})
	if err != nil {
		t.Fatal(err)
	}
	all, err := p.Steps(nil, false, false)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, s := range all {
		lines = append(lines, s.Etcdctl())
	}
	want := []string{
		"etcdctl role add regiond-operator",
		"etcdctl role grant-permission regiond-operator --prefix=true read /regiond/v1/routing/",
		"etcdctl role grant-permission regiond-operator --prefix=true readwrite /regiond/v1/routing/pools/",
		"etcdctl role grant-permission regiond-operator --prefix=true readwrite /regiond/v1/routing/routes/",
		"etcdctl role grant-permission regiond-operator --prefix=true readwrite /regiond/v1/routing/policy/",
		"etcdctl role grant-permission regiond-operator --prefix=true readwrite /regiond/v1/routing/overrides/",
		"etcdctl role grant-permission regiond-operator readwrite /regiond/v1/routing/epoch",
		"etcdctl role grant-permission regiond-operator --prefix=true readwrite /regiond/v1/audit/",
		"etcdctl role grant-permission regiond-operator --prefix=true read /regiond/v1/agents/",
		"etcdctl role grant-permission regiond-operator --prefix=true readwrite /regiond/v1/nodes/",
		"etcdctl role add regiond-viewer",
		"etcdctl role grant-permission regiond-viewer --prefix=true read /regiond/v1/routing/",
		"etcdctl role grant-permission regiond-viewer --prefix=true read /regiond/v1/audit/",
		"etcdctl role grant-permission regiond-viewer --prefix=true read /regiond/v1/agents/",
		"etcdctl role grant-permission regiond-viewer --prefix=true read /regiond/v1/nodes/",
		"etcdctl role add regiond-agent-n1",
		"etcdctl role grant-permission regiond-agent-n1 --prefix=true read /regiond/v1/routing/",
		"etcdctl role grant-permission regiond-agent-n1 readwrite /regiond/v1/agents/n1",
		"etcdctl role grant-permission regiond-agent-n1 readwrite /regiond/v1/nodes/n1",
		"etcdctl user add regiond-agent-n1 --no-password",
		"etcdctl user grant-role regiond-agent-n1 regiond-agent-n1",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Fatalf("steps:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	cur := &AuthState{Roles: map[string][]Grant{}, Users: map[string][]string{}}
	for _, role := range p.Roles {
		cur.Roles[role.Name] = slices.Clone(role.Grants)
	}
	for _, u := range p.Users {
		cur.Users[u.Name] = slices.Clone(u.Roles)
	}
	if steps, err := p.Steps(cur, false, false); err != nil || len(steps) != 0 {
		t.Fatalf("steps from the plan itself: %v %v", steps, err)
	}
	cur.Roles["regiond-viewer"][0].Access = AccessReadWrite // widened by hand
	_, err = p.Steps(cur, false, false)
	var widened *ExtraGrantsError
	if !errors.As(err, &widened) || len(widened.Extras) != 1 ||
		widened.Extras[0] != "role regiond-viewer holds readwrite on /regiond/v1/routing/ where its job needs read" {
		t.Fatalf("a widened permission: %v, want it named as an extra", err)
	}
	steps, err := p.Steps(cur, false, true)
	if err != nil || len(steps) != 1 || steps[0].Etcdctl() != "etcdctl role grant-permission regiond-viewer --prefix=true read /regiond/v1/routing/" {
		t.Fatalf("a widened permission with revokeExtra: %v %v, want one re-grant of read", steps, err)
	}
	cur.Roles["regiond-agent-n1"] = append(cur.Roles["regiond-agent-n1"], prefixGrant(AccessReadWrite, "/regiond/v1/agents/"))
	cur.Users["regiond-agent-n1"] = append(cur.Users["regiond-agent-n1"], "root")
	_, err = p.Steps(cur, false, false)
	var extra *ExtraGrantsError
	if !errors.As(err, &extra) || len(extra.Extras) != 3 ||
		extra.Extras[1] != "role regiond-agent-n1 also holds readwrite on /regiond/v1/agents/" ||
		extra.Extras[2] != "user regiond-agent-n1 also holds role root" {
		t.Fatalf("extras: %v", err)
	}
	steps, err = p.Steps(cur, true, true)
	lines = nil
	for _, s := range steps {
		lines = append(lines, s.Etcdctl())
	}
	want = []string{"etcdctl role grant-permission regiond-viewer --prefix=true read /regiond/v1/routing/",
		"etcdctl role revoke-permission regiond-agent-n1 --prefix=true /regiond/v1/agents/",
		"etcdctl user revoke-role regiond-agent-n1 root"}
	if err != nil || !reflect.DeepEqual(lines, want) {
		t.Fatalf("with revokeExtra: %q %v, want %q", lines, err, want)
	}

	// The viewer's grant before it had four (read on all of the root) is
	// an extra, revoked by revokeExtra; a user's role of another
	// deployment (grants, none in this one's sections) is not, nor is
	// root's.
	cur = &AuthState{Roles: map[string][]Grant{}, Users: map[string][]string{},
		Others: map[string][]Grant{"b-operator": {prefixGrant(AccessRead, "/regiond/v1/b/routing/")}, "root": nil}}
	for _, role := range p.Roles {
		cur.Roles[role.Name] = slices.Clone(role.Grants)
	}
	cur.Roles["regiond-viewer"] = append(cur.Roles["regiond-viewer"], prefixGrant(AccessRead, "/regiond/v1/"))
	for _, u := range p.Users {
		cur.Users[u.Name] = append(slices.Clone(u.Roles), "b-operator")
	}
	steps, err = p.Steps(cur, false, true)
	lines = nil
	for _, s := range steps {
		lines = append(lines, s.Etcdctl())
	}
	want = []string{"etcdctl role revoke-permission regiond-viewer --prefix=true /regiond/v1/"}
	if err != nil || !reflect.DeepEqual(lines, want) {
		t.Fatalf("the old viewer grant and another deployment's role: %q %v, want %q", lines, err, want)
	}
	if notes := p.OtherDeployments(cur); len(notes) != 1 || !strings.Contains(notes[0], "user regiond-agent-n1 also holds role b-operator, of another deployment") {
		t.Fatalf("notes: %q", notes)
	}
	cur.Users["regiond-agent-n1"] = append(cur.Users["regiond-agent-n1"], "root")
	if _, err := p.Steps(cur, false, false); err == nil || !strings.Contains(err.Error(), "user regiond-agent-n1 also holds role root") {
		t.Fatalf("root among other roles: %v, want an extra", err)
	}
	// A role whose grant covers this deployment (all of "/", the root's
	// parent, every key) is an extra, not another deployment's.
	for _, wide := range []Grant{prefixGrant(AccessReadWrite, "/"), prefixGrant(AccessRead, "/regiond/"), {Access: AccessRead, Key: "\x00", End: "\x00"}} {
		cur.Users["regiond-agent-n1"] = []string{"regiond-agent-n1", "wide"}
		cur.Others = map[string][]Grant{"wide": {wide}}
		if _, err := p.Steps(cur, false, false); err == nil || !strings.Contains(err.Error(), "user regiond-agent-n1 also holds role wide") {
			t.Errorf("a role with %s: %v, want an extra", wide, err)
		}
		if notes := p.OtherDeployments(cur); len(notes) != 0 {
			t.Errorf("a role with %s called another deployment's: %q", wide, notes)
		}
	}
}

// TestEtcdctlQuoting: names a shell would split are quoted.
func TestEtcdctlQuoting(t *testing.T) {
	s := AuthStep{Op: OpUserAdd, User: "o'brien x", Password: true}
	if got := s.Etcdctl(); got != `etcdctl user add 'o'\''brien x' # prompts for the password` {
		t.Fatalf("got %s", got)
	}
	g := Grant{Access: AccessRead, Key: "/a", End: "/c"}
	s = AuthStep{Op: OpRoleGrant, Role: "r", Grant: &g}
	if got := s.Etcdctl(); got != "etcdctl role grant-permission r read /a /c" {
		t.Fatalf("range: %s", got)
	}
}
