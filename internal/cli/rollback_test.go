package cli

import (
	"strings"
	"testing"
)

// TestRollback: rollback N writes a new epoch whose config equals the
// config right after epoch N, deleting what was added since.
func TestRollback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()                                                                                    // epoch 1
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=60", "--target", "eu-west=40") // 2
	atTwo := e.must(ExitOK, "export").stdout
	e.must(ExitOK, "pool", "set", "eu-east", "--host", "edge-waw-1.example.net", "--residency", "eu") // 3
	e.must(ExitOK, "route", "set", "SK", "--target", "eu-east=100")                                   // 4
	e.must(ExitOK, "route", "rm", "CZ")                                                               // 5
	e.must(ExitOK, "boost", "JP", "--target", "kr-music=100", "--ttl", "1h", "--id", "jp")            // 6
	e.must(ExitOK, "pool", "drain", "eu-north")                                                       // 7
	if strings.Contains(e.must(ExitOK, "export").stdout, "CZ:") {
		t.Fatal("CZ still exported after route rm")
	}

	dry := e.must(ExitOK, "rollback", "2", "--dry-run")
	for _, want := range []string{"SK: removed", "pool eu-east: removed", "CZ: added", "pool eu-north: status draining→active"} {
		if !strings.Contains(dry.stdout, want) {
			t.Errorf("rollback --dry-run: missing %q in %s", want, dry)
		}
	}
	r := e.must(ExitOK, "rollback", "2", "--reason", "undo the SK experiment")
	if !strings.Contains(r.stdout, "epoch 7 → 8") {
		t.Fatalf("rollback: %s", r)
	}
	if got := e.must(ExitOK, "export").stdout; got != atTwo {
		t.Fatalf("config after rollback 2:\n%s\nwant the config of epoch 2:\n%s", got, atTwo)
	}
	if e.get(e.ks.RoutingKey("overrides/jp")) == "" {
		t.Fatal("rollback removed a boost")
	}
	if rec := e.audit(8); rec.Command != "rollback 2 --reason undo the SK experiment" || rec.Reason != "undo the SK experiment" {
		t.Fatalf("audit of the rollback: %+v", rec)
	}
	// Rolling back to the epoch we are at again is a no-op.
	if r := e.must(ExitOK, "rollback", "8"); !strings.Contains(r.stdout, "no changes") {
		t.Fatalf("rollback to the current epoch: %s", r)
	}
	e.must(ExitRefused, "rollback", "99")
	e.must(ExitUsage, "rollback", "two")
}
