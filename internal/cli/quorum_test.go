package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/etcdproc"
)

// TestQuorumLossNamesNoLeader: 2 of 3 members killed. regionctl exits 4,
// naming the two refused dials and the member that took the connection
// without answering: without a leader it cannot, and the operator must
// learn that quorum is lost, not that this host cannot reach etcd (the
// member that answered the dial used to go unnamed, and the leader hint
// was dropped whenever some dial failed).
func TestQuorumLossNamesNoLeader(t *testing.T) {
	c := etcdproc.Start(t, etcdproc.Config{Members: 3})
	eps := c.Endpoints()
	prefix := "/drill/quorum"
	runDefault := func(args ...string) result {
		full := append([]string{"--endpoints", strings.Join(eps, ","), "--prefix", prefix}, args...)
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		code := run(ctx, full, &out, &errb, func(string) string { return "" })
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}
	if r := runDefault("apply", "-f", exampleConfig, "--reason", "seed"); r.code != 0 {
		t.Fatalf("seed: %s", r)
	}
	c.Kill(1)
	c.Kill(2)
	r := runDefault("pool", "drain", "eu-central", "--reason", "drill")
	t.Logf("%s", r)
	if r.code != ExitUnreachable {
		t.Errorf("want exit 4, got %d", r.code)
	}
	if !strings.Contains(r.stderr, eps[0]+": took the connection, but etcd did not answer: has the cluster a leader, a quorum of its members up?") ||
		!strings.Contains(r.stderr, eps[1]+": dial: connect: connection refused") {
		t.Errorf("the message does not name %s as answering the dial without a leader: %q", eps[0], r.stderr)
	}
}
