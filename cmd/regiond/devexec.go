//go:build !dev && !nodev

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// modulePath is this module's path: `regiond dev` re-runs it with -tags dev.
const modulePath = "github.com/regiond/regiond"

// newDevCommand, in the default build, hands `regiond dev` to a build that
// has it: the embedded etcd server is linked only with -tags dev, so the
// binary operators run (go build ./cmd/regiond) is smaller and lighter. From
// a source checkout with the Go toolchain (`go run ./cmd/regiond dev`, the
// README's command) it replaces itself with
// `go run -tags dev github.com/regiond/regiond/cmd/regiond dev ARGS…`, which
// Go's build cache makes quick after the first time; elsewhere it says how to
// get dev mode.
func newDevCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Run a single-node dev setup: embedded etcd, the example config, the API on 127.0.0.1:7420",
		Long: `Run a single-node dev setup: embedded etcd, the example config, the API on
127.0.0.1:7420. This build leaves the embedded etcd out (production builds
should not carry it), so from a source checkout it runs
  go run -tags dev ./cmd/regiond dev ARGS…
in its place (see that build's --help: go run -tags dev ./cmd/regiond dev --help).`,
		Example:            "  go run ./cmd/regiond dev\n  curl '127.0.0.1:7420/v1/resolve?country=PL&key=viewer-42'",
		DisableFlagParsing: true,
		SilenceUsage:       true,
		RunE: func(_ *cobra.Command, args []string) error {
			return execDev(args)
		},
	}
}

// execDev replaces the process with the dev build, run by the go command
// from the module this directory belongs to.
func execDev(args []string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return usageError{errors.New("this regiond build has no embedded etcd and there is no go command to build one: run `go run ./cmd/regiond dev` from a source checkout of " + modulePath)}
	}
	out, err := exec.Command(goBin, "list", "-m").Output()
	if mod := strings.TrimSpace(string(out)); err != nil || mod != modulePath {
		return usageError{fmt.Errorf("this regiond build has no embedded etcd, and %s is not inside a checkout of %s (go list -m: %q): run `go run ./cmd/regiond dev` from the checkout", cwd(), modulePath, mod)}
	}
	argv := append([]string{"go", "run", "-tags", "dev", modulePath + "/cmd/regiond", "dev"}, args...)
	if err := syscall.Exec(goBin, argv, os.Environ()); err != nil {
		return fmt.Errorf("regiond dev: exec %s: %w", goBin, err)
	}
	return nil // not reached
}

func cwd() string {
	d, err := os.Getwd()
	if err != nil {
		return "this directory"
	}
	return d
}
