package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/routing"
)

func (a *app) routeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "route",
		Short: "Create, change or remove a route",
		Example: `  regionctl route set PL --target eu-central=60 --target eu-west=40 --reason "rebalance"
  regionctl route rm CZ`,
		RunE: groupRun,
	}
	cmd.AddCommand(a.routeSetCmd(), a.routeRmCmd())
	return cmd
}

// routeSetOpts are the flags of route set.
type routeSetOpts struct {
	targets, fallback, attrs, unsetAttrs []string
	affinity                             string
	noFallback                           bool
}

func (a *app) routeSetCmd() *cobra.Command {
	var (
		o routeSetOpts
		w writeOpts
	)
	cmd := &cobra.Command{
		Use:   "set ROUTE",
		Short: "Create a route, or change the given fields of an existing one",
		Long: `ROUTE is an ISO 3166-1 alpha-2 code in upper case (PL), _default, or a
lower-case group name (apac-general). --target replaces the whole target
list; weights must sum to 100. Fields not given are kept.`,
		Example: `  regionctl route set PL --target eu-central=60 --target eu-west=40
  regionctl route set KR --fallback apac-general --attr lang=ko --reason "new tokenizer"`,
		Args: exactArgs(1, "a route name"),
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.targets, "target", nil, "POOL=WEIGHT (repeatable; replaces the target list)")
	f.StringSliceVar(&o.fallback, "fallback", nil, "route names tried next, in order (replaces the list)")
	f.BoolVar(&o.noFallback, "no-fallback", false, "clear the fallback list")
	f.StringVar(&o.affinity, "affinity", "", "sticky or random")
	f.StringArrayVar(&o.attrs, "attr", nil, "attribute KEY=VALUE (repeatable)")
	f.StringArrayVar(&o.unsetAttrs, "unset-attr", nil, "remove attribute KEY (repeatable)")
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, cmd *cobra.Command, args []string) error {
		return a.runRouteSet(ctx, cmd, args[0], o, w)
	})
	return cmd
}

func (a *app) runRouteSet(ctx context.Context, cmd *cobra.Command, name string, o routeSetOpts, w writeOpts) error {
	changed := cmd.Flags().Changed
	targets, err := parseTargets(o.targets)
	if err != nil {
		return err
	}
	return a.runWrite(ctx, w, configPlan(func(cfg *routing.Config) error {
		r, exists := cfg.Routes[name]
		if !exists && !changed("target") {
			return usagef("route %s does not exist: creating it needs --target", name)
		}
		if changed("target") {
			r.Targets = targets
		}
		if changed("fallback") {
			r.Fallback = o.fallback
		}
		if o.noFallback {
			r.Fallback = nil
		}
		if changed("affinity") {
			r.Affinity = o.affinity
		}
		attrs, err := applyAttrs(r.Attrs, o.attrs, o.unsetAttrs)
		if err != nil {
			return err
		}
		r.Attrs = attrs
		cfg.Routes[name] = r
		return nil
	}))
}

func (a *app) routeRmCmd() *cobra.Command {
	var w writeOpts
	cmd := &cobra.Command{
		Use:     "rm ROUTE",
		Short:   "Remove a route (its viewers fall to _default; refused if a fallback names it)",
		Example: `  regionctl route rm CZ --reason "merged into DE" --dry-run`,
		Args:    exactArgs(1, "a route name"),
	}
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		return a.runWrite(ctx, w, configPlan(func(cfg *routing.Config) error {
			if _, ok := cfg.Routes[args[0]]; !ok {
				return refusef(routing.RouteKey(args[0]), "route does not exist")
			}
			delete(cfg.Routes, args[0])
			return nil
		}))
	})
	return cmd
}
