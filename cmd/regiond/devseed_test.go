//go:build dev && !nodev

package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/routing"
)

// TestDevSeedsANarrowerPolicy: regiond dev loads its --config into an
// empty store even when the file's residency policy is narrower than the
// built-in one, which regionctl apply refuses without
// --allow-residency-change (the built-in policy counts as stored): it is
// the dev store's first config, and the note says what it changes.
func TestDevSeedsANarrowerPolicy(t *testing.T) {
	example, err := os.ReadFile("../../examples/routing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	narrow := strings.Replace(string(example), "FR, DE, GR", "FR, GR", 1)
	cfg, err := routing.ParseConfig([]byte(narrow))
	if err != nil {
		t.Fatal(err)
	}
	srv := devetcd.NewTest(t)
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	got, err := seedConfig(context.Background(), srv, t.TempDir(), "/dev-seed", "narrow.yaml", cfg, nil, cmd)
	if err != nil || got != cfg {
		t.Fatalf("seed a policy without DE: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "loaded narrow.yaml into the empty store (epoch 1)") ||
		!strings.Contains(out.String(), "note: its residency policy differs from the built-in one: this write takes DE out of class eu (into no class)") {
		t.Fatalf("output:\n%s", out.String())
	}
}
