package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpShowsTheCaps: the API's caps are flags, shown in regiond --help
// with their defaults.
func TestHelpShowsTheCaps(t *testing.T) { helpShowsTheCaps(t, "--help") }

// helpShowsTheCaps runs regiond with args and checks the caps' flags and
// defaults in its output.
func helpShowsTheCaps(t *testing.T, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("regiond %v: %v", args, err)
	}
	for _, want := range []string{"--max-blocking-queries int", "(default 128)", "--max-connections int", "(default 256)",
		"--fd-reserve int", "(default 64)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("regiond %v lacks %q:\n%s", args, want, out.String())
		}
	}
}
