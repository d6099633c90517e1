package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// authOpts are the flags of auth roles and auth apply.
type authOpts struct {
	operators, viewers []string
	agents, origins    []string // NODE[=USER], POOL[=USER]
	passwords          bool
	dryRun             bool
	revokeExtra        bool
}

const authLong = `auth prints (roles) or makes (apply) the etcd roles and users that give
each of regiond's jobs what it needs under --prefix, and nothing more:

  regiond-operator       regionctl's writes: read <root>/routing/;
                         readwrite its pools/, routes/, policy/ and
                         overrides/, the key <root>/routing/epoch and
                         <root>/audit/; read <root>/agents/; readwrite
                         <root>/nodes/ (agent rm) (it cannot forge a
                         pool's health nor an agent's status)
  regiond-viewer         regionctl's reads (get, diff, history, status,
                         resolve, every --dry-run): read <root>/routing/,
                         <root>/audit/, <root>/agents/, <root>/nodes/
  regiond-agent-NODE     the agent of one router node: read <root>/routing/,
                         readwrite the keys <root>/agents/NODE and
                         <root>/nodes/NODE (its node record) alone
  regiond-origin-POOL    regionctl heartbeat POOL: readwrite
                         <root>/routing/health/POOL/ alone

No agent or origin can change the routing policy: a compromised router node
or origin host cannot rewrite residency, pools or routes. Each node has its
own role, so one node cannot delete or forge another node's status.

Users are created without a password (etcdctl user add --no-password): in
production they authenticate with client certificates. Run etcd with
--client-cert-auth --trusted-ca-file=ca.pem; give each user a certificate
whose common name (CN) is the user's name; etcd takes the CN of a verified
client certificate as the user of every request that carries no password
login. With --passwords, apply gives each user it adds a generated password,
printed once: what agents behind etcd's grpc-proxy log in with (etcd sees the
proxy's certificate, not theirs).

Role names start with --role-prefix (regiond-): give each deployment
(--prefix) in one etcd its own.
Managing roles and users needs etcd's root role (or authentication still
off). To turn authentication on: etcdctl user add root (--no-password
with client certificates: root's CN root) && etcdctl user grant-role
root root && etcdctl auth enable.`

func (a *app) authCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Least-privilege etcd roles and users for operators, viewers, agents and origins",
		Long:  authLong,
		Example: `  regionctl auth roles --operator alice --viewer grafana --agent edge-fra-1 --origin eu-central
  regionctl --user root auth apply --operator alice --agent edge-fra-1 --agent edge-waw-1 --dry-run`,
		RunE: groupRun,
	}
	cmd.AddCommand(a.authRolesCmd(), a.authApplyCmd())
	return cmd
}

func addAuthFlags(cmd *cobra.Command, o *authOpts) {
	f := cmd.Flags()
	f.StringSliceVar(&o.operators, "operator", nil, "user of role regiond-operator (repeatable, or comma-separated)")
	f.StringSliceVar(&o.viewers, "viewer", nil, "user of role regiond-viewer (repeatable)")
	f.StringSliceVar(&o.agents, "agent", nil, "NODE[=USER]: the agent of node NODE (its --node), as USER (default: the role's name, regiond-agent-NODE)")
	f.StringSliceVar(&o.origins, "origin", nil, "POOL[=USER]: an origin of pool POOL, as USER (default: regiond-origin-POOL); repeat for several users")
	f.BoolVar(&o.passwords, "passwords", false, "give new users a generated password (printed once) instead of none (client certificates); an existing user without one gets none, and is warned about")
}

