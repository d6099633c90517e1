package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// defaultConvergeWait is the timeout of a bare --wait-converged.
const defaultConvergeWait = time.Minute

// writeOpts are the flags every write takes.
type writeOpts struct {
	reason string
	dryRun bool
	wait   time.Duration
	retry  int
	force  bool
	notes  []string // printed after the diff of a real write
}

func addWriteFlags(cmd *cobra.Command, w *writeOpts) {
	f := cmd.Flags()
	f.StringVar(&w.reason, "reason", "", "why: stored in the audit record")
	f.BoolVar(&w.dryRun, "dry-run", false, "print the diff and write nothing")
	f.DurationVar(&w.wait, "wait-converged", 0, "after writing, wait until every live agent serves the new revision (bare flag: "+defaultConvergeWait.String()+")")
	f.Lookup("wait-converged").NoOptDefVal = defaultConvergeWait.String()
	f.IntVar(&w.retry, "retry", 0, "on a concurrent change, re-read and retry up to N times")
	f.BoolVar(&w.force, "force", false, "write even if some country would be left with no eligible pool")
}

// writeResult is the JSON/YAML output of a write.
type writeResult struct {
	PrevEpoch int64            `json:"prev_epoch"`
	Epoch     int64            `json:"epoch"`
	Revision  int64            `json:"revision"`
	DryRun    bool             `json:"dry_run"`
	NoOp      bool             `json:"noop"`
	Diff      []string         `json:"diff"`
	Changes   []routing.Change `json:"changes"`
	Converged *bool            `json:"converged,omitempty"`
	Notes     []string         `json:"notes,omitempty"`
}

// afterReadHook is a context key for tests: a func() run after each read
// of a write, before its Txn (to provoke a conflict deterministically).
type afterReadHook struct{}

// buildFunc builds the proposed change from the current state.
type buildFunc func(ctx context.Context, cur *store.State) (*store.Plan, error)

// runWrite sends one write through the store, prints the diff and the new
// epoch, and waits for convergence when asked.
func (a *app) runWrite(ctx context.Context, w writeOpts, build buildFunc) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	res, err := st.Write(ctx, store.WriteRequest{
		Command: a.command(), Reason: w.reason, User: a.userName(), Host: host,
		DryRun: w.dryRun, Retry: w.retry,
		Build: func(ctx context.Context, cur *store.State) (*store.Plan, error) {
			if hook, ok := ctx.Value(afterReadHook{}).(func()); ok {
				hook()
			}
			p, err := build(ctx, cur)
			if p != nil {
				p.Force = p.Force || w.force
			}
			return p, err
		},
	})
	if err != nil {
		return err
	}
	out := writeResult{PrevEpoch: res.PrevEpoch, Epoch: res.Epoch, Revision: res.Revision,
		DryRun: res.DryRun, NoOp: res.NoOp, Changes: res.Changes, Diff: diffLines(res.Changes)}
	if !res.DryRun && !res.NoOp {
		out.Notes = w.notes
	}
	var waitErr error
	if w.wait > 0 && !res.DryRun && !res.NoOp {
		wctx, cancel := context.WithTimeout(ctx, w.wait)
		waitErr = st.WaitConverged(wctx, res.Revision)
		cancel()
		ok := waitErr == nil
		out.Converged = &ok
	}
	if err := a.printer().print(out, func(tw io.Writer) { printWriteTable(tw, out) }); err != nil {
		return err
	}
	return waitErr
}

func diffLines(changes []routing.Change) []string {
	out := make([]string, len(changes))
	for i, c := range changes {
		out[i] = describeChange(c)
	}
	return out
}

func printWriteTable(w io.Writer, r writeResult) {
	for _, line := range r.Diff {
		fmt.Fprintln(w, line)
	}
	switch {
	case r.NoOp:
		fmt.Fprintf(w, "no changes; epoch stays %d\n", r.Epoch)
	case r.DryRun:
		fmt.Fprintf(w, "dry run: would write epoch %d (%d key(s)); nothing written\n", r.Epoch, len(r.Changes))
	default:
		fmt.Fprintf(w, "epoch %d → %d at revision %d (%d key(s))\n", r.PrevEpoch, r.Epoch, r.Revision, len(r.Changes))
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, n)
	}
	if r.Converged != nil && *r.Converged {
		fmt.Fprintf(w, "converged: every live agent serves revision %d or later\n", r.Revision)
	}
}

// configPlan is the common build step of config verbs: clone the current
// config, let change modify it, propose the result.
func configPlan(change func(cfg *routing.Config) error) buildFunc {
	return func(_ context.Context, cur *store.State) (*store.Plan, error) {
		cfg := cloneConfig(cur.Config)
		if err := change(cfg); err != nil {
			return nil, err
		}
		return &store.Plan{Config: cfg}, nil
	}
}
