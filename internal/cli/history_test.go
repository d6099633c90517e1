package cli

import (
	"strings"
	"testing"
)

// TestHistoryOfAnEpochNotYetWritten: history N past the current epoch says
// so, with the current epoch, not that old records were dropped.
func TestHistoryOfAnEpochNotYetWritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	r := e.run("history", "999")
	if r.code == ExitOK || !strings.Contains(r.stderr, "the current epoch is 1") || strings.Contains(r.stderr, "only the newest") {
		t.Fatalf("history 999 at epoch 1: %s; want a refusal naming the current epoch", r)
	}
}
