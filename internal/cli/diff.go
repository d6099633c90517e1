package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

func (a *app) diffCmd() *cobra.Command {
	var (
		file         string
		prune, force bool
		allowRes     bool
		exitCode     bool
	)
	cmd := &cobra.Command{
		Use:   "diff -f FILE",
		Short: "Show what apply -f FILE would change, and whether it would be refused",
		Long: `diff reads the stored state, merges the file into it as apply would, and
runs every check apply runs (the whole config's validation, live boosts,
countries left with no eligible pool unless --force, countries taken out
of their residency class unless --allow-residency-change). It prints the
changes and exits 0 when apply would write them, 1 when apply would refuse
(naming why), also when etcd's NOSPACE alarm would refuse the write. It
writes nothing.

With --exit-code it exits 6 when apply would change something (and would
not refuse it), 0 only when etcd already holds the file: a drift check for
cron or CI, as git diff --exit-code (with --prune, keys in etcd that the
file does not name count as drift too).`,
		Example: `  regionctl diff -f fleet.yaml
  regionctl diff -f fleet.yaml --prune -o json
  regionctl diff -f fleet.yaml --prune --exit-code >/dev/null || echo "etcd drifted from fleet.yaml"`,
		Args: exactArgs(0, "no arguments"),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "config file (YAML or JSON; - reads standard input)")
	cmd.Flags().BoolVar(&prune, "prune", false, "as apply --prune")
	cmd.Flags().BoolVar(&force, "force", false, "as apply --force: do not refuse a change that leaves some country with no eligible pool")
	addResidencyFlag(cmd, &allowRes)
	cmd.Flags().BoolVar(&exitCode, "exit-code", false, "exit 6 when apply would change something, 0 when nothing differs")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		return a.runDiff(ctx, file, diffOpts{prune: prune, force: force, allowResidency: allowRes, exitCode: exitCode})
	})
	return cmd
}

// diffResult is the JSON/YAML output of diff.
type diffResult struct {
	Epoch   int64            `json:"epoch"`
	Diff    []string         `json:"diff"`
	Changes []routing.Change `json:"changes"`
	Valid   bool             `json:"valid"`
	// Problems are the refusals' lines (REFUSED … on stderr), when not
	// Valid.
	Problems []string `json:"problems,omitempty"`
	// Forced, with --force: the countries apply would leave with no
	// eligible pool (see writeResult).
	Forced string `json:"forced,omitempty"`
	// ResidencyChanged, with --allow-residency-change: the codes apply
	// would take out of their residency class (see writeResult).
	ResidencyChanged string `json:"residency_changed,omitempty"`
}

// diffOpts are diff's flags.
type diffOpts struct {
	prune, force, allowResidency, exitCode bool
}

// problemLines are errs as the REFUSED lines print them.
func problemLines(errs routing.Errors) []string {
	var out []string
	for _, e := range errs {
		out = append(out, strings.Split(e.Error(), "\n")...)
	}
	return out
}

// differsError is diff --exit-code's outcome when apply would change
// something: exit 6, with nothing more printed than the diff itself.
type differsError struct{ changes int }

// Error says how many changes differ.
func (e differsError) Error() string { return fmt.Sprintf("%d change(s) differ", e.changes) }

func (a *app) runDiff(ctx context.Context, file string, o diffOpts) error {
	prune := o.prune
	cfg, err := a.readConfigFile(file)
	var bad refusedError
	if errors.As(err, &bad) && a.output != "table" {
		// The file's own problems: -o json and yaml say so as a
		// refusal of the whole state does (valid false), no epoch read.
		_ = a.printer().print(struct {
			Valid    bool     `json:"valid"`
			Problems []string `json:"problems"`
		}{false, problemLines(bad.errs)}, nil)
	}
	if err != nil {
		return err
	}
	cur, err := a.load(ctx)
	if err != nil {
		return err
	}
	plan := &store.Plan{Config: mergeConfig(cur.Config, cfg, prune), Prune: prune, Force: o.force, AllowResidencyChange: o.allowResidency}
	for _, w := range mergedWarnings(plan.Config, configFileName(file), prune) {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", w)
	}
	c, err := a.st.Check(cur, plan) // what apply checks, no less
	if err != nil {
		return err
	}
	chg, errs := c.Changes, c.Problems
	a.warnForced(c.Forced)
	a.warnResidencyChanged(c.ResidencyChanged)
	out := diffResult{Epoch: cur.Epoch, Diff: diffLines(chg), Changes: chg, Valid: len(errs) == 0, Problems: problemLines(errs), Forced: c.Forced,
		ResidencyChanged: c.ResidencyChanged}
	err = a.printer().print(out, func(w io.Writer) {
		for _, l := range out.Diff {
			fmt.Fprintln(w, l)
		}
		if len(out.Diff) == 0 {
			fmt.Fprintf(w, "no changes (epoch %d)\n", cur.Epoch)
		}
	})
	if err != nil {
		return err
	}
	if len(errs) > 0 {
		return refusedError{errs}
	}
	if len(chg) > 0 { // apply would write: unless an etcd alarm refuses it
		if err := a.st.AlarmRaised(ctx, "diff"); err != nil {
			return err
		}
	}
	if o.exitCode && len(out.Diff) > 0 {
		return differsError{len(out.Diff)}
	}
	return nil
}
