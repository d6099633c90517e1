//go:build !dev || nodev

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newDevCommand, in a production build (the default, and -tags nodev),
// explains where dev mode went: the embedded etcd server is left out of
// the binary, which makes it smaller and its resident memory lower. Dev
// mode is built with -tags dev.
func newDevCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "dev",
		Short:              "Not in this build (a production build: no -tags dev, or -tags nodev); use `go run -tags dev ./cmd/regiond dev` from a source checkout",
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("this regiond is a production build (no -tags dev, or -tags nodev), without the embedded etcd; run `go run -tags dev ./cmd/regiond dev` from a source checkout")}
		},
	}
}
