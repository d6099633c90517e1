package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
)

func (a *app) rollbackCmd() *cobra.Command {
	var w writeOpts
	cmd := &cobra.Command{
		Use:   "rollback EPOCH",
		Short: "Write a new epoch whose config equals that of EPOCH",
		Long: `rollback restores the pools, routes and policy exactly as they were right
after EPOCH was written (keys added since are deleted), as a new epoch with
its own audit record. The old config is validated like any other write.
Boosts and health keys are not touched.`,
		Example: `  regionctl history
  regionctl rollback 41 --reason "42 broke PL" --dry-run
  regionctl rollback 41 --reason "42 broke PL" --wait-converged`,
		Args: exactArgs(1, "an epoch"),
	}
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		epoch, err := parseEpoch(args[0])
		if err != nil {
			return err
		}
		return a.runRollback(ctx, epoch, w)
	})
	return cmd
}

func (a *app) runRollback(ctx context.Context, epoch int64, w writeOpts) error {
	a.writing(w)
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	return a.runWrite(ctx, w, func(ctx context.Context, cur *store.State) (*store.Plan, error) {
		cfg, err := st.ConfigAt(ctx, epoch, cur)
		if err != nil {
			return nil, err
		}
		return &store.Plan{Config: cfg, Prune: true}, nil
	})
}
