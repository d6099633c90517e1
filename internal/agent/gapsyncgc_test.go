package agent

import (
	"context"
	"runtime/debug"
	"testing"
)

// TestGapSyncGCIs50 guards the setting docs/agent.md names: until the
// first table is served the agent runs with GOGC=50.
func TestGapSyncGCIs50(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	lowerGCUntil(context.Background(), func(context.Context) error {
		if got := gcPercent(); got != 50 {
			t.Errorf("GOGC %d while syncing, want 50", got)
		}
		return nil
	})
}
