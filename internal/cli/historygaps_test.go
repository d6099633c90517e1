package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestHistoryOfTwoRecordsNamesTheHoleBetween: a list of just two records
// (history --limit 2) with a record deleted by hand between them names
// the hole, as a longer list does (a mutation review: the check ran only
// from three records up, and no test held two).
func TestHistoryOfTwoRecordsNamesTheHoleBetween(t *testing.T) {
	t.Parallel()
	e := epochsOfPL(t, 6)
	if _, err := testClient.Delete(context.Background(), e.ks.Audit(5)); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(historyEpochs(t, e, "--limit", "2")); got != "[6 4]" {
		t.Fatalf("history --limit 2: epochs %s, want [6 4]", got)
	}
	want := "regionctl: warning: the audit record of epoch 5 is missing, though older and newer ones are kept"
	if r := e.must(ExitOK, "history", "--limit", "2"); !strings.Contains(r.stderr, want) {
		t.Errorf("history --limit 2 over a deleted record: %s; want %q", r, want)
	}
}

// TestHistoryKeepsTheNewest10000Exactly: at epoch 10001 regionctl keeps
// the records of epochs 2 to 10001, so the oldest kept being epoch 2 is
// no deletion by hand, and with every record deleted the ones missing
// are epochs 2 to 10001, not 1 (a mutation review: an off-by-one in the
// window of the newest 10000 went unseen, every test being below it).
func TestHistoryKeepsTheNewest10000Exactly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	const cur = 10001
	rec := func(ep int64) string {
		return fmt.Sprintf(`{"epoch":%d,"at":"2026-12-06T02:40:03Z","user":"bot","host":"ci","reason":"r","command":"pool set eu-north","changes":[{"key":"pools/eu-north","op":"put","before":null,"after":{}}]}`, ep)
	}
	// The records at both ends of the window kept (those between deleted
	// by hand: a hole warned of on its own).
	if _, err := testClient.Txn(context.Background()).Then(
		clientv3.OpDelete(e.ks.Audit(1)),
		clientv3.OpPut(e.ks.Audit(2), rec(2)),
		clientv3.OpPut(e.ks.Audit(cur), rec(cur)),
		clientv3.OpPut(e.ks.Epoch(), fmt.Sprint(cur)),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "history", "--limit", "0")
	if !strings.Contains(r.stderr, "the audit records of epochs 3 to 10000 are missing, though older and newer ones are kept") {
		t.Errorf("history --limit 0: %s; want the hole 3 to 10000 named", r)
	}
	if strings.Contains(r.stderr, "epoch 1 is missing") || strings.Contains(r.stderr, "epochs 1 ") {
		t.Errorf("history --limit 0 at epoch %d with epoch 2's record kept: %s; want epoch 1 not named missing (beyond the newest 10000)", cur, r)
	}
	if _, err := testClient.Delete(context.Background(), e.ks.AuditPrefix(), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	r = e.must(ExitOK, "history")
	if !strings.Contains(r.stderr, "the audit records of epochs 2 to 10001 are missing, though the current epoch is 10001 (no record is kept)") {
		t.Errorf("history with no record kept at epoch %d: %s; want epochs 2 to 10001 named", cur, r)
	}
}

// TestRollbackNamesTenLaterEpochsAndCountsTheRest: a rollback's warning
// names the first 10 later epochs that changed the config and "and N
// more" for the rest, even one more, and names at most 10 of the epochs
// whose records are missing, then how many more (a mutation review: no
// test had more than 10 later epochs).
func TestRollbackNamesTenLaterEpochsAndCountsTheRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed() // epoch 1
	e.attrEpochs("eu-central", 2, 14)
	// rollback 3 at epoch 14 undoes 11 later epochs: 4 to 13 named, 14 counted.
	r := e.must(ExitOK, "rollback", "3", "--dry-run")
	if !strings.Contains(r.stderr, "undoes the config changes of 11 later epochs, not only the first: 4 (") ||
		!strings.Contains(r.stderr, ", 13 (") || strings.Contains(r.stderr, "14 (") || !strings.Contains(r.stderr, ", and 1 more (boosts are kept") {
		t.Errorf("rollback 3 --dry-run at epoch 14: %s; want epochs 4 to 13 named and 'and 1 more'", r)
	}
	for ep := int64(4); ep <= 14; ep++ {
		if _, err := testClient.Delete(context.Background(), e.ks.Audit(ep)); err != nil {
			t.Fatal(err)
		}
	}
	r = e.must(ExitOK, "rollback", "3", "--dry-run")
	if !strings.Contains(r.stderr, "undoes the config changes of 11 later epochs") ||
		!strings.Contains(r.stderr, "and whatever epoch(s) 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, and 1 more changed: their audit records are not kept") {
		t.Errorf("rollback 3 --dry-run with the records of 4 to 14 deleted: %s; want 10 of them named and 'and 1 more'", r)
	}
}