func (a *app) authRolesCmd() *cobra.Command {
	var o authOpts
	cmd := &cobra.Command{
		Use:   "roles [--operator USER] [--viewer USER] [--agent NODE[=USER]] [--origin POOL[=USER]]",
		Short: "Print the roles and users as etcdctl commands; contacts no etcd",
		Long:  "roles prints, as the etcdctl commands that create them, every role and user of the flags. It\ncontacts no etcd and changes nothing: regionctl auth apply makes the same changes.\n\n" + authLong,
		Example: `  regionctl auth roles --operator alice --viewer grafana --agent edge-fra-1 --origin eu-central
  regionctl auth roles --prefix /staging/v1 --role-prefix regiond-staging- --agent edge-fra-1`,
		Args: exactArgs(0, "no arguments (roles and users are flags)"),
	}
	addAuthFlags(cmd, &o)
	cmd.RunE = a.verb(func(_ context.Context, _ *cobra.Command, _ []string) error {
		plan, err := a.authPlan(o)
		if err != nil {
			return err
		}
		steps, err := plan.Steps(nil, o.passwords, false)
		if err != nil {
			return err
		}
		return a.printAuth(authResult{Prefix: a.prefix, AuthPlan: plan, Steps: stepsOut(steps), DryRun: true, offline: true}, plan)
	})
	return cmd
}

func (a *app) authApplyCmd() *cobra.Command {
	var o authOpts
	cmd := &cobra.Command{
		Use:   "apply [--operator USER] [--viewer USER] [--agent NODE[=USER]] [--origin POOL[=USER]] [--dry-run]",
		Short: "Make the roles and users in etcd (idempotent); needs etcd's root role",
		Long: `apply reads the roles and users of the flags from etcd and makes what is
missing, through etcd's auth API; it prints each change as its etcdctl
command. A re-run changes nothing. A role or user of the flags that holds
more than its job (another permission, another role) is refused, nothing
changed, unless --revoke-extra revokes the extras. Users that exist keep
their password. --dry-run prints the changes and makes none.

` + authLong,
		Example: `  regionctl --user root auth apply --operator alice --viewer grafana --agent edge-fra-1 --origin eu-central
  regionctl --user root auth apply --agent edge-fra-1 --dry-run
  # client certificates (users without passwords): root's certificate, no --user
  regionctl --cacert ca.pem --cert root.pem --key root-key.pem auth apply --agent edge-fra-1`,
		Args: exactArgs(0, "no arguments (roles and users are flags)"),
	}
	addAuthFlags(cmd, &o)
	f := cmd.Flags()
	f.BoolVar(&o.dryRun, "dry-run", false, "print the changes as etcdctl commands and make none")
	f.BoolVar(&o.revokeExtra, "revoke-extra", false, "revoke permissions and roles the roles and users hold beyond their job")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		return a.runAuthApply(ctx, o)
	})
	return cmd
}

func (a *app) runAuthApply(ctx context.Context, o authOpts) error {
	plan, err := a.authPlan(o)
	if err != nil {
		return err
	}
	a.probe = func(keyspace.Space) string { return "" } // root need not read regiond's keys
	st, err := a.store(ctx)
	if err != nil {
		if o.dryRun {
			return err
		}
		return store.NothingWritten(err) // etcd not reached: no user or role changed
	}
	cur, err := st.ReadAuth(ctx, plan)
	if err != nil {
		if o.dryRun {
			return err
		}
		return store.NothingWritten(err) // read before any change: none made
	}
	for _, n := range plan.OtherDeployments(cur) {
		fmt.Fprintf(a.stderr, "regionctl: note: %s\n", n)
	}
	if o.passwords {
		if err := a.warnNoPasswordUsers(ctx, st, plan, cur); err != nil {
			return err
		}
	}
	steps, err := plan.Steps(cur, o.passwords, o.revokeExtra)
	var extra *store.ExtraGrantsError
	if errors.As(err, &extra) {
		return fmt.Errorf("%w (revoke them with --revoke-extra, or give the job another user)", err)
	}
	if err != nil {
		return err
	}
	res := authResult{Prefix: a.prefix, AuthPlan: plan, Steps: stepsOut(steps), DryRun: o.dryRun}
	if !o.dryRun && len(steps) > 0 {
		var meanwhile []store.AuthStep
		res.Passwords, meanwhile, err = st.ApplyAuth(ctx, steps)
		for _, m := range meanwhile {
			res.Meanwhile = append(res.Meanwhile, m.Etcdctl())
		}
		if err != nil {
			// Users added before the failure have passwords nobody has
			// seen, and a re-run skips existing users: shown now or never.
			// With -o json/yaml, as the result (applied false) a JSON
			// reader of stdout can parse.
			if a.output == "table" {
				printPasswords(a.stdout, res.Passwords)
			} else if perr := a.printAuth(res, plan); perr != nil {
				return errors.Join(err, perr)
			}
			return err
		}
		res.Applied = true
	}
	return a.printAuth(res, plan)
}

