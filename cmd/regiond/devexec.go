//go:build !dev && !nodev

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/safedir"
)

// modulePath is this module's path: `regiond dev` re-runs it with -tags dev.
const modulePath = "github.com/regiond/regiond"

// newDevCommand, in the default build, hands `regiond dev` to a build that
// has it: the embedded etcd server is linked only with -tags dev, so the
// binary operators run (go build ./cmd/regiond) is smaller and lighter. From
// a source checkout with the Go toolchain (`go run ./cmd/regiond dev`, the
// README's command) it builds that binary (`go build -tags dev`, into the
// user's cache directory; Go's build cache makes it quick after the first
// time) and replaces itself with it, `regiond dev ARGS…`; elsewhere it says
// how to get dev mode.
func newDevCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Run a single-node dev setup: embedded etcd, the example config, the API on 127.0.0.1:7420",
		Long: `Run a single-node dev setup: embedded etcd, the example config, the API on
127.0.0.1:7420. This build leaves the embedded etcd out (production builds
should not carry it), so from a source checkout it builds
  go build -tags dev ./cmd/regiond
(into the user's cache directory) and runs its dev ARGS… in its place (see that build's --help: go run -tags dev ./cmd/regiond dev --help).`,
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
	out, err := exec.Command(goBin, "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	mod, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if err != nil || mod != modulePath {
		return usageError{fmt.Errorf("this regiond build has no embedded etcd, and %s is not inside a checkout of %s (go list -m: %q): run `go run ./cmd/regiond dev` from the checkout", cwd(), modulePath, mod)}
	}
	// Built, then run in this process's place (not by go run, which
	// reports the program's exit code as its own 1 and prints "exit
	// status N"): one binary per checkout, kept in the user's cache; the
	// go command's build cache makes a build with nothing changed quick.
	bin, err := devBinary(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); errors.Is(err, os.ErrNotExist) {
		// The first build links the embedded etcd server: long enough
		// to look hung when nothing is said.
		fmt.Fprintf(os.Stderr, "regiond dev: building the dev binary, the first time for this checkout (go build -tags dev -o %s ./cmd/regiond): this takes a minute or more, later runs are quick\n", bin)
	}
	build := exec.Command(goBin, "build", "-tags", "dev", "-o", bin, modulePath+"/cmd/regiond")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the dev binary (go build -tags dev -o %s ./cmd/regiond): %w", bin, err)
	}
	if err := syscall.Exec(bin, append([]string{os.Args[0], "dev"}, args...), os.Environ()); err != nil {
		return fmt.Errorf("regiond dev: exec %s: %w", bin, err)
	}
	return nil // not reached
}

// devBinary is where the dev build of the checkout at dir goes: in the
// user's cache directory, named after dir.
func devBinary(dir string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(dir))
	d := filepath.Join(cache, "regiond-dev")
	// Its own, writable by no one else: the binary built there is run
	// (in a shared /tmp, another user could make the directory first).
	if err := safedir.Ensure(d, "dev build directory", 0o700, safedir.NoGroup); err != nil {
		return "", fmt.Errorf("regiond dev: %w", err)
	}
	return filepath.Join(d, "regiond-"+hex.EncodeToString(sum[:6])), nil
}

func cwd() string {
	d, err := os.Getwd()
	if err != nil {
		return "this directory"
	}
	return d
}
