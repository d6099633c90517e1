package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/cmddocs"
	"github.com/regiond/regiond/internal/etcddiag"
	"github.com/regiond/regiond/internal/flagerr"
	"github.com/regiond/regiond/internal/journalfmt"
	"github.com/regiond/regiond/internal/version"
)

// usageError marks errors in how regiond was invoked (exit 2).
type usageError struct{ error }

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

// agentFlags are the flags of the agent, shared by `regiond` and `regiond dev`.
type agentFlags struct {
	cfg                  agent.Config
	cacert, cert, keyPEM string
	logLevel, logFormat  string
}

func (f *agentFlags) register(fs *pflag.FlagSet, dev bool) {
	d := agent.DefaultConfig()
	f.cfg = d
	if !dev {
		fs.StringSliceVar(&f.cfg.Endpoints, "endpoints", d.Endpoints, "etcd client URLs, comma-separated")
		fs.StringSliceVar(&f.cfg.StatusEndpoints, "status-endpoints", nil,
			"etcd client URLs of the status key and its lease, when not --endpoints: the members, when --endpoints is a grpc-proxy (the proxy renews leases without the client's login, which etcd refuses with auth on, and unreliably under load)")
		fs.StringVar(&f.cacert, "cacert", "", "CA bundle (PEM) to verify etcd's certificate; enables TLS")
		fs.StringVar(&f.cert, "cert", "", "client certificate (PEM) for etcd")
		fs.StringVar(&f.keyPEM, "key", "", "client key (PEM) for etcd")
		fs.StringVar(&f.cfg.Username, "user", "", "etcd user (password from $REGIOND_PASSWORD)")
		fs.DurationVar(&f.cfg.DialTimeout, "dial-timeout", d.DialTimeout, "how long each attempt to reach etcd at start waits (the login, a first read); then it retries with backoff")
		fs.StringVar(&f.cfg.Socket, "socket", d.Socket, "unix socket of the API (mode 0660; \"\" disables)")
		fs.StringVar(&f.cfg.Listen, "listen", "", "also serve the API on this loopback TCP address, e.g. 127.0.0.1:7420")
		fs.StringVar(&f.cfg.Snapshot, "snapshot", d.Snapshot,
			"snapshot file for front doors in other languages (\"\" disables); its directory must be the agent's own (created 0755 if missing)")
		fs.StringVar(&f.cfg.SnapshotGroup, "snapshot-group", "",
			"group (name or gid) the front doors reading the snapshot run as, e.g. www-data: its directory is created 0750 of that group, and must have it")
		fs.StringVar(&f.cfg.SnapshotCopy, "snapshot-copy", "",
			"copy of the snapshot on persistent disk (e.g. /var/lib/regiond/table.json), refreshed every minute and at shutdown, written to --snapshot at start when that file is missing (after a reboot), so front doors serve the last table, stale, even if etcd does not answer at boot")
	}
	fs.StringVar(&f.cfg.Prefix, "prefix", d.Prefix, "root prefix of regiond's keys in etcd")
	fs.StringVar(&f.cfg.Node, "node", d.Node, "this node's name in <prefix>/agents/")
	fs.DurationVar(&f.cfg.HealthGrace, "health-grace", d.HealthGrace, "a pool with health_check turns unhealthy this long after its last health key is gone")
	fs.DurationVar(&f.cfg.MaxStale, "max-stale", d.MaxStale, "/readyz fails once the table has not been confirmed against etcd for this long")
	fs.IntVar(&f.cfg.MaxBlockingQueries, "max-blocking-queries", d.MaxBlockingQueries,
		"most blocking queries (min_revision) waiting at once, at most half of them over --listen; one more gets 429 with Retry-After")
	fs.IntVar(&f.cfg.MaxConnections, "max-connections", d.MaxConnections,
		"most open API connections per listener (lowered to fit the file descriptor limit); at the cap idle ones are closed, new ones wait")
	fs.IntVar(&f.cfg.FDReserve, "fd-reserve", d.FDReserve,
		"file descriptors the API never takes, kept for the snapshot writer and the etcd client")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
}