// maxPasswordChecks bounds the users warnNoPasswordUsers checks.
const maxPasswordChecks = 16

// warnNoPasswordUsers warns, with --passwords, of users of the plan that
// exist without a password (made for client certificates): etcd gives
// such a user no password, so apply prints none for it, and a login with
// one stays refused (the auth review: the docs' grpc-proxy step, after the
// certificate recipe, said only "nothing to change"). A warning, not a
// refusal: one apply may name certificate users meant to stay so beside
// new users for password logins (the second read). An error is that of
// the check, before any change.
func (a *app) warnNoPasswordUsers(ctx context.Context, st *store.Store, plan *store.AuthPlan, cur *store.AuthState) error {
	var existing []string
	for _, u := range plan.Users {
		if _, ok := cur.Users[u.Name]; ok {
			existing = append(existing, u.Name)
		}
	}
	// Each check is a login etcd refuses (bcrypt's cost, and an info line
	// in etcd's log, for a user with a password): a bulk re-run of
	// thousands of agents checks the first maxPasswordChecks.
	if len(existing) > maxPasswordChecks {
		fmt.Fprintf(a.stderr, "regionctl: note: --passwords: %d of the %d users that exist were not checked for a password (a user made without one, for client certificates, gets none: etcd refuses its password logins; etcdctl user delete it, then run this again)\n",
			len(existing)-maxPasswordChecks, len(existing))
		existing = existing[:maxPasswordChecks]
	}
	np, err := st.NoPasswordUsers(ctx, existing)
	if err != nil || len(np) == 0 {
		return store.NothingWritten(err)
	}
	var del []string
	for _, u := range np {
		del = append(del, "etcdctl user delete "+store.ShellQuote(u))
	}
	fmt.Fprintf(a.stderr, "regionctl: warning: --passwords: user(s) %s exist without a password (made for client certificates) and get none: etcd gives such a user no password (etcdctl user passwd does not either); "+
		"for one to log in with a password (behind etcd's grpc-proxy), delete it (%s; its certificate and its role's grant go with it) and run this again, which adds it with a password and grants its role back (its certificate logs it in again then too)\n",
		strings.Join(np, ", "), strings.Join(del, "; "))
	return nil
}

// authPlan builds the plan of the flags.
func (a *app) authPlan(o authOpts) (*store.AuthPlan, error) {
	ks, err := keyspace.New(a.prefix)
	if err != nil {
		return nil, usageError{err}
	}
	spec := store.RoleSpec{Operators: o.operators, Viewers: o.viewers}
	if spec.Agents, err = bindings("--agent", o.agents); err != nil {
		return nil, err
	}
	if spec.Origins, err = bindings("--origin", o.origins); err != nil {
		return nil, err
	}
	for _, b := range spec.Origins {
		if !routing.ValidPoolID(b.Name) {
			return nil, usagef("--origin %q: want a pool id (lower-case letters, digits, '.', '_', '-'), e.g. eu-central", b.Name)
		}
	}
	plan, err := store.NewRoles(ks, a.rolePrefix).Plan(spec)
	if err != nil {
		return nil, usageError{err}
	}
	return plan, nil
}

// bindings parses NAME[=USER] values of flag.
func bindings(flag string, vals []string) ([]store.Binding, error) {
	out := make([]store.Binding, 0, len(vals))
	for _, v := range vals {
		name, user, hasUser := strings.Cut(v, "=")
		if name == "" || hasUser && user == "" {
			return nil, usagef("%s %q: want NAME or NAME=USER", flag, v)
		}
		out = append(out, store.Binding{Name: name, User: user})
	}
	return out, nil
}

