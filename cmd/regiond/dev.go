//go:build dev && !nodev

package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

type devFlags struct {
	agentFlags
	dataDir, clientURL, listen, config, snapshot string
}

func newDevCommand() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole system on one machine: embedded etcd, example config, API on 127.0.0.1:7420",
		Long: `regiond dev starts an embedded etcd (data in --data-dir), loads --config into it
when the store is empty (as one audited regionctl-style write, epoch 1), and runs
the agent with the API on --listen, a unix socket and a snapshot file in
--data-dir. Ctrl-C stops everything cleanly; the data survives for the next run.`,
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
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7420", "loopback address of the API")
	fs.StringVar(&f.config, "config", "examples/routing.yaml", "config loaded when the store is empty")
	fs.StringVar(&f.snapshot, "snapshot", "", "snapshot file (default <data-dir>/table.json)")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return cmd
}

func runDev(ctx context.Context, f *devFlags, cmd *cobra.Command) error {
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return usageError{fmt.Errorf("--data-dir: %w", err)}
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return fmt.Errorf("create --data-dir %s: %w", dataDir, err)
	}
	os.Chmod(dataDir, 0o750)
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
	if u, err := url.Parse(f.clientURL); err != nil || u.Host == "" || !api.IsLoopbackHost(u.Hostname()) {
		return usageError{fmt.Errorf("--client-url %q: want a loopback URL such as http://127.0.0.1:2379 (the embedded etcd has no authentication)", f.clientURL)}
	}
	f.cfg.Endpoints = []string{f.clientURL}
	cfg, err := f.finish()
	if err != nil {
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
	srv, err := devetcd.Start(ctx, devetcd.Config{Dir: filepath.Join(dataDir, "etcd"), ClientURL: f.clientURL})
	if err != nil {
		return abandon(fmt.Errorf("%w (is another etcd or regiond dev using %s? pick another with --client-url)", err, f.clientURL))
	}
	defer srv.Close()
	if err := seedConfig(ctx, srv, cfg.Prefix, f.config, seed, readErr, cmd); err != nil {
		return abandon(err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, `
regiond dev is running (Ctrl-C stops it).
  etcd:      %s   (regionctl --endpoints=%s)
  API:       http://%s   and unix socket %s
  snapshot:  %s

Try:
  curl '%s/v1/resolve?country=PL&key=viewer-42'
  curl '%s/v1/resolve?country=KR&explain=1'
  curl -H 'CF-IPCountry: de' '%s/v1/resolve'
  curl '%s/v1/status'
  go run ./cmd/regionctl --endpoints=%s pool drain eu-central --reason "kernel upgrade"

`, f.clientURL, f.clientURL, a.Addr(), cfg.Socket, cfg.Snapshot,
		"http://"+a.Addr(), "http://"+a.Addr(), "http://"+a.Addr(), "http://"+a.Addr(), f.clientURL)
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
// empty store as one audited write; a store that already holds a config is
// left alone.
func seedConfig(ctx context.Context, srv *devetcd.Server, prefix, path string, cfg *routing.Config, readErr error, cmd *cobra.Command) error {
	cli, err := srv.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	ks, err := keyspace.New(prefix)
	if err != nil {
		return usageError{err}
	}
	st := store.New(cli, ks, store.Options{Endpoints: srv.Endpoints})
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cur, err := st.Load(lctx)
	if err != nil {
		return fmt.Errorf("read the dev store: %w", err)
	}
	if len(cur.Config.Pools) > 0 || len(cur.Config.Routes) > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "store already holds a config (epoch %d); not loading %s\n", cur.Epoch, path)
		return nil
	}
	if readErr != nil {
		return readErr
	}
	host, _ := os.Hostname()
	_, err = st.Write(lctx, store.WriteRequest{
		Command: "regiond dev --config " + path, Reason: "regiond dev: initial config",
		User: os.Getenv("USER"), Host: host,
		Build: func(context.Context, *store.State) (*store.Plan, error) { return &store.Plan{Config: cfg}, nil },
	})
	if err != nil {
		return fmt.Errorf("load %s into the dev store:\n%s", path, strings.TrimSpace(err.Error()))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "loaded %s into the empty store (epoch 1)\n", path)
	return nil
}
