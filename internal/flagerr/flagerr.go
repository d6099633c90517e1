// Package flagerr makes a mistyped flag of regiond or regionctl name the
// flags near it, as a mistyped command does.
package flagerr

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/regiond/regiond/internal/didyoumean"
)

// Near returns, sorted and as "--name", the flags of cmd (its own and
// inherited, not hidden) within an edit distance of 2 of the unknown one
// a flag error from pflag names ("unknown flag: --endpoint"); nil for any
// other error, or when none is near.
func Near(cmd *cobra.Command, err error) []string {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return nil
	}
	var near []string
	seen := map[string]bool{}
	visit := func(f *pflag.Flag) {
		if !f.Hidden && !seen[f.Name] && didyoumean.Distance(name, f.Name) <= 2 {
			seen[f.Name] = true
			near = append(near, "--"+f.Name)
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	slices.Sort(near)
	return near
}
