package cli

import (
	"context"
	"fmt"
	"strings"

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
Boosts and health keys are not touched.

It undoes every epoch written after EPOCH, not only the next one: when
that is more than one (another operator's drain since?), a warning names
each, in the dry run too. To undo one change only, make the opposite
change (pool undrain, route set).`,
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
	var undone string
	w.warning = func() string { return undone }
	return a.runWrite(ctx, w, func(ctx context.Context, cur *store.State) (*store.Plan, error) {
		cfg, err := st.ConfigAt(ctx, epoch, cur)
		if err != nil {
			return nil, err
		}
		undone = laterEpochs(ctx, st, epoch, cur.Epoch)
		return &store.Plan{Config: cfg, Prune: true}, nil
	})
}

// maxNamedEpochs is how many later epochs a rollback's warning names.
const maxNamedEpochs = 10

// laterEpochs says, when a rollback to epoch from cur undoes more than
// the epoch after it, which epochs it undoes (their audit records: who,
// what, why), or "": "rollback 41" reads like "undo 42", and it also
// undoes 43, another operator's drain. A read that fails names the epochs
// only.
func laterEpochs(ctx context.Context, st *store.Store, epoch, cur int64) string {
	n := cur - epoch
	if n < 2 {
		return ""
	}
	recs, err := st.History(ctx, min(n, maxNamedEpochs))
	var named []string
	if err == nil {
		for i := len(recs) - 1; i >= 0; i-- {
			r := recs[i]
			if r.Epoch <= epoch {
				continue
			}
			who := r.User
			if r.Host != "" {
				who += "@" + r.Host
			}
			named = append(named, fmt.Sprintf("%d (%s by %s: %q)", r.Epoch, r.Command, who, r.Reason))
		}
	}
	if len(named) == 0 {
		named = []string{fmt.Sprintf("%d to %d", epoch+1, cur)}
	} else if more := n - int64(len(named)); more > 0 {
		named = append([]string{fmt.Sprintf("%d older", more)}, named...)
	}
	return fmt.Sprintf("rollback to epoch %d restores its whole config: it undoes the %d epochs written since, not only %d: %s (regionctl history; to undo one change only, make the opposite change)",
		epoch, n, epoch+1, strings.Join(named, ", "))
}
