package cli

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
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
	// The next epoch is what an "outcome unknown" write names: not
	// committed, safe to run again.
	r = e.run("history", "2")
	if r.code == ExitOK || !strings.Contains(r.stderr, "epoch 2 is not committed (the current epoch is 1); a write whose outcome was unknown did not apply, and may be run again") {
		t.Fatalf("history 2 at epoch 1: %s; want it named not committed", r)
	}
	if r := e.run("status", "--max-lag", "-5"); r.code != ExitUsage || !strings.Contains(r.stderr, "--max-lag -5: want 0 or more") {
		t.Fatalf("status --max-lag -5: %s; want a usage error", r)
	}
}

// TestHistoryTableKeepsItsRows: a --reason of several lines, or with a
// tab, is one row of history's table, its control characters escaped
// (raw, they broke the rows and columns); -o json keeps the reason as
// written, '&' included (it was \u0026). Its times read as get shows
// them (2006-01-02 15:04:05 UTC, not RFC 3339's T and Z), in the table,
// with --touching and in history N; -o json keeps RFC 3339.
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
	// Times read as get shows them; -o json keeps the record's RFC 3339.
	shown := regexp.MustCompile(`\b20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC\b`)
	if !shown.MatchString(lines[1]) || regexp.MustCompile(`\dT\d`).MatchString(lines[1]) {
		t.Fatalf("history: want the time as 2006-01-02 15:04:05 UTC:\n%s", r.stdout)
	}
	if r := e.must(ExitOK, "history", "2"); !shown.MatchString(strings.SplitN(r.stdout, "\n", 2)[0]) {
		t.Fatalf("history 2: want the time as 2006-01-02 15:04:05 UTC on its first line:\n%s", r.stdout)
	}
	if r := e.must(ExitOK, "history", "--touching", "eu-north"); !shown.MatchString(r.stdout) {
		t.Fatalf("history --touching: want the time as 2006-01-02 15:04:05 UTC:\n%s", r.stdout)
	}
	r = e.must(ExitOK, "history", "-o", "json")
	if !strings.Contains(r.stdout, `"reason": "drain & reboot\nticket:\tOPS-1"`) {
		t.Fatalf("history -o json: want the reason as written:\n%s", r.stdout)
	}
	if !regexp.MustCompile(`"at": "20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d`).MatchString(r.stdout) {
		t.Fatalf("history -o json: want the time in RFC 3339:\n%s", r.stdout)
	}
}

// TestRewrittenAuditRecordIsNamed: an audit record put again after its
// commit (the operator role can write audit/: etcd has no append-only) is
// named as such by history (a warning, "rewritten" in -o json), and
// rollback to its epoch refuses: its revision is the rewrite's, and would
// restore the config of that moment instead of the epoch's. A rollback
// through it goes ahead (the target's revision is sound), marking it.
func TestRewrittenAuditRecordIsNamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()                                                           // epoch 1
	e.must(ExitOK, "pool", "drain", "eu-north")                        // 2
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=100") // 3
	if r := e.must(ExitOK, "history"); strings.Contains(r.stderr, "put again") {
		t.Fatalf("history of records written once warns:\n%s", r)
	}
	key := e.ks.Audit(2)
	rec := e.get(key)
	forged := strings.Replace(rec, `"pool drain`, `"pool drain (forged)`, 1)
	if _, err := testClient.Put(context.Background(), key, forged); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "history")
	if !strings.Contains(r.stderr, "the audit record of epoch 2 was put again after its commit") || strings.Contains(r.stderr, "epoch 1 ") || strings.Contains(r.stderr, "epoch 3 ") {
		t.Fatalf("history after epoch 2's record was rewritten: %s; want a warning naming epoch 2 alone", r)
	}
	var recs []struct {
		Epoch     int64
		Rewritten bool
	}
	mustJSON(t, e.must(ExitOK, "history", "-o", "json").stdout, &recs)
	for _, x := range recs {
		if x.Rewritten != (x.Epoch == 2) {
			t.Errorf("history -o json: epoch %d rewritten %v", x.Epoch, x.Rewritten)
		}
	}
	if r := e.run("rollback", "2", "--dry-run"); r.code != ExitRefused || !strings.Contains(r.stderr, "was put again after its commit") {
		t.Fatalf("rollback to a rewritten record's epoch: %s; want a refusal naming the rewrite", r)
	}
	// Through it: epoch 1's config is read at its own revision, which no
	// record can forge; the warning naming what it undoes marks epoch 2's
	// record as rewritten.
	if r := e.must(ExitOK, "rollback", "1", "--dry-run"); !strings.Contains(r.stderr, "2 (its audit record put again after its commit, so not what it wrote: pool drain (forged)") {
		t.Fatalf("rollback through a rewritten record: %s; want the warning to mark epoch 2's record", r)
	}

	// Deleted and put again (its version is 1 again): found by its
	// revision, past the next epoch's record, or the epoch key's for the
	// newest; and a record naming another epoch than its key's.
	for _, tc := range []struct {
		epoch int64
		value func(string) string
	}{
		{1, func(v string) string { return v }},
		{3, func(v string) string { return v }},
		{1, func(v string) string { return strings.Replace(v, `"epoch":1`, `"epoch":7`, 1) }},
	} {
		e := newEnv(t)
		e.seed()
		e.must(ExitOK, "pool", "drain", "eu-north")
		e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=100")
		key := e.ks.Audit(tc.epoch)
		rec := e.get(key)
		if _, err := testClient.Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		if _, err := testClient.Put(context.Background(), key, tc.value(rec)); err != nil {
			t.Fatal(err)
		}
		r := e.must(ExitOK, "history")
		if !strings.Contains(r.stderr, fmt.Sprintf("the audit record of epoch %d was put again", tc.epoch)) {
			t.Errorf("history after epoch %d's record was deleted and put again: %s; want it named", tc.epoch, r)
		}
		if r := e.run("history", fmt.Sprint(tc.epoch)); !strings.Contains(r.stderr, "was put again") {
			t.Errorf("history %d after its record was deleted and put again: %s; want it named", tc.epoch, r)
		}
	}
}

