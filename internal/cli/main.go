// Package cli is regionctl, the operator CLI of regiond: one file per verb,
// each a small run function behind a cobra command, output through the
// printer, exit codes from the error kinds of package store.
//
//	os.Exit(cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/term"
	"google.golang.org/grpc"

	"github.com/regiond/regiond/internal/cmddocs"
	"github.com/regiond/regiond/internal/didyoumean"
	"github.com/regiond/regiond/internal/journalfmt"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/store"
)

// Exit codes (docs/regionctl.md).
const (
	ExitOK           = 0
	ExitRefused      = 1 // validation refused the change, or another failure; nothing written
	ExitUsage        = 2 // bad flags or arguments
	ExitConflict     = 3 // the state changed concurrently; nothing written
	ExitUnreachable  = 4 // etcd did not answer; nothing written unless the message says "outcome unknown"
	ExitNotConverged = 5 // written, but agents lag or the wait failed (--wait-converged); status --max-lag
	ExitDiffers      = 6 // diff --exit-code: apply would change something (and would not be refused)
)

// Main runs regionctl with args (without the program name) and returns the
// exit code. Environment variables REGIONCTL_<FLAG> set flags not given.
// A REGIONCTL_ variable that is none of these is warned about (a typo
// would otherwise be ignored, and a write go to the defaults).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runIn(ctx, args, stdout, stderr, os.Getenv, os.Environ)
}

// app is one invocation: global flags, output and the lazily dialed store.
type app struct {
	stdout, stderr io.Writer
	errStderr      io.Writer // stderr for the error a run ends with (the journal's err priority)
	stdin          io.Reader // what -f - reads
	getenv         func(string) string
	environ        func() []string // NAME=value, for the check of REGIONCTL_ names; nil: none
	args           []string
	log            *slog.Logger
	// logOpts are a.log's handler options, fitted to stderr.
	logOpts func(slog.Level) *slog.HandlerOptions
	ran     bool // a verb started running: later errors are not usage errors
	// fromEnv are the verb's own flags set from REGIONCTL_<FLAG>, as
	// NAME=value: the audit command names them (a --prune from the
	// environment prunes as much as a typed one).
	fromEnv []string
	cmd     *cobra.Command
	root    *cobra.Command // for the usage error's --help hint

	endpoints      []string
	prefix         string
	cacert, cert   string
	tlsKey         string
	user           string
	output         string
	dialTimeout    time.Duration
	commandTimeout time.Duration
	verbose        bool
	rolePrefix     string
	// envFlags names the environment variable that set each flag set
	// from one, by flag name.
	envFlags map[string]string

	// probe is the key read when dialing and probeNeeds what the verb's
	// job needs, named if etcd refuses the read (nil: read on the key's
	// section). Verbs set them before the first a.store.
	probe      func(ks keyspace.Space) string
	probeNeeds func(r store.Roles) []store.Grant

	cli *clientv3.Client
	st  *store.Store
	// asked is the password typed at askPassword's prompt.
	asked string
	// attemptWarnings are the warnings of a write's current build
	// attempt (warnAttempt).
	attemptWarnings []string
	// attemptNotes are the notes of a write's current build attempt,
	// printed after its result (orIgnoreAbsent's).
	attemptNotes []string
}

// run is Main with the environment read by getenv, and no check of the
// REGIONCTL_ names it holds.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return runIn(ctx, args, stdout, stderr, getenv, nil)
}

// runIn is run whose environ lists the environment's variables (NAME=value)
// for the check of REGIONCTL_ names.
func runIn(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string, environ func() []string) int {
	raw := stderr // the journal's writer, if it is: termSafe wraps stderr below
	logOpts := func(l slog.Level) *slog.HandlerOptions {
		return journalfmt.Options(raw, &slog.HandlerOptions{Level: l})
	}
	errStderr := termSafe{journalfmt.Errors(stderr)}
	stdout, stderr = termSafe{stdout}, termSafe{stderr}
	a := &app{stdout: stdout, stderr: stderr, errStderr: errStderr, stdin: os.Stdin, getenv: getenv, environ: environ, args: args, logOpts: logOpts}
	if r, ok := ctx.Value(stdinHook{}).(io.Reader); ok {
		a.stdin = r
	}
	a.log = slog.New(slog.NewTextHandler(stderr, logOpts(slog.LevelWarn)))
	defer a.close()
	root := a.rootCmd()
	a.root = root
	root.SetFlagErrorFunc(flagError)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return a.exitCode(unknownVerb(root, root.ExecuteContext(ctx)))
}

