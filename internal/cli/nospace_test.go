package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
)

// TestNoSpaceAlarmIsNamed: under etcd's NOSPACE alarm (a full
// --quota-backend-bytes raises it; here raised through the Alarm API,
// the same state: every put, Txn with a put and lease grant is refused
// until the alarm is disarmed, even after compaction and defrag), a write
// exits 1 saying nothing was written, and names the alarm and the way out
// (compact, defrag, alarm disarm); a dry run does not promise the write.
// etcd's text alone ("mvcc: database space exceeded") named neither, and
// the dry run exited 0.
func TestNoSpaceAlarmIsNamed(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t) // its own etcd: the alarm refuses every write
	cli := devetcd.NewTestClient(t, srv)
	runHere := func(args ...string) result {
		full := append([]string{"--endpoints", strings.Join(srv.Endpoints, ","), "--prefix", "/nospace",
			"--dial-timeout", "10s", "--command-timeout", "20s"}, args...)
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		code := run(ctx, full, &out, &errb, func(string) string { return "" })
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}
	if r := runHere("apply", "-f", exampleConfig); r.code != ExitOK {
		t.Fatalf("seed: %s", r)
	}
	drained := writeFile(t, "drained.yaml", "pools:\n  eu-north: {host: edge-sto-1.example.net:443, region: eu-north, residency: eu, status: draining}\n")
	disarm := devetcd.RaiseNoSpaceAlarm(t, cli)
	for _, args := range [][]string{
		{"pool", "drain", "eu-central"},
		{"boost", "KR", "--target", "kr-music=100", "--ttl", "1h"},
		{"pool", "drain", "eu-central", "--dry-run"},
		{"diff", "-f", drained, "--exit-code"},
	} {
		r := runHere(args...)
		if r.code != ExitRefused {
			t.Errorf("regionctl %s under NOSPACE: %s; want exit 1", strings.Join(args, " "), r)
		}
		for _, want := range []string{"nothing written", "NOSPACE alarm is raised", "etcdctl defrag --cluster", "etcdctl alarm disarm"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("regionctl %s under NOSPACE: stderr does not say %q: %s", strings.Join(args, " "), want, r.stderr)
			}
		}
	}
	// status names the alarm in words, the member that raised it by its
	// name and hex ID, and the way out; etcd's protobuf text
	// ("memberID:<decimal> alarm:NOSPACE") was printed as it came.
	r := runHere("status")
	if all := r.stdout + r.stderr; strings.Contains(all, "memberID:") || !strings.Contains(all, "NOSPACE alarm is raised") ||
		!strings.Contains(all, "(raised by regiond-dev (") ||
		!strings.Contains(all, "etcdctl alarm disarm") {
		t.Errorf("regionctl status under NOSPACE: want the alarm in words with its way out: %s", r)
	}
	disarm()
	if r := runHere("pool", "drain", "eu-central", "--dry-run"); r.code != ExitOK {
		t.Fatalf("dry run once the alarm is disarmed: %s", r)
	}
	if r := runHere("pool", "drain", "eu-central"); r.code != ExitOK {
		t.Fatalf("write once the alarm is disarmed: %s", r)
	}
}
