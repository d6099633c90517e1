package main

import (
	"bytes"
	"testing"

	"github.com/regiond/regiond/internal/version"
)

// regiond --version prints the build's version (set with -ldflags -X on
// internal/version.Version, as go run ./packaging does) and starts nothing.
func TestVersionFlag(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v1.2.3-4-gabcdef0"
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "regiond v1.2.3-4-gabcdef0\n" {
		t.Fatalf("regiond --version printed %q", got)
	}
}
