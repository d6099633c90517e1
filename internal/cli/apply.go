package cli

import (
	"context"

	"github.com/spf13/cobra"
)

func (a *app) applyCmd() *cobra.Command {
	var (
		file  string
		prune bool
		w     writeOpts
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Write a config file (YAML or JSON) as one validated change",
		Long: `apply sets every pool, route and policy of the file. Without --prune it
never deletes; with --prune, pools, routes and policy absent from the file
are deleted. Boosts, health keys and the epoch are never pruned. Applying
a file equal to the stored config is a no-op (no new epoch).

A residency policy that takes a country out of the class the stored
policy puts it in (a code removed from its class, a class removed, a code
moved to another class, unknown_country_class changed; with no policy
stored, the built-in one counts as stored) is refused, naming each code,
its class and the routes that may then send its viewers to pools of
another residency, unless --allow-residency-change is given (--force does
not allow it).`,
		Example: `  regionctl apply -f fleet.yaml --dry-run
  regionctl apply -f fleet.yaml --prune --reason "quarterly cleanup" --wait-converged`,
		Args: exactArgs(0, "no arguments"),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "config file (YAML or JSON; - reads standard input)")
	cmd.Flags().BoolVar(&prune, "prune", false, "delete pools, routes and policy absent from the file")
	addWriteFlags(cmd, &w)
	addResidencyFlag(cmd, &w.allowResidency)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		return a.runApply(ctx, file, prune, w)
	})
	return cmd
}

func (a *app) runApply(ctx context.Context, file string, prune bool, w writeOpts) error {
	cfg, err := a.readConfigFile(file)
	if err != nil {
		return err
	}
	w.ownWarnings = true // filePlan's: of the file with the stored config
	return a.runWrite(ctx, w, a.filePlan(cfg, configFileName(file), prune))
}
