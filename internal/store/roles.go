package store

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/routing"
)

// DefaultRolePrefix starts the names of regiond's etcd roles.
const DefaultRolePrefix = "regiond-"

// Access is an etcd key permission type.
type Access string

// The permission types of etcd, as etcdctl spells them.
const (
	AccessRead      Access = "read"
	AccessWrite     Access = "write"
	AccessReadWrite Access = "readwrite"
)

// covers reports whether holding a allows what b allows.
func (a Access) covers(b Access) bool { return a == b || a == AccessReadWrite }

// Grant is one key permission: Access on Key alone (End empty), or on the
// range [Key, End). A prefix is the range [Key, clientv3.GetPrefixRangeEnd(Key)).
type Grant struct {
	// Access is what the grant allows: read, write or readwrite.
	Access Access `json:"access"`
	// Key is the key, or the range's start.
	Key string `json:"key"`
	// End is the range's exclusive end; empty for Key alone.
	End string `json:"range_end,omitempty"`
}

// prefixGrant grants access on every key under prefix.
func prefixGrant(a Access, prefix string) Grant {
	return Grant{Access: a, Key: prefix, End: clientv3.GetPrefixRangeEnd(prefix)}
}

// Prefix reports whether g is on every key under Key.
func (g Grant) Prefix() bool { return g.End != "" && g.End == clientv3.GetPrefixRangeEnd(g.Key) }

// end is the exclusive end of g's range.
func (g Grant) end() string {
	if g.End == "" {
		return g.Key + "\x00"
	}
	return g.End
}

// covers reports whether holding g allows everything n needs.
func (g Grant) covers(n Grant) bool {
	return g.Access.covers(n.Access) && g.Key <= n.Key && n.end() <= g.end()
}

// Where names g's keys: "/regiond/v1/routing/" (a prefix, ending in '/'),
// "the key K", or "the range [K, E)".
func (g Grant) Where() string {
	switch {
	case g.End == "":
		return "the key " + g.Key
	case g.Prefix():
		return g.Key
	}
	return fmt.Sprintf("the range [%s, %s)", g.Key, g.End)
}

// String is "readwrite on /regiond/v1/routing/".
func (g Grant) String() string { return string(g.Access) + " on " + g.Where() }

// Role is an etcd role of regiond: its name, what job it is for and its
// permissions.
type Role struct {
	// Name is the etcd role's name, with the role prefix.
	Name string `json:"name"`
	// Job says in words what the role is for.
	Job string `json:"job"`
	// Grants are the role's permissions.
	Grants []Grant `json:"grants"`
}

// holds reports whether r's grants allow every one of needs.
func (r Role) holds(needs []Grant) bool {
	for _, n := range needs {
		if !slices.ContainsFunc(r.Grants, func(g Grant) bool { return g.covers(n) }) {
			return false
		}
	}
	return true
}

// Roles are the least-privilege roles of one keyspace:
//
//	<p>operator      read routing/; readwrite routing/{pools,routes,policy,overrides}/ and
//	                 the key routing/epoch, audit/; read agents/; readwrite nodes/
//	                 (regionctl's writes, agent rm)
//	<p>viewer        read routing/, audit/, agents/, nodes/ (regionctl's reads, status)
//	<p>agent-<node>  read routing/; readwrite the keys agents/<node> and nodes/<node>
//	                 (one router node)
//	<p>origin-<pool> readwrite routing/health/<pool>/ (regionctl heartbeat of one pool)
//
// where <p> is the role prefix (DefaultRolePrefix).
type Roles struct {
	ks     keyspace.Space
	prefix string
}

// NewRoles returns the roles of ks, named with prefix (empty: DefaultRolePrefix).
func NewRoles(ks keyspace.Space, prefix string) Roles {
	if prefix == "" {
		prefix = DefaultRolePrefix
	}
	return Roles{ks: ks, prefix: prefix}
}

