package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The operations of an AuthStep, named as etcdctl names them.
const (
	OpRoleAdd          = "role add"
	OpRoleGrant        = "role grant-permission"
	OpRoleRevoke       = "role revoke-permission"
	OpUserAdd          = "user add"
	OpUserGrantRole    = "user grant-role"
	OpUserRevokeRole   = "user revoke-role"
	generatedPwEntropy = 18 // bytes of a generated password: 24 base64 characters
)

// AuthStep is one change of etcd's roles and users.
type AuthStep struct {
	// Op is the change, one of the Op constants (OpRoleAdd…), named as
	// etcdctl's command.
	Op string `json:"op"`
	// Role is the role added, granted or revoked a permission, or granted
	// to or revoked from User; empty for a user add.
	Role string `json:"role,omitempty"`
	// User is the user added, or granted or revoked Role; empty for the
	// role steps.
	User string `json:"user,omitempty"`
	// Grant is the permission of a role grant or revoke; nil otherwise.
	Grant *Grant `json:"grant,omitempty"`
	// Password, on a user add, gives the user a generated password;
	// without it the user has none (--no-password): it authenticates with
	// a client certificate whose common name is the user's name.
	Password bool `json:"password,omitempty"`
}

// Etcdctl returns the etcdctl command that makes the same change.
func (s AuthStep) Etcdctl() string {
	q := ShellQuote
	switch s.Op {
	case OpRoleAdd:
		return "etcdctl role add " + q(s.Role)
	case OpRoleGrant:
		g := *s.Grant
		if g.Prefix() {
			return fmt.Sprintf("etcdctl role grant-permission %s --prefix=true %s %s", q(s.Role), g.Access, q(g.Key))
		}
		return strings.TrimSpace(fmt.Sprintf("etcdctl role grant-permission %s %s %s %s", q(s.Role), g.Access, q(g.Key), q(g.End)))
	case OpRoleRevoke:
		g := *s.Grant
		if g.Prefix() {
			return fmt.Sprintf("etcdctl role revoke-permission %s --prefix=true %s", q(s.Role), q(g.Key))
		}
		return strings.TrimSpace(fmt.Sprintf("etcdctl role revoke-permission %s %s %s", q(s.Role), q(g.Key), q(g.End)))
	case OpUserAdd:
		if s.Password {
			return "etcdctl user add " + q(s.User) + " # prompts for the password"
		}
		return "etcdctl user add " + q(s.User) + " --no-password"
	case OpUserGrantRole, OpUserRevokeRole:
		return fmt.Sprintf("etcdctl %s %s %s", s.Op, q(s.User), q(s.Role))
	}
	return "# unknown step " + s.Op
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// ShellQuote quotes s for a POSIX shell when it needs it ("" stays ""),
// for the commands regionctl prints.
func ShellQuote(s string) string {
	if s == "" || shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// AuthState is what etcd holds of a plan's roles and users.
type AuthState struct {
	// Roles holds the grants of each role of the plan that exists.
	Roles map[string][]Grant
	// Users holds the roles of each user that exists.
	Users map[string][]string
	// Others holds the grants of each role the users hold outside the
	// plan (that exists).
	Others map[string][]Grant
}

// ExtraGrantsError means a role or user of the plan holds more than the
// plan gives it: a permission beyond the role's job, or another role.
// Nothing was changed.
type ExtraGrantsError struct {
	// Extras describe each, e.g. "role regiond-viewer also holds readwrite on /x/".
	Extras []string
}

// Error lists the extras.
func (e *ExtraGrantsError) Error() string {
	return "refused, nothing changed: " + strings.Join(e.Extras, "; ")
}

// Steps returns the changes that make cur hold the plan (nil cur: an
// empty etcd), in order: roles, their grants, users, their roles. New
// users get a generated password when passwords is set. A grant or role
// that cur holds beyond the plan is an *ExtraGrantsError, unless
// revokeExtra is set: then it is revoked.
func (p *AuthPlan) Steps(cur *AuthState, passwords, revokeExtra bool) ([]AuthStep, error) {
	if cur == nil {
		cur = &AuthState{}
	}
	var steps []AuthStep
	var extras, foreign []string
	for _, r := range p.Roles {
		have, ok := cur.Roles[r.Name]
		if !ok {
			steps = append(steps, AuthStep{Op: OpRoleAdd, Role: r.Name})
		}
		for _, g := range r.Grants {
			if !slices.Contains(have, g) {
				steps = append(steps, AuthStep{Op: OpRoleGrant, Role: r.Name, Grant: &g})
			}
		}
		// A role none of whose grants reaches into this deployment's
		// sections is another deployment's (one etcd, two deployments
		// sharing role names, or one nested in this one's root): every
		// grant of it is foreign. In a role of this deployment, a grant
		// elsewhere under the root (the locks/ of an earlier layout) is
		// an extra; one in another deployment's keys (another root, or
		// the sections of a root nested in this one) is foreign.
		// Revoking a foreign grant would re-point that deployment's users
		// at this one.
		otherRole := p.othersOnly(have)
		for _, h := range have {
			i := slices.IndexFunc(r.Grants, func(g Grant) bool { return g.Key == h.Key && g.End == h.End })
			switch {
			case otherRole || !p.inside(h) && (p.nestedSection(h) != "" || !p.overlaps(h) && !p.underRoot(h)):
				foreign = append(foreign, fmt.Sprintf("role %s holds %s, outside %s's routing/, audit/, agents/, nodes/", r.Name, h, p.root))
			case i < 0:
				extras = append(extras, fmt.Sprintf("role %s also holds %s", r.Name, h))
				steps = append(steps, AuthStep{Op: OpRoleRevoke, Role: r.Name, Grant: &h})
			case !r.Grants[i].Access.covers(h.Access):
				// More access than the job's on its range (readwrite
				// where it needs read): the grant of the plan replaces
				// it. Less (read where it needs readwrite) is no extra:
				// that grant, planned above, just makes what is missing.
				extras = append(extras, fmt.Sprintf("role %s holds %s where its job needs %s", r.Name, h, r.Grants[i].Access))
			}
		}
	}
	if len(foreign) > 0 {
		return nil, fmt.Errorf("refused, nothing changed: %s: these roles serve another prefix; give this one roles of its own with %s",
			strings.Join(foreign, "; "), p.rolePrefixHint())
	}
	for _, u := range p.Users {
		have, ok := cur.Users[u.Name]
		if !ok {
			steps = append(steps, AuthStep{Op: OpUserAdd, User: u.Name, Password: passwords})
		}
		for _, r := range u.Roles {
			if !slices.Contains(have, r) {
				steps = append(steps, AuthStep{Op: OpUserGrantRole, User: u.Name, Role: r})
			}
		}
		for _, r := range have {
			if !slices.Contains(u.Roles, r) && !p.othersOnly(cur.Others[r]) {
				extras = append(extras, fmt.Sprintf("user %s also holds role %s", u.Name, r))
				steps = append(steps, AuthStep{Op: OpUserRevokeRole, User: u.Name, Role: r})
			}
		}
	}
	if len(extras) > 0 && !revokeExtra {
		return nil, &ExtraGrantsError{Extras: extras}
	}
	return steps, nil
}

// underRoot reports whether g lies under the plan's root (<root>/).
func (p *AuthPlan) underRoot(g Grant) bool {
	return p.root == "" || strings.HasPrefix(g.Key, p.root+"/") && g.end() <= clientv3.GetPrefixRangeEnd(p.root+"/")
}

// nestedSection returns the section of a deployment nested in the plan's
// root that g lies in ("/regiond/v1/x/routing/" for a grant under it), or
// "" if none: a root under this one's with a section of its own is
// another deployment's, whatever this one's roles hold.
func (p *AuthPlan) nestedSection(g Grant) string {
	if p.root == "" {
		return ""
	}
	rest, ok := strings.CutPrefix(g.Key, p.root+"/")
	if !ok {
		return ""
	}
	for _, s := range []string{"/routing/", "/audit/", "/agents/", "/nodes/"} {
		if i := strings.Index(rest, s); i > 0 {
			sec := p.root + "/" + rest[:i] + s
			if g.end() <= clientv3.GetPrefixRangeEnd(sec) {
				return sec
			}
		}
	}
	return ""
}

// rolePrefixHint suggests a --role-prefix of the plan's root: the default
// prefix and the root's segments ("regiond-staging-v1-" for /staging/v1,
// "regiond-v1-" for /regiond/v1), unless that is the prefix in use.
func (p *AuthPlan) rolePrefixHint() string {
	segs := strings.Split(strings.Trim(p.root, "/"), "/")
	if len(segs) > 1 && segs[0]+"-" == DefaultRolePrefix {
		segs = segs[1:]
	}
	hint := DefaultRolePrefix + strings.Join(segs, "-") + "-"
	if hint == p.rolePrefix {
		return "another --role-prefix"
	}
	return "--role-prefix (e.g. --role-prefix " + hint + ")"
}

// othersOnly reports whether grants, a user's role outside the plan, are
// another deployment's alone: some, and none reaching into the plan's
// sections (a role on all of "/" is an extra here, not another's: the
// diff review).
// Such a role is left to that deployment (one user, one certificate's CN,
// serving two), not revoked as an extra.
func (p *AuthPlan) othersOnly(grants []Grant) bool {
	return len(grants) > 0 && !slices.ContainsFunc(grants, p.overlaps)
}

// OtherDeployments says, for each user of the plan, the roles it holds
// that Steps leaves alone as another deployment's (cur from ReadAuth).
func (p *AuthPlan) OtherDeployments(cur *AuthState) []string {
	var out []string
	for _, u := range p.Users {
		for _, r := range cur.Users[u.Name] {
			if !slices.Contains(u.Roles, r) && p.othersOnly(cur.Others[r]) {
				out = append(out, fmt.Sprintf("user %s also holds role %s, of another deployment (no grant in %s's sections): left as it is", u.Name, r, p.root))
			}
		}
	}
	return out
}

// ReadAuth reads the roles and users of plan as etcd holds them. It needs
// etcd's root role once authentication is on.
func (s *Store) ReadAuth(ctx context.Context, plan *AuthPlan) (*AuthState, error) {
	st := &AuthState{Roles: map[string][]Grant{}, Users: map[string][]string{}}
	for _, r := range plan.Roles {
		grants, err := s.roleGrants(ctx, r.Name)
		if err != nil {
			return nil, err
		}
		if grants != nil {
			st.Roles[r.Name] = grants
		}
	}
	for _, u := range plan.Users {
		rctx, cancel := s.reqCtx(ctx)
		resp, err := s.cli.UserGet(rctx, u.Name)
		cancel()
		if errors.Is(err, rpctypes.ErrUserNotFound) {
			continue
		}
		if err != nil {
			return nil, s.authAdminErr("read user "+u.Name, err)
		}
		roles := append([]string{}, resp.Roles...)
		sort.Strings(roles)
		st.Users[u.Name] = roles
	}
	// The users' other roles: another deployment's are left alone.
	st.Others = map[string][]Grant{}
	for _, u := range plan.Users {
		for _, r := range st.Users[u.Name] {
			if _, done := st.Others[r]; done || slices.ContainsFunc(plan.Roles, func(x Role) bool { return x.Name == r }) {
				continue
			}
			grants, err := s.roleGrants(ctx, r)
			if err != nil {
				return nil, err
			}
			st.Others[r] = grants
		}
	}
	return st, nil
}

// roleGrants reads the grants of role: nil if it does not exist, empty if
// it has none.
func (s *Store) roleGrants(ctx context.Context, role string) ([]Grant, error) {
	rctx, cancel := s.reqCtx(ctx)
	resp, err := s.cli.RoleGet(rctx, role)
	cancel()
	if errors.Is(err, rpctypes.ErrRoleNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, s.authAdminErr("read role "+role, err)
	}
	grants := make([]Grant, 0, len(resp.Perm))
	for _, p := range resp.Perm {
		grants = append(grants, Grant{Access: accessOf(p.PermType), Key: string(p.Key), End: string(p.RangeEnd)})
	}
	return grants, nil
}

func accessOf(t authpb.Permission_Type) Access {
	switch t {
	case authpb.READ:
		return AccessRead
	case authpb.WRITE:
		return AccessWrite
	}
	return AccessReadWrite
}

func permType(a Access) clientv3.PermissionType {
	switch a {
	case AccessRead:
		return clientv3.PermissionType(clientv3.PermRead)
	case AccessWrite:
		return clientv3.PermissionType(clientv3.PermWrite)
	}
	return clientv3.PermissionType(clientv3.PermReadWrite)
}

// ApplyAuth makes each change of steps in order and returns the
// generated password of each user it added with one. A step whose object
// appeared meanwhile (another apply) counts as done, and is returned in
// meanwhile: a user another run added got its password there. On a
// failure it says which step failed and how many were made: a re-run
// finishes the job.
func (s *Store) ApplyAuth(ctx context.Context, steps []AuthStep) (passwords map[string]string, meanwhile []AuthStep, err error) {
	passwords = map[string]string{}
	for i, st := range steps {
		pw, existed, err := s.authStep(ctx, st)
		if existed {
			meanwhile = append(meanwhile, st)
		}
		if err != nil {
			return passwords, meanwhile, fmt.Errorf("step %d of %d (%s) failed; the %d before it were made, re-run to finish: %w",
				i+1, len(steps), st.Etcdctl(), i, err)
		}
		if pw != "" {
			passwords[st.User] = pw
		}
	}
	return passwords, meanwhile, nil
}

// authStep makes one change; it returns the password of a user it added
// with one, and whether the role or user it adds existed already (made
// meanwhile by another run).
func (s *Store) authStep(ctx context.Context, st AuthStep) (pw string, existed bool, err error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	switch st.Op {
	case OpRoleAdd:
		_, err = s.cli.RoleAdd(rctx, st.Role)
		if errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
			err, existed = nil, true
		}
	case OpRoleGrant:
		_, err = s.cli.RoleGrantPermission(rctx, st.Role, st.Grant.Key, st.Grant.End, permType(st.Grant.Access))
	case OpRoleRevoke:
		_, err = s.cli.RoleRevokePermission(rctx, st.Role, st.Grant.Key, st.Grant.End)
	case OpUserAdd:
		opts := &clientv3.UserAddOptions{NoPassword: !st.Password}
		if st.Password {
			pw = newPassword()
		}
		_, err = s.cli.UserAddWithOptions(rctx, st.User, pw, opts)
		if errors.Is(err, rpctypes.ErrUserAlreadyExist) {
			err, pw, existed = nil, "", true // added meanwhile, with its own password
		}
	case OpUserGrantRole:
		_, err = s.cli.UserGrantRole(rctx, st.User, st.Role)
	case OpUserRevokeRole:
		_, err = s.cli.UserRevokeRole(rctx, st.User, st.Role)
	default:
		err = fmt.Errorf("unknown step %q", st.Op)
	}
	if err != nil {
		return "", existed, s.authAdminErr(st.Op, err)
	}
	return pw, existed, nil
}

// NoPasswordUsers returns those of users that etcd knows as users without
// a password (made for client certificates: etcdctl user add
// --no-password, regionctl auth apply without --passwords), which etcd
// can give no password: a login with one is refused, even after etcdctl
// user passwd. It asks etcd to log each in with a password nobody has,
// which etcd refuses saying which it is (for a user with a password, at
// bcrypt's cost, logging "invalid password" at info level); with
// authentication still off nothing can tell, and none is returned.
func (s *Store) NoPasswordUsers(ctx context.Context, users []string) ([]string, error) {
	var out []string
	for _, u := range users {
		rctx, cancel := s.reqCtx(ctx)
		_, err := s.cli.Authenticate(rctx, u, "x-"+newPassword())
		cancel()
		switch {
		case err == nil, errors.Is(err, rpctypes.ErrAuthFailed):
		case NoPasswordUser(err):
			out = append(out, u)
		case errors.Is(err, rpctypes.ErrAuthNotEnabled):
			return nil, nil
		default:
			return nil, s.rpcErr("check whether user "+u+" has a password", err)
		}
	}
	return out, nil
}

// authAdminErr wraps an error of the auth API, saying that managing roles
// and users needs the root role when etcd refused it.
func (s *Store) authAdminErr(what string, err error) error {
	if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserEmpty) {
		return fmt.Errorf("%s: %w (managing etcd's roles and users needs etcd's root role: run as root, --user root with its password, or, with client certificates, root's certificate and no --user: --cert root.pem --key root-key.pem)", what, err)
	}
	return s.rpcErr(what, err)
}

func newPassword() string {
	b := make([]byte, generatedPwEntropy)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}