// TestGetNamesKeysWrittenAroundRegionctl: a config or boost key put after
// the epoch's commit (etcdctl, a script with the operator role) has no
// audit record; get names it on stderr. Once a regionctl write commits
// after it, it is part of that epoch's state and no longer named.
func TestGetNamesKeysWrittenAroundRegionctl(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	if r := e.must(ExitOK, "get"); strings.Contains(r.stderr, "written after") {
		t.Fatalf("get after regionctl's own writes warns:\n%s", r)
	}
	if _, err := testClient.Put(context.Background(), e.ks.RoutingKey("pools/eu-north"),
		`{"host":"edge-sto-1.example.net","region":"eu-north","residency":"eu","status":"down"}`); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "get", "pools")
	if !strings.Contains(r.stderr, "written after epoch 1's commit") || !strings.Contains(r.stderr, "pools/eu-north") || strings.Contains(r.stderr, "routes/") {
		t.Fatalf("get after a hand put of pools/eu-north: %s; want a warning naming it alone", r)
	}
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=100")
	if r := e.must(ExitOK, "get"); strings.Contains(r.stderr, "written after") {
		t.Fatalf("get after a later commit still warns:\n%s", r)
	}
}

// historyEpochs returns the epochs of history -o json, in order.
func historyEpochs(t *testing.T, e *tenv, args ...string) []int64 {
	t.Helper()
	var recs []struct{ Epoch int64 }
	mustJSON(t, e.must(ExitOK, append(append([]string{"history"}, args...), "-o", "json")...).stdout, &recs)
	out := []int64{}
	for _, r := range recs {
		out = append(out, r.Epoch)
	}
	return out
}

