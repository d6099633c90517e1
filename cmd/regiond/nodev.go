//go:build nodev

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newDevCommand, in a packaged build (-tags nodev), explains where dev mode
// went: the embedded etcd server is left out of the binary, which makes it
// smaller and its resident memory lower.
func newDevCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "dev",
		Short:              "Not in this build (-tags nodev); use `go run ./cmd/regiond dev` from a source checkout",
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("this regiond was built with -tags nodev, without the embedded etcd; run `go run ./cmd/regiond dev` from a source checkout")}
		},
	}
}
