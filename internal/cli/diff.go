package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

func (a *app) diffCmd() *cobra.Command {
	var (
		file  string
		prune bool
	)
	cmd := &cobra.Command{
		Use:   "diff -f FILE",
		Short: "Show what apply -f FILE would change, and whether it would be refused",
		Example: `  regionctl diff -f fleet.yaml
  regionctl diff -f fleet.yaml --prune -o json`,
		Args: exactArgs(0, "no arguments"),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "config file (YAML or JSON)")
	cmd.Flags().BoolVar(&prune, "prune", false, "as apply --prune")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		return a.runDiff(ctx, file, prune)
	})
	return cmd
}

// diffResult is the JSON/YAML output of diff.
type diffResult struct {
	Epoch   int64            `json:"epoch"`
	Diff    []string         `json:"diff"`
	Changes []routing.Change `json:"changes"`
	Valid   bool             `json:"valid"`
}

func (a *app) runDiff(ctx context.Context, file string, prune bool) error {
	cfg, err := readConfigFile(file)
	if err != nil {
		return err
	}
	cur, err := a.load(ctx)
	if err != nil {
		return err
	}
	next := mergeConfig(cur.Config, cfg, prune)
	chg, err := a.st.Changes(cur, &store.Plan{Config: next, Prune: prune})
	if err != nil {
		return err
	}
	errs := routing.Validate(next)
	out := diffResult{Epoch: cur.Epoch, Diff: diffLines(chg), Changes: chg, Valid: len(errs) == 0}
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
	return nil
}