// TestHistoryKey: history --touching lists, newest first, only the
// records whose changes touch the keys given (repeatable or
// comma-separated; relative to <root>/routing/, or a bare route, pool or
// boost id), a route's boosts included; --limit counts the matching
// records. A bare name that is not one key, a key no record can name, or
// --touching beside an epoch is a usage error; history DE says to use
// --touching, and so does history --key DE (--key is the TLS key file's
// global flag).
func TestHistoryKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()                                                                                        // 1: every key
	e.must(ExitOK, "pool", "drain", "eu-west", "--reason", "disk failure")                          // 2
	e.must(ExitOK, "route", "set", "DE", "--target", "eu-central=100", "--attr", "x=1")             // 3
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=100")                              // 4
	e.must(ExitOK, "boost", "DE", "--id", "de-1", "--target", "eu-central=100", "--ttl", "1h")      // 5
	e.must(ExitOK, "pool", "undrain", "eu-west")                                                    // 6
	e.must(ExitOK, "boost", "cancel", "de-1")                                                       // 7
	e.must(ExitOK, "pool", "set", "apac-general", "--host", "h.example.net", "--residency", "apac") // 8: a pool named as a route group
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--touching", "DE"}, "[7 5 3 1]"}, // DE's boost, set and cancelled
		{[]string{"--touching", "routes/DE"}, "[7 5 3 1]"},
		{[]string{"--touching", e.ks.RoutingKey("routes/DE")}, "[7 5 3 1]"},
		{[]string{"--touching", "eu-west"}, "[6 2 1]"},
		{[]string{"--touching", "PL"}, "[4 1]"},
		{[]string{"--touching", "overrides/de-1"}, "[7 5]"},
		{[]string{"--touching", "DE,pools/eu-west"}, "[7 6 5 3 2 1]"},
		{[]string{"--touching", "DE", "--touching", "eu-west", "--limit", "2"}, "[7 6]"},
		{[]string{"--touching", "DE", "--limit", "0"}, "[7 5 3 1]"},
		{[]string{"--touching", "policy/residency"}, "[1]"},
		{[]string{"--touching", "pools/apac-general"}, "[8]"},
		{[]string{"--touching", "FR"}, "[1]"},
		{[]string{"--touching", "pools/nowhere"}, "[]"},
	} {
		if got := fmt.Sprint(historyEpochs(t, e, tc.args...)); got != tc.want {
			t.Errorf("history %s: epochs %s, want %s", strings.Join(tc.args, " "), got, tc.want)
		}
	}
	// The table: the matching records, with the keys each touched.
	r := e.must(ExitOK, "history", "--touching", "DE")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "TOUCHED") || !strings.HasPrefix(lines[1], "7 ") || !strings.Contains(lines[1], "overrides/de-1") ||
		!strings.HasPrefix(lines[3], "3 ") || !strings.Contains(lines[3], "routes/DE") || r.stderr != "" {
		t.Errorf("history --touching DE: %s; want a header and epochs 7 5 3 1", r)
	}
	if r := e.must(ExitOK, "history", "--touching", "pools/nowhere"); !strings.Contains(r.stderr, "no audit record kept (epochs 8 back to 1) touches pools/nowhere") {
		t.Errorf("history --touching pools/nowhere: %s; want a note that no record touches it", r)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"history", "DE"}, `history "DE": want an epoch (a positive integer); the records that changed a key: regionctl history --touching DE`},
		{[]string{"history", "2", "--touching", "DE"}, "give one or the other"},
		{[]string{"history", "--key", "DE"}, `--key "DE" without --cert: --key is the client certificate's key file; to list the records that changed a key: regionctl history --touching DE`},
		{[]string{"history", "--touching", "apac-general"}, "--touching apac-general names routes/apac-general and pools/apac-general: give the key"},
		{[]string{"history", "--touching", "de"}, "could be pools/de or overrides/de: give the key (did you mean DE? codes are upper case)"},
		{[]string{"history", "--touching", "AX"}, "could be routes/AX or overrides/AX: give the key"},
		{[]string{"history", "--touching", "de-1"}, "could be routes/de-1 or pools/de-1 or overrides/de-1: give the key"}, // a boost cancelled
		{[]string{"history", "--touching", "health/eu-west/x"}, "no audit record names it"},
		{[]string{"history", "--touching", "route/DE"}, "not in the routing key grammar"},
		{[]string{"history", "--touching", "Bad Name"}, "no route name, pool id or boost id is spelled so"},
		{[]string{"history", "--touching", "eu-wes"}, "could be routes/eu-wes or pools/eu-wes or overrides/eu-wes: give the key; did you mean eu-west?"},
	} {
		if r := e.run(tc.args...); r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("regionctl %s: %s; want a usage error with %q", strings.Join(tc.args, " "), r, tc.want)
		}
	}
}

