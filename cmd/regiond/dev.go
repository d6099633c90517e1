//go:build dev && !nodev

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/safedir"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

type devFlags struct {
	agentFlags
	dataDir, clientURL, peerURL, listen, config, snapshot string
}

func newDevCommand() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole system on one machine: embedded etcd, example config, API on 127.0.0.1:7420",
		Long: `regiond dev starts an embedded etcd (data in --data-dir), loads --config into it
when the store is empty (as one audited regionctl-style write, epoch 1), and runs
the agent with the API on --listen, a unix socket and a snapshot file in
--data-dir. Ctrl-C stops everything cleanly; the data survives for the next run,
so a --config edited since is not loaded (it says so): apply it with
  go run ./cmd/regionctl --endpoints=<--client-url> apply -f FILE
or start afresh with another --data-dir.`,
		Example: `  go run ./cmd/regiond dev
  curl '127.0.0.1:7420/v1/resolve?country=PL&key=viewer-42'`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(cmd *cobra.Command, _ []string) error { return runDev(cmd.Context(), &f, cmd) },
	}
	fs := cmd.Flags()
	f.register(fs, true)
	fs.StringVar(&f.dataDir, "data-dir", "./.regiond-dev", "where the embedded etcd, the socket and the snapshot live")
	fs.StringVar(&f.clientURL, "client-url", "http://127.0.0.1:2379", "client URL of the embedded etcd (regionctl --endpoints)")
	fs.StringVar(&f.peerURL, "peer-url", "", "peer URL of the embedded etcd, a loopback http URL (default: a free loopback port)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7420", "loopback address of the API")
	fs.StringVar(&f.config, "config", "examples/routing.yaml", "config loaded when the store is empty")
	fs.StringVar(&f.snapshot, "snapshot", "", "snapshot file (default <data-dir>/table.json)")
	cmd.SetFlagErrorFunc(flagError)
	return cmd
}

func runDev(ctx context.Context, f *devFlags, cmd *cobra.Command) error {
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return usageError{fmt.Errorf("--data-dir: %w", err)}
	}
	f.cfg.Listen = f.listen
	f.cfg.Socket = filepath.Join(dataDir, "regiond.sock")
	f.cfg.Snapshot = f.snapshot
	if f.cfg.Snapshot == "" {
		f.cfg.Snapshot = filepath.Join(dataDir, "table.json")
	}
	if abs, err := filepath.Abs(f.cfg.Snapshot); err == nil {
		f.cfg.Snapshot = abs
	}
	// The embedded etcd has no authentication: all of the routing policy
	// is writable by whoever reaches it, so it listens on loopback only.
	// Its scheme is http: the embedded etcd has no certificate to serve
	// https with (etcd refused that only after the agent was made).
	if u, err := url.Parse(f.clientURL); err != nil || u.Scheme != "http" || u.Port() == "" || strings.Trim(u.Path, "/") != "" || !api.IsLoopbackHost(u.Hostname()) {
		return usageError{fmt.Errorf("--client-url %q: want a loopback http URL with a port and no path, such as http://127.0.0.1:2379 (the embedded etcd has no authentication)", f.clientURL)}
	}
	if f.peerURL != "" { // its peers' port: off loopback, a member could join it
		if u, err := url.Parse(f.peerURL); err != nil || u.Scheme != "http" || u.Port() == "" || !api.IsLoopbackHost(u.Hostname()) {
			return usageError{fmt.Errorf("--peer-url %q: want a loopback http URL with a port, such as http://127.0.0.1:2380 (the embedded etcd has no authentication)", f.peerURL)}
		}
	}
	f.cfg.Endpoints = []string{f.clientURL}
	cfg, err := f.finish()
	if err != nil {
		return err
	}
	// Made only once the flags are taken: a refused one leaves no
	// directory behind. One that exists keeps its mode (it may be the
	// checkout or a home directory) and is refused, naming it, when it is
	// not this user's alone to write, as the agent refuses its socket's
	// and snapshot's directories (which it is, by default).
	if err := safedir.Ensure(dataDir, "--data-dir", 0o750, safedir.NoGroup); err != nil {
		return err
	}
	// What can fail without etcd fails first, leaving no etcd data
	// behind: a config file that does not parse, a port in use.
	seed, readErr := readSeedConfig(f.config)
	var parseErr configParseError
	if errors.As(readErr, &parseErr) {
		return readErr
	}
	a, err := agent.New(cfg)
	if err != nil {
		if strings.Contains(err.Error(), "address already in use") {
			return fmt.Errorf("%w (is another regiond dev running? pick another port with --listen)", err)
		}
		return err
	}
	// A failure from here on stops the agent made above as a stop does:
	// its socket removed (it was left in --data-dir).
	abandon := func(err error) error {
		done, cancel := context.WithCancel(context.Background())
		cancel()
		_ = a.Run(done)
		return err
	}
	srv, err := devetcd.Start(ctx, devetcd.Config{Dir: filepath.Join(dataDir, "etcd"), ClientURL: f.clientURL, PeerURL: f.peerURL})
	if err != nil {
		if f.peerURL != "" {
			return abandon(fmt.Errorf("%w (is another etcd or regiond dev using %s or %s? pick others with --client-url and --peer-url)", err, f.clientURL, f.peerURL))
		}
		return abandon(fmt.Errorf("%w (is another etcd or regiond dev using %s? pick another with --client-url)", err, f.clientURL))
	}
	defer func() {
		// etcd's stop waits for its clients' streams (an agent's watch)
		// to end: seconds, which were silent.
		start := time.Now()
		cfg.Logger.Info("stopping embedded etcd", "data_dir", filepath.Join(dataDir, "etcd"))
		srv.Close()
		cfg.Logger.Info("embedded etcd stopped", "took", time.Since(start).Round(time.Millisecond))
	}()
	inForce, err := seedConfig(ctx, srv, dataDir, cfg.Prefix, f.config, seed, readErr, cmd)
	if err != nil {
		return abandon(err)
	}
	country, pool := tryTargets(inForce)
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, `
regiond dev is running (Ctrl-C stops it).
  etcd:      %s   (regionctl --endpoints=%s)
  API:       http://%s   and unix socket %s
  snapshot:  %s

Try:
  curl '%[6]s/v1/resolve?country=%[7]s&key=viewer-42'
  curl '%[6]s/v1/resolve?country=%[7]s&explain=1'
  curl -H 'CF-IPCountry: %[8]s' '%[6]s/v1/resolve'
  curl '%[6]s/v1/status'
  go run ./cmd/regionctl --endpoints=%[1]s pool drain %[9]s --reason "kernel upgrade"
  go run ./cmd/regionctl --endpoints=%[1]s apply -f %[10]s   (after editing it)

`, f.clientURL, f.clientURL, a.Addr(), cfg.Socket, cfg.Snapshot,
		"http://"+a.Addr(), country, strings.ToLower(country), pool, f.config)
	return a.Run(ctx)
}

