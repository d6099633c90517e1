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

// TestHistoryTableKeepsItsRows: a --reason of several lines, or with a
// tab, is one row of history's table, its control characters escaped
// (raw, they broke the rows and columns); -o json keeps the reason as
// written, '&' included (it was \u0026).
func TestHistoryTableKeepsItsRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "drain", "eu-north", "--reason", "drain & reboot\nticket:\tOPS-1")
	r := e.must(ExitOK, "history")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], `drain & reboot\nticket:\tOPS-1`) { // newest first
		t.Fatalf("history: want a header and two rows, the reason escaped:\n%s", r.stdout)
	}
	r = e.must(ExitOK, "history", "-o", "json")
	if !strings.Contains(r.stdout, `"reason": "drain & reboot\nticket:\tOPS-1"`) {
		t.Fatalf("history -o json: want the reason as written:\n%s", r.stdout)
	}
}