// askPassword asks for the password of the etcd user on the terminal
// that is standard input, without echo, as etcdctl does; it is a usage
// error without one (a script: REGIONCTL_PASSWORD, or --user
// user:password).
func (a *app) askPassword(user string) (string, error) {
	f, ok := a.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return "", usageError{fmt.Errorf("--user %s: no password: set REGIONCTL_PASSWORD, or give --user %s:PASSWORD (on a terminal, regionctl asks for it)", user, user)}
	}
	fmt.Fprintf(a.stderr, "Password of etcd user %s: ", user)
	b, err := term.ReadPassword(int(f.Fd()))
	fmt.Fprintln(a.stderr)
	if err != nil {
		return "", fmt.Errorf("--user %s: read the password from the terminal: %w", user, err)
	}
	if len(b) == 0 {
		return "", usageError{fmt.Errorf("--user %s: empty password", user)}
	}
	return string(b), nil
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "regionctl",
		Short: "Operate regiond routing policy in etcd, safely",
		Long: `regionctl changes the routing policy that every regiond agent serves.
Every write reads the whole state, validates the whole proposed state, and
commits it in one transaction guarded by the epoch, with an audit record.

Exit codes: 0 ok, 1 refused (validation, a residency class shrunk without
--allow-residency-change, an epoch key reset by hand, other errors; nothing
written), 2 usage, 3 conflict (changed concurrently; re-run
or use --retry), 4 etcd unreachable (nothing written, unless the message says
the outcome is unknown: then check regionctl history first), 5 written but not
converged, or no live agent confirmed it (the write is committed: do not
re-run it; also status --max-lag with an agent lagging, serving refused values,
of another history or with its snapshot files not written, or with no live
agent), 6 diff --exit-code found
differences.
Every flag but --allow-residency-change can also be set as REGIONCTL_<FLAG>
(REGIONCTL_ENDPOINTS, REGIONCTL_PREFIX, …; another REGIONCTL_ variable is
warned about, as a typo); the password of --user is read from REGIONCTL_PASSWORD
(or asked on the terminal; --user NAME:PASSWORD works too, as in etcdctl,
but shows the password to anyone who lists processes on this machine).
With etcd authentication on, each job has its least-privilege role (see
regionctl auth roles): a refused request names the key, the permission it
needed and the role that holds it.`,
		Example: `  regionctl get
  regionctl pool drain eu-central --reason "kernel upgrade" --wait-converged
  regionctl apply -f fleet.yaml --dry-run`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.applyEnv(cmd) },
	}
	a.globalFlags(root.PersistentFlags())
	root.AddCommand(a.getCmd(), a.exportCmd(), a.validateCmd(), a.diffCmd(), a.applyCmd(),
		a.poolCmd(), a.routeCmd(), a.boostCmd(), a.historyCmd(), a.rollbackCmd(),
		a.statusCmd(), a.agentCmd(), a.resolveCmd(), a.heartbeatCmd(), a.authCmd(), a.versionCmd())
	cmddocs.Register(root)
	return root
}

func (a *app) globalFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&a.endpoints, "endpoints", []string{"127.0.0.1:2379"}, "etcd endpoints, comma-separated")
	f.StringVar(&a.prefix, "prefix", keyspace.DefaultRoot, "root prefix of regiond's keys")
	f.StringVar(&a.cacert, "cacert", "", "CA bundle (PEM) to verify etcd's certificate")
	f.StringVar(&a.cert, "cert", "", "client certificate (PEM)")
	f.StringVar(&a.tlsKey, "key", "", "client certificate key (PEM)")
	f.StringVar(&a.user, "user", "", "etcd user (password from REGIONCTL_PASSWORD, else asked on the terminal; user:password shows it in the process list)")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table, json or yaml")
	f.DurationVar(&a.dialTimeout, "dial-timeout", store.DefaultDialTimeout, "give up reaching etcd after this long (exit 4)")
	f.DurationVar(&a.commandTimeout, "command-timeout", store.DefaultRequestTimeout, "timeout of each etcd request")
	f.BoolVarP(&a.verbose, "verbose", "v", false, "log retries and lease events")
	f.StringVar(&a.rolePrefix, "role-prefix", store.DefaultRolePrefix, "start of the etcd role names of regionctl auth (named in permission errors)")
}

