//go:build gendocs

// Package cmddocs generates the documentation that the Debian package ships
// (man pages, bash, zsh and fish completions) from a binary's own cobra
// command tree, so they never drift from the flags. Only builds with
// -tags gendocs have it: go run ./packaging builds such a binary for the
// machine it runs on and calls the hidden verb
//
//	regionctl __gendocs DIR
//
// which writes DIR/man/*.1 and DIR/completions/{bash,zsh,fish}. Production
// binaries (without the tag) carry none of it.
package cmddocs

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/regiond/regiond/internal/version"
)

// Verb is the hidden verb that writes the documentation.
const Verb = "__gendocs"

// Register adds the hidden documentation verb to root.
func Register(root *cobra.Command) {
	root.AddCommand(&cobra.Command{
		Use:    Verb + " DIR",
		Short:  "Write man pages and shell completions under DIR (packaging)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		// The verb must run without the root's hooks (flag checks from
		// the environment, etcd).
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, args []string) error {
			return Write(cmd.Root(), args[0])
		},
	})
}

// Write writes root's man pages (section 1, one per command) under
// dir/man and its completions under dir/completions.
func Write(root *cobra.Command, dir string) error {
	man := filepath.Join(dir, "man")
	comp := filepath.Join(dir, "completions")
	for _, d := range []string{man, filepath.Join(comp, "bash"), filepath.Join(comp, "zsh"), filepath.Join(comp, "fish")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("gendocs: create %s: %w", d, err)
		}
	}
	root.DisableAutoGenTag = true // reproducible pages: no generation date
	// The date comes from SOURCE_DATE_EPOCH when set (cobra reads it).
	hdr := &doc.GenManHeader{Section: "1", Source: root.Name() + " " + version.String(), Manual: "regiond manual"}
	if err := doc.GenManTree(root, hdr, man); err != nil {
		return fmt.Errorf("gendocs: man pages of %s in %s: %w", root.Name(), man, err)
	}
	name := root.Name()
	for _, c := range []struct {
		path string
		gen  func(string) error
	}{
		{filepath.Join(comp, "bash", name), func(p string) error { return root.GenBashCompletionFileV2(p, true) }},
		{filepath.Join(comp, "zsh", "_"+name), root.GenZshCompletionFile},
		{filepath.Join(comp, "fish", name+".fish"), func(p string) error { return root.GenFishCompletionFile(p, true) }},
	} {
		if err := c.gen(c.path); err != nil {
			return fmt.Errorf("gendocs: completion %s: %w", c.path, err)
		}
	}
	return nil
}
