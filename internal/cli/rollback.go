package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
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
change (pool undrain, route set).

A rollback to a residency policy that takes a country out of the class
the stored policy puts it in is refused, as apply's is, unless
--allow-residency-change is given.`,
		Example: `  regionctl history
  regionctl rollback 41 --reason "42 broke PL" --dry-run
  regionctl rollback 41 --reason "42 broke PL" --wait-converged`,
		Args: exactArgs(1, "an epoch"),
	}
	addWriteFlags(cmd, &w)
	addResidencyFlag(cmd, &w.allowResidency)
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
		return store.NothingWritten(err) // etcd not reached: no Txn sent
	}
	var undone string
	w.warning = func() string { return undone }
	w.ownWarnings = true // of the epoch's config, below
	notesShown := false  // once, not per retry
	return a.runWrite(ctx, w, func(ctx context.Context, cur *store.State) (*store.Plan, error) {
		cfg, notes, err := st.ConfigAt(ctx, epoch, cur)
		if err != nil {
			return nil, err
		}
		if !notesShown {
			notesShown = true
			for _, n := range notes {
				fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", n)
			}
			// What apply and validate warn of in a file (a part of the EU
			// in no class: the policy of a release before it was added).
			a.warnConfig(cfg, fmt.Sprintf("the config of epoch %d", epoch))
		}
		undone = laterEpochs(ctx, st, epoch, cur.Epoch)
		return &store.Plan{Config: cfg, Prune: true}, nil
	})
}

// maxNamedEpochs is how many later epochs a rollback's warning names;
// maxReadEpochs how many audit records it reads to find them.
const (
	maxNamedEpochs = 10
	maxReadEpochs  = 1000
)

// laterEpochs says, when a rollback to epoch from cur undoes the config
// changes of more than one later epoch, which (their audit records: who,
// what, why), or "": "rollback 41" reads like "undo 42", and it also
// undoes 43, another operator's drain. Epochs that changed only boosts
// are not undone (rollback leaves boosts alone) and not counted. A read
// that fails names the epochs only.
func laterEpochs(ctx context.Context, st *store.Store, epoch, cur int64) string {
	n := cur - epoch
	if n < 2 {
		return ""
	}
	recs, err := st.History(ctx, min(n, maxReadEpochs))
	if err != nil {
		return fmt.Sprintf("rollback to epoch %d restores its whole config: it undoes every config change of epochs %d to %d, not only %d's (regionctl history; to undo one change only, make the opposite change)",
			epoch, epoch+1, cur, epoch+1)
	}
	var named []string
	undone := 0
	kept := map[int64]bool{}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		kept[r.Epoch] = true
		if r.Epoch <= epoch || !changesConfig(r.Changes) {
			continue
		}
		undone++
		if len(named) < maxNamedEpochs {
			who := r.User
			if r.Host != "" {
				who += "@" + r.Host
			}
			desc := fmt.Sprintf("%d (%s by %s: %q)", r.Epoch, r.Command, who, r.Reason)
			if r.Rewritten { // what it says may not be what its commit did
				desc = fmt.Sprintf("%d (its audit record put again after its commit, so not what it wrote: %s by %s: %q)", r.Epoch, r.Command, who, r.Reason)
			}
			named = append(named, desc)
		}
	}
	// Epochs of the range whose audit record is not kept (deleted by
	// hand: the records are kept far longer than maxReadEpochs) may have
	// changed the config: their changes are undone too, unseen (the
	// write-verbs review: a rollback over one said nothing).
	var missing []string
	if n <= maxReadEpochs {
		for e := epoch + 1; e <= cur; e++ {
			if !kept[e] {
				missing = append(missing, fmt.Sprint(e))
			}
		}
	}
	if undone+len(missing) < 2 && n <= maxReadEpochs {
		return ""
	}
	if more := undone - len(named); more > 0 {
		named = append(named, fmt.Sprintf("and %d more", more))
	}
	if len(missing) > 0 {
		if len(missing) > maxNamedEpochs {
			missing = append(missing[:maxNamedEpochs], fmt.Sprintf("and %d more", len(missing)-maxNamedEpochs))
		}
		named = append(named, fmt.Sprintf("and whatever epoch(s) %s changed: their audit records are not kept (deleted by hand?)", strings.Join(missing, ", ")))
		undone += len(missing)
	}
	count := fmt.Sprint(undone)
	if n > maxReadEpochs {
		count = "at least " + count
	}
	return fmt.Sprintf("rollback to epoch %d restores its whole config: it undoes the config changes of %s later epochs, not only the first: %s (boosts are kept; regionctl history; to undo one change only, make the opposite change)",
		epoch, count, strings.Join(named, ", "))
}

// changesConfig reports whether an audit record's changes touch the config
// (pools, routes, policy), not only boosts.
func changesConfig(changes []routing.Change) bool {
	for _, c := range changes {
		if !strings.HasPrefix(c.Key, routing.OverrideKey("")) {
			return true
		}
	}
	return false
}
