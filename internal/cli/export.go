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
runtime state and are not exported.`,
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
		a.log.Warn("stored value does not decode and is not exported", "key", k)
	}
	cfg, extras := withoutExtras(cur.Config)
	for _, x := range extras {
		a.log.Warn("stored value has fields this regionctl does not know; not exported (a config file is strict), and kept by apply", "key", x)
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