// TestHistoryKeySearchIsCapped: history --touching reads back at most
// maxSearchEpochs epochs from the newest record, page by page, and says
// on stderr when it stopped there with fewer matches than --limit.
func TestHistoryKeySearchIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed() // 1: touches routes/DE
	// maxSearchEpochs+100 records touching pools/eu-north alone, put in one
	// Txn with the epoch (as many commits would have written them).
	n := int64(maxSearchEpochs + 100)
	ops := []clientv3.Op{clientv3.OpPut(e.ks.Epoch(), fmt.Sprint(n+1))}
	for ep := int64(2); ep <= n+1; ep++ {
		ops = append(ops, clientv3.OpPut(e.ks.Audit(ep), fmt.Sprintf(`{"epoch":%d,"at":"2026-12-06T02:40:03Z","user":"bot","host":"ci","reason":"r%d","command":"pool set eu-north","changes":[{"key":"pools/eu-north","op":"put","before":null,"after":{}}]}`, ep, ep)))
	}
	if _, err := testClient.Txn(context.Background()).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "history", "--touching", "DE")
	want := fmt.Sprintf("the search stopped at its cap, the newest %d epochs (%d back to %d): 0 record(s) of them touch routes/DE", maxSearchEpochs, n+1, n+2-maxSearchEpochs)
	if !strings.Contains(r.stderr, want) || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("history --touching DE past the cap: %s; want no record and the note %q", r, want)
	}
	// Matches past the first page, newest first, --limit counting them.
	got := historyEpochs(t, e, "--touching", "eu-north", "--limit", "250")
	if len(got) != 250 || got[0] != n+1 || got[249] != n+1-249 {
		t.Errorf("history --touching eu-north --limit 250: %d records from %v, want %d back to %d", len(got), got[:min(3, len(got))], n+1, n+1-249)
	}
	if r := e.must(ExitOK, "history", "--touching", "eu-north", "--limit", "250"); strings.Contains(r.stderr, "cap") {
		t.Errorf("history --touching eu-north --limit 250: %s; want no note (the limit was reached)", r)
	}
	r = e.must(ExitOK, "history", "--touching", "eu-north", "--limit", "0", "-o", "json")
	var recs []struct{ Epoch int64 }
	mustJSON(t, r.stdout, &recs)
	if len(recs) != maxSearchEpochs || !strings.Contains(r.stderr, fmt.Sprintf("%d record(s) of them touch pools/eu-north", maxSearchEpochs)) {
		t.Errorf("history --touching eu-north --limit 0: %d records, stderr %q; want %d and the note", len(recs), r.stderr, maxSearchEpochs)
	}
}

// TestHistoryNamesADeletedRecord: an audit record deleted by hand (the
// operator role can write audit/) between older and newer ones kept is a
// hole history names, in the list and with --touching, and history of
// that epoch says it is missing though older and newer ones are kept, not
// that only the newest 10000 are kept (the review found the list silent,
// and that explanation, with 17 records kept).
func TestHistoryNamesADeletedRecord(t *testing.T) {
	t.Parallel()
	e := epochsOfPL(t, 6)
	if r := e.must(ExitOK, "history", "--limit", "0"); strings.Contains(r.stderr, "missing") {
		t.Fatalf("history of a whole trail warns:\n%s", r)
	}
	if _, err := testClient.Delete(context.Background(), e.ks.Audit(5)); err != nil {
		t.Fatal(err)
	}
	want := "regionctl: warning: the audit record of epoch 5 is missing, though older and newer ones are kept: deleted around regionctl"
	for _, args := range [][]string{{"history"}, {"history", "--limit", "0", "-o", "json"}, {"history", "--touching", "PL", "--limit", "0"}} {
		if r := e.must(ExitOK, args...); !strings.Contains(r.stderr, want) {
			t.Errorf("%s after epoch 5's record was deleted: %s; want %q", strings.Join(args, " "), r, want)
		}
	}
	if got := fmt.Sprint(historyEpochs(t, e, "--touching", "PL", "--limit", "0")); got != "[6 4 3 2 1]" {
		t.Errorf("history --touching PL: epochs %s, want [6 4 3 2 1]", got)
	}
	r := e.run("history", "5")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "the audit record of epoch 5 is missing, though older and newer ones are kept (the records kept are of epochs 1 to 6): deleted around regionctl") ||
		strings.Contains(r.stderr, "only the newest") || strings.Contains(r.stderr, "store:") {
		t.Fatalf("history 5 after its record was deleted: %s; want it named missing between records kept", r)
	}
	// Older records deleted too: still not "only the newest 10000".
	for _, n := range []int64{1, 2} {
		if _, err := testClient.Delete(context.Background(), e.ks.Audit(n)); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.run("history", "1"); r.code != ExitRefused || !strings.Contains(r.stderr, "the audit record of epoch 1 is missing, though regionctl keeps the newest 10000 and the current epoch is 6 (the records kept are of epochs 3 to 6)") {
		t.Fatalf("history 1 after the oldest records were deleted: %s; want it named missing", r)
	}
}