// applyEnv sets every flag not given on the command line from
// REGIONCTL_<FLAG>. A verb's own flag that shadows a global one (resolve
// --key) is not read from the environment: the variable sets the global.
func (a *app) applyEnv(cmd *cobra.Command) error {
	a.warnUnknownEnv(cmd.Root())
	var errs []error
	set := func(f *pflag.Flag) bool {
		name := envName(f.Name)
		v := a.getenv(name)
		if f.Changed || f.Name == "help" || v == "" || commandLineOnly[f.Name] {
			return false
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
		}
		f.Changed = true
		a.fromEnv = append(a.fromEnv, name+"="+shellWord(v))
		if a.envFlags == nil {
			a.envFlags = map[string]string{}
		}
		a.envFlags[f.Name] = name
		return true
	}
	globals := cmd.Root().PersistentFlags()
	globals.VisitAll(func(f *pflag.Flag) { set(f) })
	a.fromEnv = nil // the connection flags are not the command's
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if globals.Lookup(f.Name) == nil {
			set(f)
		}
	})
	if a.verbose {
		a.log = slog.New(slog.NewTextHandler(a.stderr, a.logOpts(slog.LevelInfo)))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"command-timeout", a.commandTimeout}, {"dial-timeout", a.dialTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%s %s: want a timeout above 0", a.flagOrEnv(d.flag, "--"+d.flag), d.v)
		}
	}
	switch a.output {
	case "table", "json", "yaml":
		return nil
	}
	return fmt.Errorf("%s %q: want table, json or yaml%s", a.flagOrEnv("output", "-o"), a.output, valueHint(a.output, []string{"table", "json", "yaml"}))
}

// envPrefix starts the name of every variable regionctl reads.
const envPrefix = "REGIONCTL_"

// envName is the variable of flag name: REGIONCTL_<FLAG>.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// commandLineOnly are the flags never read from the environment: each
// lets a write through a refusal that keeps viewers in their residency
// class, which a variable left set in a shell or a CI job would let
// through for every later write unseen. Their variables are warned about
// (warnUnknownEnv).
var commandLineOnly = map[string]bool{allowResidencyFlag: true}

// otherEnv are the variables regionctl reads that set no flag of the same
// name: the password of --user, and the heartbeat unit's extra flags
// (expanded by systemd into the command line, so set in its environment).
var otherEnv = []string{"REGIONCTL_PASSWORD", "REGIONCTL_ARGS"}

// warnUnknownEnv warns of each REGIONCTL_ variable set (not empty) that is
// neither a flag's, of any verb, nor one of otherEnv: a typo
// (REGIONCTL_PRFIX) is otherwise ignored, and the command runs against the
// defaults. It names the variables within two edits, if any.
func (a *app) warnUnknownEnv(root *cobra.Command) {
	if a.environ == nil {
		return
	}
	known := map[string]bool{}
	for _, n := range otherEnv {
		known[n] = true
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) {
			if f.Name != "help" && !commandLineOnly[f.Name] { // never read from the environment
				known[envName(f.Name)] = true
			}
		}
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	names := slices.Sorted(maps.Keys(known))
	var unknown []string
	for _, kv := range a.environ() {
		name, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix) && v != "" && !known[name] && !slices.Contains(unknown, name) {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	for _, name := range unknown {
		if flag := commandLineFlag(name); flag != "" {
			fmt.Fprintf(a.stderr, "regionctl: warning: %s is set, but regionctl reads --%s from the command line only, so it is ignored; give --%s on the command line of the write that is meant to change residency\n",
				name, flag, flag)
			continue
		}
		var near []string
		for _, k := range names {
			if didyoumean.Distance(name, k) <= 2 {
				near = append(near, k)
			}
		}
		hint := "REGIONCTL_<FLAG> sets a flag (REGIONCTL_ENDPOINTS for --endpoints), and REGIONCTL_PASSWORD the password of --user"
		if len(near) > 0 {
			hint = "did you mean " + strings.Join(near, " or ") + "?"
		}
		fmt.Fprintf(a.stderr, "regionctl: warning: %s is set, but regionctl reads no such variable, so it is ignored; %s\n", name, hint)
	}
}

// commandLineFlag returns the flag of commandLineOnly whose variable is
// name, or "".
func commandLineFlag(name string) string {
	for f := range commandLineOnly {
		if envName(f) == name {
			return f
		}
	}
	return ""
}

// flagOrEnv names where flag name's value came from: the environment
// variable that set it, else as given (shown, e.g. "-o").
func (a *app) flagOrEnv(name, shown string) string {
	if v, ok := a.envFlags[name]; ok {
		return v
	}
	return shown
}

// load dials etcd (once) and reads the whole routing state.
func (a *app) load(ctx context.Context) (*store.State, error) {
	st, err := a.store(ctx)
	if err != nil {
		return nil, err
	}
	return st.Load(ctx)
}

// dialOptionsHook is a context key for tests: []grpc.DialOption added to
// the client's (an interceptor injecting a network fault).
type dialOptionsHook struct{}

// stdinHook is a context key whose io.Reader replaces standard input (a
// test's -f -).
type stdinHook struct{}

// store dials etcd on first use.
func (a *app) store(ctx context.Context) (*store.Store, error) {
	if a.st != nil {
		return a.st, nil
	}
	ks, err := keyspace.New(a.prefix)
	if err != nil {
		return nil, usageError{err}
	}
	roles := store.NewRoles(ks, a.rolePrefix)
	cfg := store.DialConfig{Endpoints: a.endpoints, DialTimeout: a.dialTimeout,
		CACert: a.cacert, Cert: a.cert, Key: a.tlsKey, ProbeKey: ks.Epoch(), Roles: roles}
	if a.probe != nil {
		cfg.ProbeKey = a.probe(ks)
	}
	if a.probeNeeds != nil {
		cfg.ProbeNeeds = a.probeNeeds(roles)
	}
	if a.user != "" {
		cfg.Username, cfg.Password, _ = strings.Cut(a.user, ":")
		if cfg.Password == "" {
			cfg.Password = a.getenv("REGIONCTL_PASSWORD")
		}
		if cfg.Password == "" {
			if a.asked == "" {
				if a.asked, err = a.askPassword(cfg.Username); err != nil {
					return nil, err
				}
			}
			cfg.Password = a.asked // asked once: a dial retried does not ask again
		}
	}
	if opts, ok := ctx.Value(dialOptionsHook{}).([]grpc.DialOption); ok {
		cfg.DialOptions = opts
	}
	cli, err := store.Dial(ctx, cfg)
	if errors.Is(err, store.ErrDialConfig) {
		return nil, usageError{err}
	}
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		// A signal, whatever the dial's own error (a login waits out
		// --dial-timeout: "context deadline exceeded"): etcd is not
		// known to be unreachable, and nothing was sent to write.
		return nil, interruptedError{fmt.Sprintf("interrupted before etcd at %s answered: nothing was written", strings.Join(a.endpoints, ","))}
	}
	if err != nil {
		return nil, err
	}
	a.cli = cli
	user, fromCert := cfg.Username, false
	if user == "" {
		user = store.CertUser(a.cert, a.tlsKey)
		fromCert = user != ""
	}
	tc, _ := cfg.TLSConfig() // Dial built it already
	a.st = store.New(cli, ks, store.Options{RequestTimeout: a.commandTimeout, Endpoints: a.endpoints, Logger: a.log,
		User: user, UserFromCert: fromCert, RolePrefix: a.rolePrefix, TLS: tc})
	return a.st, nil
}

