package logbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWritesAndReads: lines written from many goroutines while
// another reads all arrive whole (run with -race).
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				fmt.Fprintf(&b, "g%d line %d\n", g, i)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "g") || !strings.Contains(l, " line ") {
			t.Fatalf("a torn line: %q", l)
		}
	}
}
