package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) exportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print the stored config as a config file (YAML; -o json for JSON)",
		Long: `export prints pools, routes and policy in the format apply reads;
applying the output unchanged is a no-op. Boosts and health keys are
runtime state and are not exported.

A stored value that does not decode (a hand edit: regionctl validate says
what is wrong) cannot be exported: it is left out and named on stderr,
and apply --prune of the output deletes it, while agents serve its last
good value until then. Fix it first (pool set, route set), or leave
--prune out. Stored fields this regionctl does not know are left out
too, named on stderr, and kept by apply.`,
		Example: `  regionctl export > fleet.yaml
  regionctl export -o json | jq '.routes.PL'
  regionctl export kv --out kv.json   # per-country values for an edge KV store`,
		Args: exactArgs(0, "no arguments"),
	}
	cmd.AddCommand(a.exportKVCmd())
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		return a.runExport(ctx)
	})
	return cmd
}

func (a *app) runExport(ctx context.Context) error {
	cur, err := a.load(ctx)
	if err != nil {
		return err
	}
	for _, k := range cur.InvalidConfigKeys() {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s: the stored value does not decode, so it is not exported: apply --prune of this output deletes it "+
			"(agents serve its last good value until then); fix it first (regionctl validate says what is wrong)\n", k)
	}
	cfg, extras := withoutExtras(cur.Config)
	for _, x := range extras {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s: stored fields this regionctl does not know are not exported (a config file is strict); apply keeps them\n", x)
	}
	if a.output == "json" {
		return a.printer().print(cfg, nil)
	}
	b, err := cfg.YAML()
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	_, err = a.stdout.Write(b)
	return err
}
