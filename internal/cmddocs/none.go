//go:build !gendocs

// Package cmddocs generates man pages and shell completions from a cobra
// command tree, in builds with -tags gendocs only (see cmddocs.go); in
// other builds Register does nothing.
package cmddocs

import "github.com/spf13/cobra"

// Register does nothing without -tags gendocs.
func Register(*cobra.Command) {}