// TestHistoryTouchingAPoolIsNotItsNamesakeRoutesBoosts: --touching
// pools/X matches the pool's changes only, not the boosts of a route
// group of the same name (only a route's key matches its boosts), and a
// key given twice is named once in the note (a mutation review).
func TestHistoryTouchingAPoolIsNotItsNamesakeRoutesBoosts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()                                                                                        // 1
	e.must(ExitOK, "pool", "set", "apac-general", "--host", "h.example.net", "--residency", "apac") // 2: a pool named as a route group
	e.must(ExitOK, "boost", "apac-general", "--id", "ag", "--target", "apac-general=100", "--ttl", "1h")
	if got := fmt.Sprint(historyEpochs(t, e, "--touching", "pools/apac-general")); got != "[2]" {
		t.Errorf("history --touching pools/apac-general: epochs %s, want [2] (epoch 3 is a boost of the route apac-general)", got)
	}
	if got := fmt.Sprint(historyEpochs(t, e, "--touching", "routes/apac-general")); !strings.HasPrefix(got, "[3 ") {
		t.Errorf("history --touching routes/apac-general: epochs %s, want its boost's epoch 3 first", got)
	}
	r := e.must(ExitOK, "history", "--touching", "pools/nowhere,pools/nowhere")
	if !strings.Contains(r.stderr, "touches pools/nowhere\n") {
		t.Errorf("history --touching pools/nowhere,pools/nowhere: %s; want the key named once", r)
	}
}

// TestHistoryNamesTheOnlyRecordDeleted: at epoch 1, its record deleted
// by hand, history names it missing (a mutation review: every test of
// the newest records missing was past epoch 1).
func TestHistoryNamesTheOnlyRecordDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed() // 1
	if _, err := testClient.Delete(context.Background(), e.ks.Audit(1)); err != nil {
		t.Fatal(err)
	}
	if r := e.must(ExitOK, "history"); !strings.Contains(r.stderr, "the audit record of epoch 1 is missing, though the current epoch is 1 (no record is kept)") {
		t.Errorf("history at epoch 1 with its record deleted: %s; want it named missing", r)
	}
}

// TestRollbackPastTheRecordsReadSaysAtLeast: a rollback over more later
// epochs than the warning reads records of (maxReadEpochs) counts them
// as "at least" N, and does not take the epochs below the records read
// for records deleted by hand (a mutation review: no test went past it).
func TestRollbackPastTheRecordsReadSaysAtLeast(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed() // 1
	n := int64(maxReadEpochs + 50)
	ops := []clientv3.Op{clientv3.OpPut(e.ks.Epoch(), fmt.Sprint(n+1))}
	for ep := int64(2); ep <= n+1; ep++ {
		ops = append(ops, clientv3.OpPut(e.ks.Audit(ep), fmt.Sprintf(`{"epoch":%d,"at":"2026-12-06T02:40:03Z","user":"bot","host":"ci","reason":"r%d","command":"pool set eu-north","changes":[{"key":"pools/eu-north","op":"put","before":null,"after":{}}]}`, ep, ep)))
	}
	if _, err := testClient.Txn(context.Background()).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	e.must(ExitOK, "pool", "drain", "eu-north") // a change for the rollback to undo
	r := e.must(ExitOK, "rollback", "1", "--dry-run")
	want := fmt.Sprintf("undoes the config changes of at least %d later epochs", maxReadEpochs)
	if !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "not kept") {
		t.Errorf("rollback 1 --dry-run over %d later epochs: %s; want %q and no epoch named not kept", n, r, want)
	}
	// Each named as epoch (command by user@host: reason), the oldest read first.
	oldest := n + 2 - maxReadEpochs + 1
	if w := fmt.Sprintf("%d (pool set eu-north by bot@ci: \"r%d\")", oldest, oldest); !strings.Contains(r.stderr, w) {
		t.Errorf("rollback 1 --dry-run: %s; want %q named", r, w)
	}
}
