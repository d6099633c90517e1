package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
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
list; weights must sum to 100; --fallback replaces the fallback list and
--no-fallback clears it (not both). Fields not given are kept. A route whose
stored value is invalid (a hand edit the agents skip) is replaced whole:
give --target and every other field it holds, or remove it with route rm.`,
		Example: `  regionctl route set PL --target eu-central=60 --target eu-west=40
  regionctl route set KR --fallback apac-general --attr lang=ko --reason "new tokenizer"`,
		Args: exactArgs(1, "a route name"),
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.targets, "target", nil, "POOL=WEIGHT (repeatable, or comma-separated: a=60,b=40; replaces the target list)")
	f.StringSliceVar(&o.fallback, "fallback", nil, "route names tried next, in order (replaces the list; not with --no-fallback)")
	f.BoolVar(&o.noFallback, "no-fallback", false, "clear the fallback list (not with --fallback)")
	f.StringVar(&o.affinity, "affinity", "", "sticky or random")
	f.StringArrayVar(&o.attrs, "attr", nil, "attribute KEY=VALUE (repeatable)")
	f.StringArrayVar(&o.unsetAttrs, "unset-attr", nil, "remove attribute KEY (repeatable)")
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, cmd *cobra.Command, args []string) error {
		return a.runRouteSet(ctx, cmd, args[0], o, w)
	})
	return cmd
}

// routeFields are the fields of a route; attrs are given one by one.
var routeFields = []repairField{
	{field: "targets", flag: "--target", required: true},
	{field: "fallback", flag: "--fallback (or --no-fallback)"},
	{field: "affinity", flag: "--affinity"},
}

func (a *app) runRouteSet(ctx context.Context, cmd *cobra.Command, name string, o routeSetOpts, w writeOpts) error {
	changed := cmd.Flags().Changed
	if o.noFallback && changed("fallback") {
		return usagef("--fallback and --no-fallback exclude each other: --fallback NAME… replaces the fallback list, --no-fallback clears it")
	}
	targets, err := parseTargets(o.targets)
	if err != nil {
		return err
	}
	given := func(field string) bool {
		switch field {
		case "targets":
			return changed("target")
		case "fallback":
			return changed("fallback") || changed("no-fallback")
		}
		return changed(field)
	}
	var boosted string
	w.warning = func() string { return boosted }
	return a.runWrite(ctx, w, configPlanWith(func(cur *store.State, cfg *routing.Config) error {
		boosted = ""
		if given("targets") {
			boosted = boostedTargets(cur, name, time.Now())
		}
		r, exists := cfg.Routes[name]
		if !exists {
			if bad := invalidAt(cur, routing.RouteKey(name)); bad != nil {
				if missing := bad.missing(routeFields, given, o.attrs, o.unsetAttrs); len(missing) > 0 {
					return bad.refusal("route set cannot change only some of its fields: give also "+strings.Join(missing, ", ")+" to replace it whole",
						"route rm "+name)
				}
			} else if !changed("target") {
				return usagef("route %s does not exist: creating it needs --target", name)
			}
		}
		if changed("target") {
			r.Targets = targets
			for i, tg := range targets {
				if err := unknownPool(cur, routing.RouteKey(name), fmt.Sprintf("targets[%d].pool", i), tg.Pool); err != nil {
					return err
				}
			}
		}
		if changed("fallback") {
			r.Fallback = o.fallback
			for i, f := range o.fallback {
				if err := unknownRoute(cur, routing.RouteKey(name), fmt.Sprintf("fallback[%d]", i), f); f != name && err != nil {
					return err
				}
			}
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
		Use:   "rm ROUTE",
		Short: "Remove a route (its viewers fall to _default; refused if a fallback names it)",
		Long: `Remove a route: its viewers fall to _default; refused if a fallback names
it. A route key whose stored value is invalid (a hand edit the agents skip)
is removed too.`,
		Example: `  regionctl route rm CZ --reason "merged into DE" --dry-run`,
		Args:    exactArgs(1, "a route name"),
	}
	addWriteFlags(cmd, &w)
	addIgnoreNotFoundFlag(cmd, &w.ignoreNotFound)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		name := args[0]
		return a.runWrite(ctx, w, a.orIgnoreAbsent(w.ignoreNotFound, removeConfigKey(routing.RouteKey(name), a.routingKey(routing.RouteKey(name)), "route "+name, "route does not exist", func(cfg *routing.Config) bool {
			_, ok := cfg.Routes[name]
			delete(cfg.Routes, name)
			return ok
		})))
	})
	return cmd
}

// boostedTargets says, when live boosts of route in cur set its targets,
// that a change of the route's own targets does not take effect while
// they live ("" otherwise): the newest boost's targets win.
func boostedTargets(cur *store.State, route string, now time.Time) string {
	var ids []string
	for _, id := range liveBoostsOf(cur, route, now) {
		if len(cur.Overrides[id].Override.Targets) > 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return ""
	}
	return fmt.Sprintf("route %s has live boost(s) that set its targets (%s): its new targets take effect only when they end (regionctl boost cancel ID ends one now)",
		route, strings.Join(ids, ", "))
}