// Keyspace returns the key layout of the roles.
func (r Roles) Keyspace() keyspace.Space { return r.ks }

// Operator is the role of regionctl's writes. It may write what a guarded
// write touches (the config, the boosts, the epoch key, the audit trail)
// and read the rest of routing/. It may not write health markers, which
// are the origins' (an operator's user cannot forge a pool's health), nor
// agents/ (nor an agent's status, and so a fleet's convergence). It may
// delete a node record (regionctl agent rm: a node taken out of the fleet
// without a clean stop), which says nothing of a live agent.
func (r Roles) Operator() Role {
	grants := []Grant{prefixGrant(AccessRead, r.ks.Routing())}
	grants = append(grants, r.operatorWrites()...)
	return Role{Name: r.prefix + "operator", Job: "regionctl's writes (apply, pool, route, boost, rollback, agent rm) and reads",
		Grants: append(grants, prefixGrant(AccessRead, r.ks.AgentsPrefix()), prefixGrant(AccessReadWrite, r.ks.NodesPrefix()))}
}

// operatorWrites are the operator's write grants: the routing keys of the
// config and the boosts, the epoch key, the audit trail.
func (r Roles) operatorWrites() []Grant {
	out := make([]Grant, 0, 6)
	for _, k := range []routing.Kind{routing.KindPool, routing.KindRoute, routing.KindPolicy, routing.KindOverride} {
		out = append(out, prefixGrant(AccessReadWrite, r.ks.RoutingKey(k.String()+"/")))
	}
	return append(out, Grant{Access: AccessReadWrite, Key: r.ks.Epoch()}, prefixGrant(AccessReadWrite, r.ks.AuditPrefix()))
}

// Viewer is the role of regionctl's reads (get, diff, history, status,
// resolve, every --dry-run).
// Its four grants are the sections of the keyspace, not the whole root:
// a deployment whose root lies under this one's (/regiond and
// /regiond/v2) is not this viewer's to read.
func (r Roles) Viewer() Role {
	grants := make([]Grant, 0, 4)
	for _, s := range r.sections() {
		grants = append(grants, prefixGrant(AccessRead, s))
	}
	return Role{Name: r.prefix + "viewer", Job: "regionctl's reads (get, export, diff, history, status, resolve, --dry-run)",
		Grants: grants}
}

// sections are the prefixes of the keyspace's four sections: routing/,
// audit/, agents/, nodes/. Every key regiond reads or writes is in one.
func (r Roles) sections() []string {
	return []string{r.ks.Routing(), r.ks.AuditPrefix(), r.ks.AgentsPrefix(), r.ks.NodesPrefix()}
}

// Agent is the role of the agent of one router node: it reads the
// routing policy and writes its own status key and node record, nothing
// else. A role per node (rather than readwrite on agents/) keeps a
// compromised node from deleting or forging another node's status.
func (r Roles) Agent(node string) Role {
	return Role{Name: r.prefix + "agent-" + node, Job: "the regiond agent of node " + node,
		Grants: []Grant{prefixGrant(AccessRead, r.ks.Routing()), {Access: AccessReadWrite, Key: r.ks.Agent(node)},
			{Access: AccessReadWrite, Key: r.ks.Node(node)}}}
}

// Origin is the role of the origins of one pool: regionctl heartbeat
// POOL writes its health markers and nothing else.
func (r Roles) Origin(pool string) Role {
	return Role{Name: r.prefix + "origin-" + pool, Job: "regionctl heartbeat " + pool + " (the pool's origins)",
		Grants: []Grant{prefixGrant(AccessReadWrite, r.ks.RoutingKey(routing.HealthKey(pool, "")))}} // health/<pool>/
}

// CommitNeeds are the permissions of a guarded write (the Txn of Write):
// the operator's write grants.
func (r Roles) CommitNeeds() []Grant { return r.operatorWrites() }

