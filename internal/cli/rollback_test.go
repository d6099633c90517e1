package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/regiond/regiond/routing"
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
	e.must(ExitOK, "pool", "drain", "eu-north", "--reason", "sto link down")                          // 7
	if strings.Contains(e.must(ExitOK, "export").stdout, "CZ:") {
		t.Fatal("CZ still exported after route rm")
	}

	// rollback 2 undoes the config changes of 3, 4, 5 and 7, another
	// operator's drain among them (6, a boost, it leaves alone): it says
	// so, naming each, in the dry run and the write.
	undoes := []string{"regionctl: warning: rollback to epoch 2 restores its whole config: it undoes the config changes of 4 later epochs, not only the first: ",
		"3 (pool set eu-east", "5 (route rm CZ", "7 (pool drain eu-north --reason 'sto link down' by ", `"sto link down")`, "boosts are kept"}
	dry := e.must(ExitOK, "rollback", "2", "--dry-run")
	for _, want := range []string{"SK: removed", "pool eu-east: removed", "CZ: added", "pool eu-north: status draining→active"} {
		if !strings.Contains(dry.stdout, want) {
			t.Errorf("rollback --dry-run: missing %q in %s", want, dry)
		}
	}
	if !containsAll(dry.stderr, undoes) || strings.Contains(dry.stderr, "6 (boost") {
		t.Errorf("rollback --dry-run: want the later epochs that changed the config named, %q, and not the boost's, in %s", undoes, dry)
	}
	r := e.must(ExitOK, "rollback", "2", "--reason", "undo the SK experiment")
	if !strings.Contains(r.stdout, "epoch 7 → 8") || !containsAll(r.stderr, undoes) {
		t.Fatalf("rollback: %s", r)
	}
	if got := e.must(ExitOK, "export").stdout; got != atTwo {
		t.Fatalf("config after rollback 2:\n%s\nwant the config of epoch 2:\n%s", got, atTwo)
	}
	if e.get(e.ks.RoutingKey("overrides/jp")) == "" {
		t.Fatal("rollback removed a boost")
	}
	if rec := e.audit(8); rec.Command != "rollback 2 --reason 'undo the SK experiment'" || rec.Reason != "undo the SK experiment" {
		t.Fatalf("audit of the rollback: %+v", rec)
	}
	// Undoing one config change, a boost after it, says nothing more.
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=50", "--target", "eu-west=50") // 9
	e.must(ExitOK, "boost", "JP", "--target", "kr-music=100", "--ttl", "1h", "--id", "jp2")     // 10
	if r := e.must(ExitOK, "rollback", "8", "--dry-run"); len(otherWarnings(r.stderr)) > 0 {
		t.Errorf("rollback of one config change: %s; want no warning", r)
	}
	e.must(ExitOK, "rollback", "8") // 11
	// Rolling back to the epoch we are at again is a no-op, and so is one
	// to before boosts alone: nothing to warn of.
	if r := e.must(ExitOK, "rollback", "11"); !strings.Contains(r.stdout, "no changes") {
		t.Fatalf("rollback to the current epoch: %s", r)
	}
	e.must(ExitOK, "boost", "cancel", "jp2") // 12
	e.must(ExitOK, "boost", "cancel", "jp")  // 13
	if r := e.must(ExitOK, "rollback", "11", "--dry-run"); !strings.Contains(r.stdout, "no changes") || len(otherWarnings(r.stderr)) > 0 {
		t.Fatalf("rollback over boosts alone: %s; want no changes, no warning", r)
	}
	e.must(ExitOK, "pool", "drain", "eu-west", "--force")   // 14
	e.must(ExitOK, "pool", "undrain", "eu-west", "--force") // 15: back as at 13
	if r := e.must(ExitOK, "rollback", "13", "--dry-run"); !strings.Contains(r.stdout, "no changes") || len(otherWarnings(r.stderr)) > 0 {
		t.Fatalf("rollback over changes undone since: %s; want no changes, no warning", r)
	}
	e.must(ExitRefused, "rollback", "99")
	e.must(ExitUsage, "rollback", "two")
}

// TestRollbackToTheCurrentEpoch: a hand edit made after the current epoch
// (etcdctl, no epoch of its own) is not part of that epoch's config:
// rollback to the current epoch restores the value the epoch committed,
// in a new epoch.
func TestRollbackToTheCurrentEpoch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed() // epoch 1
	key := e.ks.RoutingKey(routing.PoolKey("eu-north"))
	orig := e.get(key)
	if _, err := testClient.Put(context.Background(), key,
		`{"host":"evil.example.net:443","region":"eu-north","residency":"eu","status":"active"}`); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "rollback", "1", "--reason", "undo a hand edit")
	if !strings.Contains(r.stdout, "epoch 1 → 2") {
		t.Errorf("rollback 1: %s, want a new epoch", r)
	}
	if got := e.get(key); got != orig {
		t.Errorf("after rollback 1: pools/eu-north = %s, want epoch 1's %s", got, orig)
	}
	// A key added by hand since, whose value does not decode, is not in
	// that epoch's config: the rollback deletes it too (a mutation
	// review: no test held it).
	added := e.ks.RoutingKey(routing.RouteKey("SK"))
	e.putHandEdit(routing.RouteKey("SK"), "{")
	e.must(ExitOK, "rollback", "1", "--reason", "undo a bad hand edit")
	if got := e.get(added); got != "" {
		t.Errorf("after rollback 1: routes/SK = %q, added by hand since and not decoding; want it deleted", got)
	}
}