func (a *app) close() {
	if a.cli != nil {
		a.cli.Close()
	}
}

// userName is the audit "user": the etcd user (--user, else the common
// name of --cert, which etcd takes as the user), else the OS user.
func (a *app) userName() string {
	if a.user != "" {
		name, _, _ := strings.Cut(a.user, ":")
		return name
	}
	if cn := store.CertUser(a.cert, a.tlsKey); cn != "" {
		return cn
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return a.getenv("USER")
}

// command is the audit "command": the verb and its arguments as typed,
// without the connection flags, after the verb's flags that came from the
// environment as a shell would show them (REGIONCTL_PRUNE=true apply …).
func (a *app) command() string {
	if a.cmd == nil {
		return strings.Join(a.args, " ")
	}
	if len(a.fromEnv) > 0 {
		return strings.Join(a.fromEnv, " ") + " " + a.typedCommand()
	}
	return a.typedCommand()
}

// typedCommand is the verb and its arguments as typed, without the
// connection flags.
func (a *app) typedCommand() string {
	globals := a.cmd.Root().PersistentFlags()
	local := a.cmd.LocalNonPersistentFlags()
	out := []string{strings.TrimPrefix(a.cmd.CommandPath(), a.cmd.Root().Name()+" ")}
	skipValue, pathWords := false, len(strings.Fields(out[0]))
	for _, s := range a.args {
		if skipValue {
			skipValue = false
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(s, "-"), "=")
		if strings.HasPrefix(s, "-") && s != "-" {
			f := globals.Lookup(name)
			if f == nil && len(name) == 1 {
				f = globals.ShorthandLookup(name)
			}
			if f != nil && local.Lookup(f.Name) == nil {
				skipValue = !hasValue && f.NoOptDefVal == ""
				continue
			}
		} else if pathWords > 0 {
			pathWords-- // a word of the verb path itself
			continue
		}
		out = append(out, shellWord(s))
	}
	return strings.Join(out, " ")
}

// verb marks a verb as running and adapts a run function to cobra.
func (a *app) verb(fn func(ctx context.Context, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.ran, a.cmd = true, cmd
		return fn(cmd.Context(), cmd, args)
	}
}

// shellWord quotes v as a shell would need it when it holds a space, a
// quote, another character the shell treats specially, or nothing: the
// audit command can be copied and run again.
func shellWord(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\n'\"\\$`;&|<>()*?[]{}~#!") {
		return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
	}
	return v
}

// routingKey is the full etcd key of rel under --prefix, for messages.
func (a *app) routingKey(rel string) string {
	ks, err := keyspace.New(a.prefix)
	if err != nil {
		return "<prefix>/routing/" + rel
	}
	return ks.RoutingKey(rel)
}