// ReadNeed is the permission a read of the range [key, end) needs, stated
// as the section of the keyspace it lies in (routing/, audit/, agents/,
// nodes/, or the whole root).
func (r Roles) ReadNeed(key string) Grant { return prefixGrant(AccessRead, r.section(key)) }

// WriteNeed is the permission a write of key needs: readwrite on its
// pool's health prefix for a health marker, on the operator's grant that
// holds it for a key of the config, a boost, the epoch or the audit trail,
// on the key itself for any other key of routing/ (no role writes it),
// else on its section.
func (r Roles) WriteNeed(key string) Grant {
	if pool, ok := r.healthPool(key); ok {
		return r.Origin(pool).Grants[0]
	}
	need := Grant{Access: AccessReadWrite, Key: key}
	for _, g := range r.operatorWrites() {
		if g.covers(need) {
			return g
		}
	}
	if strings.HasPrefix(key, r.ks.Routing()) {
		return need // no role writes it: name the key, not a grant to widen
	}
	return prefixGrant(AccessReadWrite, r.section(key))
}

// healthPool returns the pool of a key under routing/health/<pool>/.
func (r Roles) healthPool(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, r.ks.RoutingKey("health/"))
	if !ok {
		return "", false
	}
	pool, _, ok := strings.Cut(rest, "/")
	return pool, ok && pool != ""
}

func (r Roles) section(key string) string {
	for _, p := range r.sections() {
		if strings.HasPrefix(key, p) {
			return p
		}
	}
	return r.ks.Root() + "/"
}

// Holding returns the names of the roles that allow every one of needs,
// least privileged first: the origin role of a pool whose health prefix
// a need names, the agent role of a node whose status key a need names,
// then the viewer and the operator.
func (r Roles) Holding(needs ...Grant) []string {
	if r.prefix == "" {
		return nil // the zero Roles: no keyspace
	}
	var cands []Role
	for _, n := range needs {
		if pool, ok := r.healthPool(n.Key); ok {
			cands = append(cands, r.Origin(pool))
		}
		if node, ok := strings.CutPrefix(n.Key, r.ks.AgentsPrefix()); ok && node != "" && n.End == "" {
			cands = append(cands, r.Agent(node))
		}
		if node, ok := strings.CutPrefix(n.Key, r.ks.NodesPrefix()); ok && node != "" && n.End == "" {
			cands = append(cands, r.Agent(node))
		}
	}
	cands = append(cands, r.Viewer(), r.Operator())
	var out []string
	for _, c := range cands {
		if c.holds(needs) && !slices.Contains(out, c.Name) {
			out = append(out, c.Name)
		}
	}
	return out
}

// Binding gives a user the role of one node (an agent) or pool (origins).
type Binding struct {
	// Name is the node or the pool.
	Name string `json:"name"`
	// User is the etcd user to hold the role; empty means a user named
	// as the role.
	User string `json:"user"`
}

// RoleSpec names the users of each job. An empty User of a Binding means
// the role's own name (regiond-agent-<node>, regiond-origin-<pool>).
type RoleSpec struct {
	// Operators and Viewers are the users of the operator and viewer
	// roles.
	Operators, Viewers []string
	// Agents bind a user to each agent node, Origins to each origin pool.
	Agents, Origins []Binding
}

// User is an etcd user and the regiond roles it is to hold.
type User struct {
	// Name is the etcd user's name.
	Name string `json:"name"`
	// Roles are the names of its roles, sorted.
	Roles []string `json:"roles"`
}

// AuthPlan is every role and user of a RoleSpec.
type AuthPlan struct {
	// Roles are the roles: operator and viewer first, then one per agent
	// node and origin pool.
	Roles []Role `json:"roles"`
	// Users are the users and their roles, sorted by name.
	Users []User `json:"users"`
	// root is the keyspace root, and sections its four sections: every
	// grant of the plan is in one. A role with no grant here, or a grant
	// in another deployment's keys, serves another prefix (Steps refuses
	// it); a user's role with no grant here is another deployment's
	// (Steps leaves it alone).
	root     string
	sections []string
	// rolePrefix starts the roles' names.
	rolePrefix string
}

