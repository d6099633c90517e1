package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// resolveOpts are the flags of resolve.
type resolveOpts struct {
	key, file string
	down      []string
}

func (a *app) resolveCmd() *cobra.Command {
	var o resolveOpts
	cmd := &cobra.Command{
		Use:   "resolve CC [--key K] [--down POOL…] [-f FILE]",
		Short: "Show where a viewer from CC would be sent (a dry run of the agents' resolver)",
		Long: `resolve compiles the stored state (or a config file with -f) with the same
resolver the agents run and shows the decision and every route and pool
considered. --down treats pools as down: "what if fra drains?". Health keys
count as an agent would see them (a pool with health_check and no live key
is unhealthy). Here --key is the sticky key; set the TLS client key with
REGIONCTL_KEY.`,
		Example: `  regionctl resolve PL --key viewer-123
  regionctl resolve PL --down eu-central --down eu-west
  regionctl resolve KR -f fleet.yaml -o json`,
		Args: exactArgs(1, "a country code"),
	}
	f := cmd.Flags()
	f.StringVar(&o.key, "key", "", "sticky key (e.g. a viewer or session id)")
	f.StringSliceVar(&o.down, "down", nil, "treat these pools as down (repeatable or comma-separated)")
	f.StringVarP(&o.file, "file", "f", "", "resolve against this config file instead of etcd (- reads standard input)")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		return a.runResolve(ctx, args[0], o)
	})
	return cmd
}

func (a *app) runResolve(ctx context.Context, country string, o resolveOpts) error {
	now := time.Now()
	opts := routing.CompileOptions{Now: now, Start: now.Add(-routing.DefaultHealthGrace), Down: o.down}
	t, err := a.resolveTable(ctx, o.file, opts)
	if err != nil {
		return err
	}
	for _, p := range o.down {
		if _, ok := t.Pool(p); !ok {
			return usagef("--down %s: no such pool%s", p, nearHint(p, t.PoolIDs()))
		}
	}
	if routing.NormalizeCountry(country) == routing.Unknown && country != routing.Unknown {
		// As the agents do with such a header; said, since a typo
		// ("Poland", "UK") would otherwise look like an answer for it.
		fmt.Fprintf(a.stderr, "regionctl: %q is not an assigned ISO 3166-1 alpha-2 country code%s: resolved as %s, as the agents resolve such a header\n", country, routing.CountryHint(country), routing.Unknown)
	}
	ex := t.Explain(country, o.key, now)
	return a.printer().print(ex, func(w io.Writer) { printExplain(w, ex, o.key == "") })
}

// resolveTable compiles the stored state, or a config file.
func (a *app) resolveTable(ctx context.Context, file string, opts routing.CompileOptions) (*routing.Table, error) {
	if file != "" {
		cfg, err := a.readConfigFile(file)
		if err != nil {
			return nil, err
		}
		a.warnConfig(cfg, configFileName(file))
		return routing.CompileConfig(cfg, nil, opts)
	}
	if a.cert != "" && a.tlsKey == "" {
		// resolve's own --key (the sticky key) shadows the global one.
		return nil, usagef("--cert %s without its TLS key: in resolve, --key is the sticky key; set the TLS key with REGIONCTL_KEY", a.cert)
	}
	cur, err := a.load(ctx)
	if err != nil {
		return nil, err
	}
	return a.compileStored(ctx, cur, opts)
}

// compileStored compiles the stored state cur as the agents do: each key
// whose stored value they refuse is decided with its last good value,
// read from etcd's history (store.LastGood), and named on stderr with the
// value used. Without it a refused residency policy was decided by the
// built-in one, sending viewers out of the class the agents keep them in.
func (a *app) compileStored(ctx context.Context, cur *store.State, opts routing.CompileOptions) (*routing.Table, error) {
	if len(cur.Skipped) > 0 {
		st, err := a.store(ctx)
		if err != nil {
			return nil, err
		}
		earlier, notes := st.LastGood(ctx, cur)
		for _, n := range notes {
			fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", n)
		}
		opts.Earlier = earlier
	}
	return routing.Compile(cur.Revision, cur.KVs, nil, opts), nil
}

func printExplain(w io.Writer, ex routing.Explanation, keyless bool) {
	if ex.NoRoute {
		fmt.Fprintf(w, "%s (class %s): NO ROUTE: %s\n", ex.Country, orDash(ex.Class), strings.Join(ex.Reasons, ", "))
	} else {
		d := ex.Decision
		fmt.Fprintf(w, "%s (class %s) → %s (%s) via route %s, fallback depth %d\n",
			ex.Country, orDash(ex.Class), d.Pool, d.Host, d.Route, d.FallbackDepth)
		fmt.Fprintf(w, "attrs: %s\n", kvList(d.Attrs))
		if len(d.Degraded) > 0 {
			fmt.Fprintf(w, "degraded: %s\n", strings.Join(d.Degraded, ", "))
		}
		switch p := ex.Pick; {
		case p == nil || p.Method == routing.PickMethodOnly:
		case p.Method == routing.PickMethodSticky:
			scores := make([]string, 0, len(p.Scores))
			for _, pool := range slices.Sorted(maps.Keys(p.Scores)) {
				scores = append(scores, fmt.Sprintf("%s %.4g", pool, p.Scores[pool]))
			}
			fmt.Fprintf(w, "pick: sticky, by the key's rendezvous scores (lowest wins): %s\n", strings.Join(scores, ", "))
		case keyless:
			fmt.Fprintln(w, "(no --key: a weighted random pick among the eligible pools, which differs run by run; --key K gives a viewer's pool)")
		default:
			fmt.Fprintln(w, "pick: random (the route's affinity): a weighted random pick among the eligible pools, whatever the key")
		}
	}
	fmt.Fprintln(w)
	row(w, "ROUTE", "DEPTH", "POOL", "WEIGHT", "ELIGIBLE", "WHY NOT")
	for _, r := range ex.Routes {
		route := r.Route
		if r.Chosen {
			route += " *"
		}
		if len(r.Overrides) > 0 {
			route += " (boost " + strings.Join(r.Overrides, ",") + ")"
		}
		if !r.Exists {
			row(w, route, r.Depth, "-", "-", "-", "route does not exist")
		}
		for _, p := range r.Pools {
			row(w, route, r.Depth, p.Pool, p.Weight, p.Eligible, orDash(p.Reason))
		}
	}
}
