package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/version"
)

// versionInfo is what `regionctl version -o json` prints.
type versionInfo struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print regionctl's version (set at build time from the git tag or commit)",
		Example: `  regionctl version
  regionctl version -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: a.verb(func(context.Context, *cobra.Command, []string) error {
			v := versionInfo{Version: version.String(), Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
			return a.printer().print(v, func(w io.Writer) {
				fmt.Fprintf(w, "regionctl %s (%s %s/%s)\n", v.Version, v.Go, v.OS, v.Arch)
			})
		}),
	}
}
