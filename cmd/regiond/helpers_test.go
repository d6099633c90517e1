package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/regiond/regiond/internal/freeport"
)

// buildRegiond builds the regiond binary, with the given build tags
// (none: the default build), into a temp dir.
func buildRegiond(t *testing.T, tags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "regiond")
	args := []string{"build"}
	if len(tags) > 0 {
		args = append(args, "-tags", tags[0])
		for _, tag := range tags[1:] {
			args[len(args)-1] += "," + tag
		}
	}
	out, err := exec.Command("go", append(args, "-o", bin, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// freeAddr is a free loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}