// authStep is an AuthStep with its etcdctl command, for -o json.
type authStep struct {
	store.AuthStep
	Etcdctl string `json:"etcdctl"`
}

func stepsOut(steps []store.AuthStep) []authStep {
	out := make([]authStep, len(steps))
	for i, s := range steps {
		out[i] = authStep{AuthStep: s, Etcdctl: s.Etcdctl()}
	}
	return out
}

// authResult is the output of auth roles and auth apply.
type authResult struct {
	Prefix string `json:"prefix"`
	*store.AuthPlan
	// Steps are the changes: all of them for roles, what etcd lacked for apply.
	Steps   []authStep `json:"steps"`
	DryRun  bool       `json:"dry_run"`
	Applied bool       `json:"applied"`
	// Passwords are the generated passwords of the users apply added.
	Passwords map[string]string `json:"passwords,omitempty"`
	// Meanwhile are the steps (as etcdctl commands) whose role or user
	// another run made between this one's read and its change: a user's
	// generated password was shown by that run, not this one.
	Meanwhile []string `json:"made_meanwhile,omitempty"`
	// offline: auth roles, which contacts no etcd (every step, not what
	// etcd lacks).
	offline bool
}

func (a *app) printAuth(res authResult, plan *store.AuthPlan) error {
	return a.printer().print(res, func(w io.Writer) { printAuthTable(w, res, plan) })
}

func printAuthTable(w io.Writer, res authResult, plan *store.AuthPlan) {
	jobs := map[string]string{}
	for _, r := range plan.Roles {
		jobs[r.Name] = r.Job
	}
	if len(res.Steps) > 0 {
		fmt.Fprintf(w, "# etcd roles and users of regiond under %s, as etcdctl commands (run as etcd's root user)\n", res.Prefix)
	}
	usersShown := false
	for _, s := range res.Steps {
		switch {
		case s.Op == store.OpRoleAdd:
			fmt.Fprintf(w, "\n# %s: %s\n", s.Role, jobs[s.Role])
		case strings.HasPrefix(s.Op, "user ") && !usersShown:
			fmt.Fprintln(w, "\n# users")
			usersShown = true
		}
		fmt.Fprintln(w, s.Etcdctl)
	}
	if len(res.Steps) > 0 {
		fmt.Fprintln(w)
	}
	switch {
	case len(res.Steps) == 0:
		fmt.Fprintf(w, "# nothing to change: every role and user holds what its job needs under %s, and nothing more\n", res.Prefix)
	case res.offline:
		fmt.Fprintf(w, "# %d command(s); etcd was not contacted (regionctl --user root auth apply, with the same flags, makes what etcd lacks of them)\n", len(res.Steps))
	case res.Applied:
		fmt.Fprintf(w, "# applied %d change(s)\n", len(res.Steps))
		if len(res.Meanwhile) > 0 {
			fmt.Fprintf(w, "# of which %d were made meanwhile by another run, not this one (a password it generated was shown there): %s\n",
				len(res.Meanwhile), strings.Join(res.Meanwhile, "; "))
		}
	case res.DryRun:
		fmt.Fprintf(w, "# dry run: %d change(s); nothing changed\n", len(res.Steps))
	}
	if len(plan.Users) == 0 {
		fmt.Fprintln(w, "# no users: add --operator USER, --viewer USER, --agent NODE or --origin POOL")
	}
	printPasswords(w, res.Passwords)
}

// printPasswords prints the generated passwords, by user.
func printPasswords(w io.Writer, passwords map[string]string) {
	users := make([]string, 0, len(passwords))
	for u := range passwords {
		users = append(users, u)
	}
	sort.Strings(users)
	for _, u := range users {
		fmt.Fprintf(w, "# password of user %s: %s (shown once)\n", u, passwords[u])
	}
}
