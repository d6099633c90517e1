package phpfront

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartNoticesAServerThatExits: when nginx exits before it answers
// (a bad configuration, its port taken), Start says so at once, naming
// it, instead of waiting out its 20 s; and it leaves nothing running.
// Stand-ins play the servers: nginx exits at once, php-fpm keeps running.
func TestStartNoticesAServerThatExits(t *testing.T) {
	dir := t.TempDir()
	fpm := filepath.Join(dir, "fpm.sh")
	if err := os.WriteFile(fpm, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "index.php")
	s, err := Start(context.Background(), Config{Dir: dir, Script: script, Snapshot: filepath.Join(dir, "table.json"),
		PHPFPM: fpm, Nginx: "/bin/false"})
	if err == nil {
		s.Close()
		t.Fatal("Start with an nginx that exits at once: no error")
	}
	if !strings.Contains(err.Error(), "phpfront: nginx exited before it answered") || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("Start with an nginx that exits at once: %v", err)
	}
}
