package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
)

func (a *app) historyCmd() *cobra.Command {
	var limit int64
	cmd := &cobra.Command{
		Use:   "history [EPOCH]",
		Short: "List the audit trail, or show one epoch's changes",
		Example: `  regionctl history
  regionctl history --limit 100 -o json
  regionctl history 42`,
		Args: cobra.MaximumNArgs(1),
	}
	cmd.Flags().Int64Var(&limit, "limit", 20, "newest records to list (0: all)")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		if len(args) == 1 {
			epoch, err := parseEpoch(args[0])
			if err != nil {
				return err
			}
			return a.runHistoryEpoch(ctx, epoch)
		}
		if limit < 0 {
			return usagef("--limit %d: want 0 (all) or more", limit)
		}
		return a.runHistory(ctx, limit)
	})
	return cmd
}

func parseEpoch(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, usagef("epoch %q: want a positive integer (see regionctl history)", s)
	}
	return n, nil
}

func (a *app) runHistory(ctx context.Context, limit int64) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	recs, err := st.History(ctx, limit)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.Rewritten {
			fmt.Fprintf(a.stderr, "regionctl: warning: the audit record of epoch %d was put again after its commit: it is not what that commit wrote (its revision %d is the rewrite's; \"rewritten\" in -o json)\n", r.Epoch, r.Revision)
		}
	}
	return a.printer().print(recs, func(w io.Writer) {
		row(w, "EPOCH", "AT", "USER", "KEYS", "REASON", "COMMAND")
		for _, r := range recs {
			row(w, r.Epoch, r.At, orDash(r.User), len(r.Changes), orDash(r.Reason), r.Command)
		}
	})
}

func (a *app) runHistoryEpoch(ctx context.Context, epoch int64) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	rec, err := st.AuditRecord(ctx, epoch)
	if err != nil {
		return err
	}
	if rec.Rewritten {
		fmt.Fprintf(a.stderr, "regionctl: warning: the audit record of epoch %d was put again after its commit: it is not what that commit wrote (its revision %d is the rewrite's)\n", rec.Epoch, rec.Revision)
	}
	return a.printer().print(rec, func(w io.Writer) { printAudit(w, rec) })
}

func printAudit(w io.Writer, r store.AuditEntry) {
	fmt.Fprintf(w, "epoch %d at %s (revision %d)\n", r.Epoch, r.At, r.Revision)
	fmt.Fprintf(w, "by %s on %s: %s\n", orDash(r.User), orDash(r.Host), r.Command)
	if r.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", r.Reason)
	}
	for _, line := range diffLines(r.Changes) {
		fmt.Fprintf(w, "  %s\n", line)
	}
}