// overlaps reports whether g reaches into any of the plan's sections
// (or the plan has none): a grant on all of "/", or of the root's parent,
// gives this deployment's keys too.
func (p *AuthPlan) overlaps(g Grant) bool {
	if p.root == "" {
		return true
	}
	for _, s := range p.sections {
		sEnd := clientv3.GetPrefixRangeEnd(s)
		if g.End == "\x00" { // every key from g.Key on
			if g.Key < sEnd {
				return true
			}
			continue
		}
		if g.Key < sEnd && g.end() > s {
			return true
		}
	}
	return false
}

// inside reports whether g lies in the plan's keyspace: in one of its
// sections, or the whole root (the viewer's grant before it had four). A
// grant elsewhere, under another root or one nested in this root
// (/regiond/v2 in /regiond), is another deployment's.
func (p *AuthPlan) inside(g Grant) bool {
	if p.root == "" {
		return true
	}
	if g.Key == p.root+"/" && g.Prefix() {
		return true
	}
	for _, s := range p.sections {
		if strings.HasPrefix(g.Key, s) && g.end() <= clientv3.GetPrefixRangeEnd(s) {
			return true
		}
	}
	return false
}

// Plan returns the roles (operator and viewer always, one per agent node
// and origin pool) and users of spec, or an error naming a bad name.
func (r Roles) Plan(spec RoleSpec) (*AuthPlan, error) {
	p := &AuthPlan{Roles: []Role{r.Operator(), r.Viewer()}, root: r.ks.Root(), sections: r.sections(), rolePrefix: r.prefix}
	users := map[string][]string{}
	add := func(user string, role Role) {
		if !slices.ContainsFunc(p.Roles, func(x Role) bool { return x.Name == role.Name }) {
			p.Roles = append(p.Roles, role)
		}
		if !slices.Contains(users[user], role.Name) {
			users[user] = append(users[user], role.Name)
		}
	}
	for _, u := range spec.Operators {
		add(u, r.Operator())
	}
	for _, u := range spec.Viewers {
		add(u, r.Viewer())
	}
	agentOf := map[string]string{}
	for _, b := range spec.Agents {
		if err := checkNode(b.Name); err != nil {
			return nil, err
		}
		role := r.Agent(b.Name)
		user := cmp.Or(b.User, role.Name)
		if prev, ok := agentOf[user]; ok && prev != b.Name {
			return nil, fmt.Errorf("user %s would be the agent of both %s and %s: give each node its own user "+
				"(one node's user must not write another node's status)", user, prev, b.Name)
		}
		agentOf[user] = b.Name
		add(user, role)
	}
	for _, b := range spec.Origins {
		if _, err := routing.ParseKey(routing.HealthKey(b.Name, "x")); err != nil {
			return nil, fmt.Errorf("origin pool %q: %w", b.Name, err)
		}
		role := r.Origin(b.Name)
		add(cmp.Or(b.User, role.Name), role)
	}
	for name, roles := range users {
		if err := checkUser(name); err != nil {
			return nil, err
		}
		sort.Strings(roles)
		p.Users = append(p.Users, User{Name: name, Roles: roles})
	}
	sort.Slice(p.Users, func(i, j int) bool { return p.Users[i].Name < p.Users[j].Name })
	return p, nil
}

func checkNode(node string) error {
	if node == "" || strings.ContainsAny(node, "/ \t\n") {
		return fmt.Errorf("agent node %q: want a non-empty name without '/' or spaces (the agent's --node)", node)
	}
	return nil
}

func checkUser(name string) error {
	switch {
	case name == "" || strings.ContainsAny(name, " \t\n:"):
		return fmt.Errorf("user %q: want a non-empty name without spaces or ':'", name)
	case name == "root":
		return fmt.Errorf("user root: etcd's root user has every permission; give regiond's jobs their own users")
	}
	return nil
}