// finish turns the flags into an agent config.
func (f *agentFlags) finish() (agent.Config, error) {
	cfg := f.cfg
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return cfg, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(f.logFormat) { // as --log-level takes WARN
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, journalfmt.Options(stderr, opts)))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(stderr, journalfmt.Options(stderr, opts)))
	default:
		return cfg, usageError{fmt.Errorf("--log-format %q: want text or json", f.logFormat)}
	}
	cfg.Password = os.Getenv("REGIOND_PASSWORD")
	if cfg.Username != "" && cfg.Password == "" {
		// etcd's client logs in only with both: the agent would run as
		// no user (or as its certificate's CN), and say etcd is
		// unreachable.
		return cfg, usageError{fmt.Errorf("--user %s: REGIOND_PASSWORD is empty (set it in /etc/regiond/regiond.env; with --client-cert-auth on etcd, drop --user: the certificate's CN is the user)", cfg.Username)}
	}
	cfg.Version = version.String()
	if f.cacert != "" || f.cert != "" || f.keyPEM != "" {
		if f.cacert != "" {
			if _, err := etcddiag.CAPool(f.cacert); err != nil {
				return cfg, usageError{err}
			}
		}
		switch { // etcd's own message names neither flag ("KeyFile and CertFile must both be present")
		case f.cert != "" && f.keyPEM == "":
			return cfg, usageError{fmt.Errorf("--cert %s without --key: give the client certificate's key too", f.cert)}
		case f.keyPEM != "" && f.cert == "":
			return cfg, usageError{fmt.Errorf("--key %s without --cert: give the client certificate too", f.keyPEM)}
		}
		info := transport.TLSInfo{TrustedCAFile: f.cacert, CertFile: f.cert, KeyFile: f.keyPEM}
		tc, err := info.ClientConfig()
		if err != nil {
			return cfg, usageError{fmt.Errorf("TLS flags (--cert %s, --key %s): %w", f.cert, f.keyPEM, err)}
		}
		cfg.TLS = tc
		if w := etcddiag.KeyFileExposed("--key", f.keyPEM); w != "" {
			cfg.Logger.Warn(w) // the auth review: accepted silently; the package's postinst alone warned
		}
	}
	eps, err := etcddiag.Endpoints(cfg.Endpoints, cfg.TLS != nil)
	if err != nil {
		return cfg, usageError{err}
	}
	cfg.Endpoints = eps
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

func newRootCommand() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "regiond",
		Short: "Per-node agent: mirrors routing policy from etcd and serves decisions locally",
		Long: `regiond mirrors <prefix>/routing/ from etcd with one watch into an in-memory
table and answers routing decisions locally:

  GET /v1/resolve?country=PL&key=abc   (or header CF-IPCountry; &explain=1)
  GET /v1/table  /v1/status  /healthz  /readyz[?synced=1]  /metrics

on a unix socket (--socket) and optionally loopback TCP (--listen), and keeps an
atomic snapshot file (--snapshot) for front doors in other languages. When etcd
is unreachable it keeps serving the last good table (and, after a restart, the
snapshot file, marked stale).`,
		Example: `  regiond --endpoints=https://etcd-1:2379,https://etcd-2:2379,https://etcd-3:2379 \
    --cacert=/etc/regiond/tls/ca.pem --cert=/etc/regiond/tls/node.pem --key=/etc/regiond/tls/node-key.pem

  # everything on one machine, with an embedded etcd:
  regiond dev`,
		Args:          noArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.finish()
			if err != nil {
				return err
			}
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	f.register(cmd.Flags(), false)
	cmd.SetFlagErrorFunc(flagError)
	cmd.AddCommand(newDevCommand())
	cmd.Version = version.String()
	cmd.SetVersionTemplate("regiond {{.Version}}\n")
	cmddocs.Register(cmd)
	return cmd
}

// flagError is cobra's FlagErrorFunc: every flag error is a usage error
// (exit 2), and an unknown flag close to one the command has names it.
func flagError(cmd *cobra.Command, err error) error {
	err = flagerr.Value(err)
	if near := flagerr.Near(cmd, err); len(near) > 0 {
		return usageError{fmt.Errorf("%w; did you mean %s?", err, strings.Join(near, " or "))}
	}
	return usageError{err}
}

// printError prints err on w, each line named "regiond:" (several flag
// errors are joined one per line).
func printError(w io.Writer, err error) {
	var msg strings.Builder
	for _, line := range strings.Split(strings.TrimRight(err.Error(), "\n"), "\n") {
		fmt.Fprintln(&msg, "regiond:", line)
	}
	io.WriteString(journalfmt.Errors(w), msg.String()) // one write: one message
}

// noArgs refuses arguments as a usage error (exit 2): regiond takes flags
// and the dev subcommand only.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unexpected argument %q: regiond takes flags only, or a subcommand (dev, help, completion); see regiond --help", args[0])}
	}
	return nil
}
