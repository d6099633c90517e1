package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/routing"
)

func (a *app) poolCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Create, change, drain or remove a pool",
		Example: `  regionctl pool set eu-central --host edge-fra-1.example.net:443 --residency eu --region eu-central
  regionctl pool drain eu-central --reason "kernel upgrade" --wait-converged`,
		RunE: groupRun,
	}
	cmd.AddCommand(a.poolSetCmd(), a.poolStatusCmd("drain", routing.StatusDraining),
		a.poolStatusCmd("undrain", routing.StatusActive), a.poolRmCmd())
	return cmd
}

// poolSetOpts are the flags of pool set.
type poolSetOpts struct {
	host, residency, region, status string
	healthCheck                     bool
	attrs, unsetAttrs               []string
}

func (a *app) poolSetCmd() *cobra.Command {
	var (
		o poolSetOpts
		w writeOpts
	)
	cmd := &cobra.Command{
		Use:   "set ID",
		Short: "Create a pool, or change the given fields of an existing one",
		Long: `Create a pool (--host and --residency are required), or change the given
fields of an existing pool; fields not given are kept.`,
		Example: `  regionctl pool set eu-east --host edge-waw-1.example.net:443 --residency eu --region eu-east --attr shard=eu-4
  regionctl pool set eu-central --attr max_rps=900 --reason "new hardware"`,
		Args: exactArgs(1, "a pool id"),
	}
	f := cmd.Flags()
	f.StringVar(&o.host, "host", "", "host name or IP, optional :port")
	f.StringVar(&o.residency, "residency", "", "residency class label (eu, us, apac, …)")
	f.StringVar(&o.region, "region", "", "region label")
	f.StringVar(&o.status, "status", "", "active, draining or down")
	f.BoolVar(&o.healthCheck, "health-check", false, "route only while a health key of the pool is alive")
	f.StringArrayVar(&o.attrs, "attr", nil, "attribute KEY=VALUE (repeatable)")
	f.StringArrayVar(&o.unsetAttrs, "unset-attr", nil, "remove attribute KEY (repeatable)")
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, cmd *cobra.Command, args []string) error {
		return a.runPoolSet(ctx, cmd, args[0], o, w)
	})
	return cmd
}

func (a *app) runPoolSet(ctx context.Context, cmd *cobra.Command, id string, o poolSetOpts, w writeOpts) error {
	changed := cmd.Flags().Changed
	return a.runWrite(ctx, w, configPlan(func(cfg *routing.Config) error {
		p, exists := cfg.Pools[id]
		if !exists && (!changed("host") || !changed("residency")) {
			return usagef("pool %s does not exist: creating it needs --host and --residency", id)
		}
		if changed("host") {
			p.Host = o.host
		}
		if changed("residency") {
			p.Residency = o.residency
		}
		if changed("region") {
			p.Region = o.region
		}
		if changed("status") {
			p.Status = o.status
		}
		if changed("health-check") {
			p.HealthCheck = o.healthCheck
		}
		attrs, err := applyAttrs(p.Attrs, o.attrs, o.unsetAttrs)
		if err != nil {
			return err
		}
		p.Attrs = attrs
		cfg.Pools[id] = p
		return nil
	}))
}

func (a *app) poolStatusCmd(verb, status string) *cobra.Command {
	var w writeOpts
	short := map[string]string{
		"drain":   "Stop sending new viewers to a pool (status draining)",
		"undrain": "Send viewers to a pool again (status active)",
	}[verb]
	cmd := &cobra.Command{
		Use:     verb + " ID",
		Short:   short,
		Example: "  regionctl pool " + verb + " eu-central --reason \"kernel upgrade\" --wait-converged=30s",
		Args:    exactArgs(1, "a pool id"),
	}
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		return a.runPoolStatus(ctx, args[0], status, w)
	})
	return cmd
}

func (a *app) runPoolStatus(ctx context.Context, id, status string, w writeOpts) error {
	return a.runWrite(ctx, w, configPlan(func(cfg *routing.Config) error {
		p, ok := cfg.Pools[id]
		if !ok {
			return refusef(routing.PoolKey(id), "pool does not exist")
		}
		p.Status = status
		cfg.Pools[id] = p
		return nil
	}))
}

func (a *app) poolRmCmd() *cobra.Command {
	var w writeOpts
	cmd := &cobra.Command{
		Use:     "rm ID",
		Short:   "Remove a pool (refused while a route still names it)",
		Example: `  regionctl pool rm eu-old --reason "decommissioned"`,
		Args:    exactArgs(1, "a pool id"),
	}
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		return a.runWrite(ctx, w, configPlan(func(cfg *routing.Config) error {
			if _, ok := cfg.Pools[args[0]]; !ok {
				return refusef(routing.PoolKey(args[0]), "pool does not exist")
			}
			delete(cfg.Pools, args[0])
			return nil
		}))
	})
	return cmd
}