// configParseError is a --config file that was read but does not parse.
type configParseError struct{ error }

// readSeedConfig reads and parses the --config file. A file that cannot be
// read is an error only for an empty store (seedConfig says so); one that
// does not parse is a configParseError.
func readSeedConfig(path string) (*routing.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--config: %w (run from the repository root, or pass --config)", err)}
	}
	cfg, err := routing.ParseConfig(b)
	if err != nil {
		return nil, configParseError{fmt.Errorf("--config %s:\n%w", path, err)}
	}
	return cfg, nil
}

// seedConfig writes the config (read from path: cfg, or readErr) into an
// empty store as one audited write, and returns the config in force; a
// store that already holds a config is left alone, saying whether the file
// differs from it and how to apply it.
func seedConfig(ctx context.Context, srv *devetcd.Server, dataDir, prefix, path string, cfg *routing.Config, readErr error, cmd *cobra.Command) (*routing.Config, error) {
	cli, err := srv.Client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ks, err := keyspace.New(prefix)
	if err != nil {
		return nil, usageError{err}
	}
	st := store.New(cli, ks, store.Options{Endpoints: srv.Endpoints})
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cur, err := st.Load(lctx)
	if err != nil {
		return nil, fmt.Errorf("read the dev store: %w", err)
	}
	if len(cur.Config.Pools) > 0 || len(cur.Config.Routes) > 0 {
		out := cmd.OutOrStdout()
		switch {
		case cfg == nil:
			fmt.Fprintf(out, "store already holds a config (epoch %d); not loading %s\n", cur.Epoch, path)
		case sameConfig(cfg, cur.Config):
			fmt.Fprintf(out, "store already holds the config of %s (epoch %d)\n", path, cur.Epoch)
		default:
			fmt.Fprintf(out, "store already holds a config (epoch %d) that differs from %s; not loading it (--config seeds an empty store only).\n"+
				"  see the difference: go run ./cmd/regionctl --endpoints=%s diff -f %s\n"+
				"  apply it:           go run ./cmd/regionctl --endpoints=%s apply -f %s\n"+
				"  or start afresh with another --data-dir (or remove %s)\n",
				cur.Epoch, path, srv.Endpoints[0], path, srv.Endpoints[0], path, dataDir)
		}
		return cur.Config, nil
	}
	if readErr != nil {
		return nil, readErr
	}
	host, _ := os.Hostname()
	who := os.Getenv("USER") // the audit user, as regionctl's: the OS user
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	res, err := st.Write(lctx, store.WriteRequest{
		Command: "regiond dev --config " + path, Reason: "regiond dev: initial config",
		User: who, Host: host,
		Build: func(context.Context, *store.State) (*store.Plan, error) {
			// The file is the dev store's first config: a policy narrower
			// than the built-in one (which counts as stored in an empty
			// store) is what it asks for, said below, not refused as
			// regionctl apply refuses it without --allow-residency-change.
			return &store.Plan{Config: cfg, AllowResidencyChange: true}, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load %s into the dev store:\n%s", path, strings.TrimSpace(err.Error()))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "loaded %s into the empty store (epoch 1)\n", path)
	if res.ResidencyChanged != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "note: its residency policy differs from the built-in one: %s\n", res.ResidencyChanged)
	}
	return cfg, nil
}

// sameConfig reports whether a and b store the same values.
func sameConfig(a, b *routing.Config) bool {
	av, aerr := a.Values()
	bv, berr := b.Values()
	return aerr == nil && berr == nil && maps.EqualFunc(av, bv, bytes.Equal)
}

// tryTargets picks, from the config in force, what the start banner's
// examples use: a country with a route of its own (PL when it has one)
// and a pool to drain (one PL's route targets, else the first).
func tryTargets(cfg *routing.Config) (country, pool string) {
	country, pool = "PL", "eu-central"
	if cfg == nil {
		return country, pool
	}
	if _, ok := cfg.Routes[country]; !ok {
		for _, name := range slices.Sorted(maps.Keys(cfg.Routes)) {
			if routing.IsCountry(name) {
				country = name
				break
			}
		}
	}
	if r, ok := cfg.Routes[country]; ok && len(r.Targets) > 0 {
		return country, r.Targets[0].Pool
	}
	if _, ok := cfg.Pools[pool]; !ok {
		if ids := slices.Sorted(maps.Keys(cfg.Pools)); len(ids) > 0 {
			pool = ids[0]
		}
	}
	return country, pool
}