// TestHistoryNamesDeletedOldestRecords: the oldest audit records deleted
// by hand, while regionctl keeps the newest 10000, are named in a warning
// by a listing that reaches back to the oldest record kept (the list,
// --limit 0 -o json, --touching), as a hole between records kept is; a
// listing that stops short of it says nothing. The review found the list
// silent (only history 1 explained it).
func TestHistoryNamesDeletedOldestRecords(t *testing.T) {
	t.Parallel()
	e := epochsOfPL(t, 4)
	if _, err := testClient.Delete(context.Background(), e.ks.Audit(1)); err != nil {
		t.Fatal(err)
	}
	want := "regionctl: warning: the audit record of epoch 1 is missing, though regionctl keeps the newest 10000 and the current epoch is 4 (the oldest record kept is of epoch 2): deleted around regionctl"
	for _, args := range [][]string{{"history"}, {"history", "--limit", "0", "-o", "json"}, {"history", "--limit", "3"}, {"history", "--touching", "PL", "--limit", "0"}, {"history", "--touching", "PL", "--limit", "3"}} {
		if r := e.must(ExitOK, args...); !strings.Contains(r.stderr, want) {
			t.Errorf("%s after epoch 1's record was deleted: %s; want %q", strings.Join(args, " "), r, want)
		}
	}
	for _, args := range [][]string{{"history", "--limit", "2"}, {"history", "--touching", "PL", "--limit", "2"}} {
		if r := e.must(ExitOK, args...); strings.Contains(r.stderr, "missing") {
			t.Errorf("%s (epochs 4 and 3) warns of records it does not reach:\n%s", strings.Join(args, " "), r)
		}
	}
	if _, err := testClient.Delete(context.Background(), e.ks.Audit(2)); err != nil {
		t.Fatal(err)
	}
	if r := e.must(ExitOK, "history"); !strings.Contains(r.stderr, "the audit records of epochs 1 to 2 are missing, though regionctl keeps the newest 10000 and the current epoch is 4 (the oldest record kept is of epoch 3)") {
		t.Errorf("history after epochs 1 and 2's records were deleted: %s; want both named", r)
	}
}

// TestHistoryNamesDeletedNewestRecords: records deleted by hand above the
// newest one kept, up to the current epoch, are named (no hole between
// records kept shows them), and once a commit is past them the hole is.
func TestHistoryNamesDeletedNewestRecords(t *testing.T) {
	t.Parallel()
	e := epochsOfPL(t, 4)
	if r := e.must(ExitOK, "history"); strings.Contains(r.stderr, "missing") {
		t.Fatalf("history with every record kept warns:\n%s", r)
	}
	if _, err := testClient.Delete(context.Background(), e.ks.Audit(4)); err != nil {
		t.Fatal(err)
	}
	want := "regionctl: warning: the audit record of epoch 4 is missing, though the current epoch is 4 (the newest record kept is of epoch 3): deleted around regionctl"
	for _, args := range [][]string{{"history"}, {"history", "--limit", "1", "-o", "json"}, {"history", "--touching", "PL"}} {
		if r := e.must(ExitOK, args...); !strings.Contains(r.stderr, want) {
			t.Errorf("%s after epoch 4's record was deleted: %s; want %q", strings.Join(args, " "), r, want)
		}
	}
	// A key put by hand under the audit prefix, named with letters, sorts
	// after the records: it hides nothing.
	if _, err := testClient.Put(context.Background(), e.ks.AuditPrefix()+"zz-note", "by hand"); err != nil {
		t.Fatal(err)
	}
	if r := e.must(ExitOK, "history"); !strings.Contains(r.stderr, want) {
		t.Errorf("history with audit/zz-note put by hand: %s; want %q", r, want)
	}
	if _, err := testClient.Delete(context.Background(), e.ks.AuditPrefix(), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if r := e.must(ExitOK, "history"); !strings.Contains(r.stderr, "the audit records of epochs 1 to 4 are missing, though the current epoch is 4 (no record is kept)") {
		t.Errorf("history after every record was deleted: %s; want epochs 1 to 4 named", r)
	}
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=50", "--target", "eu-west=50") // epoch 5
	if r := e.must(ExitOK, "history"); strings.Contains(r.stderr, "missing, though the current epoch") || !strings.Contains(r.stderr, "epochs 1 to 4 are missing") {
		t.Errorf("history with the newest record kept: want only the oldest records named (epochs 1 to 4):\n%s", r)
	}
}

// epochsOfPL returns an env whose epochs 1 to last are the seed, then
// route set PL with new weights each time.
func epochsOfPL(t *testing.T, last int) *tenv {
	t.Helper()
	e := newEnv(t)
	e.seed() // epoch 1
	for w := 60; w > 60-10*(last-1); w -= 10 {
		e.must(ExitOK, "route", "set", "PL", "--target", fmt.Sprintf("eu-central=%d", w), "--target", fmt.Sprintf("eu-west=%d", 100-w))
	}
	return e
}
