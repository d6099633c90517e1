package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/regiond/regiond/internal/tcpproxy"
)

// runAt runs regionctl against endpoint (instead of the test etcd's own)
// with a short --command-timeout, and stdout as given.
func (e *tenv) runAt(ctx context.Context, endpoint string, stdout io.Writer, args ...string) result {
	full := append([]string{"--endpoints", endpoint, "--prefix", e.prefix, "--dial-timeout", "10s", "--command-timeout", "1s"}, args...)
	var errb bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	code := run(ctx, full, stdout, &errb, func(string) string { return "" })
	r := result{code: code, stderr: errb.String()}
	if b, ok := stdout.(*bytes.Buffer); ok {
		r.stdout = b.String()
	}
	return r
}

func testEndpoint(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testServer.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestEtcdCutAfterCommit: etcd cut off between the commit and the end of
// --wait-converged exits 5 (written, not converged), never 4: the message
// says the write is committed, with its epoch and revision, and what
// failed.
func TestEtcdCutAfterCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	rev, _ := e.fingerprint()
	e.putAgent("node-a", rev, grantLease(t))
	proxy, err := tcpproxy.New(testEndpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ctx := context.WithValue(context.Background(), afterCommitHook{}, func() { proxy.Sever() })
	r := e.runAt(ctx, proxy.Addr(), &bytes.Buffer{}, "pool", "set", "eu-central", "--attr", "x=1", "--wait-converged=3s")
	if r.code != ExitNotConverged || !strings.Contains(r.stderr, "the write is committed (epoch 1 → 2 at revision ") ||
		!strings.Contains(r.stderr, "do not re-run it") || !strings.Contains(r.stderr, "etcd unreachable") {
		t.Fatalf("want exit 5 saying the write is committed and etcd unreachable: %s", r)
	}
	if got := e.get(e.ks.Epoch()); got != "2" {
		t.Fatalf("epoch %s, want 2", got)
	}
}

// failWriter fails every write (a closed pipe).
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("write |1: broken pipe") }

// TestPrintFailsAfterCommit: a committed write whose output cannot be
// written exits 5, not 1; a dry run that cannot print exits 1.
func TestPrintFailsAfterCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	ep := testServer.Endpoints[0]
	r := e.runAt(context.Background(), ep, failWriter{}, "pool", "set", "eu-central", "--attr", "x=1", "-o", "json")
	if r.code != ExitNotConverged || !strings.Contains(r.stderr, "the write is committed (epoch 1 → 2") || !strings.Contains(r.stderr, "printing the result failed") {
		t.Fatalf("want exit 5 saying the write is committed and printing failed: %s", r)
	}
	if r := e.runAt(context.Background(), ep, failWriter{}, "pool", "set", "eu-central", "--attr", "x=2", "--dry-run"); r.code != ExitRefused {
		t.Fatalf("dry run that cannot print: %s", r)
	}
	if got := e.get(e.ks.Epoch()); got != "2" {
		t.Fatalf("epoch %s, want 2", got)
	}
}

// TestBoostExtendLostReply: a boost extend whose Txn reaches etcd and
// applies, but whose reply is lost on the way back (a network fault
// injected in the client's gRPC interceptor), reports the truth (exit 0,
// the epoch it wrote) and leaves the boost live under its new lease.
func TestBoostExtendLostReply(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--id", "kr-week")
	var armed atomic.Bool
	drop := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoke(ctx, method, req, reply, cc, opts...)
		if err == nil && method == "/etcdserverpb.KV/Txn" && armed.CompareAndSwap(true, false) {
			return status.Error(codes.Unavailable, "connection reset: reply lost (injected network fault)")
		}
		return err
	}
	armed.Store(true)
	ctx := context.WithValue(context.Background(), dialOptionsHook{}, []grpc.DialOption{grpc.WithChainUnaryInterceptor(drop)})
	r := e.runCtx(ctx, "boost", "extend", "kr-week", "--ttl", "3h", "--reason", "trend continues")
	if r.code != ExitOK || armed.Load() || !strings.Contains(r.stdout, "epoch 2 → 3 at revision") || !strings.Contains(r.stderr, "read back: committed") {
		t.Fatalf("extend with a lost reply: want exit 0, epoch 2 → 3, read back: %s", r)
	}
	if rec := e.audit(3); rec.Command != "boost extend kr-week --ttl 3h --reason 'trend continues'" {
		t.Fatalf("audit 3: %+v", rec)
	}
	var boosts []boostInfo
	mustJSON(t, e.must(ExitOK, "boost", "ls", "-o", "json").stdout, &boosts)
	if len(boosts) != 1 || boosts[0].ID != "kr-week" || boosts[0].TTLSeconds == nil || *boosts[0].TTLSeconds <= 3600 {
		t.Fatalf("boost after the extend (want kr-week with over 1h left): %+v", boosts)
	}
}

// TestOutcomeUnknownExitsUnreachable: a write whose commit reply is lost,
// and whose read-back gets no answer either, exits 4 saying the outcome is
// unknown and naming history (not 3, "nothing written": a script would
// re-run a write that may have applied; the mutation review found no test
// of it); here the commit did apply, and history shows it.
func TestOutcomeUnknownExitsUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	drop := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoke(ctx, method, req, reply, cc, opts...)
		if err == nil && method == "/etcdserverpb.KV/Txn" {
			return status.Error(codes.Unavailable, "connection reset: reply lost (injected network fault)")
		}
		return err
	}
	ctx := context.WithValue(context.Background(), dialOptionsHook{}, []grpc.DialOption{grpc.WithChainUnaryInterceptor(drop)})
	r := e.runCtx(ctx, "pool", "drain", "eu-west", "--reason", "lost", "--command-timeout", "1s")
	if r.code != ExitUnreachable || !strings.Contains(r.stderr, "outcome unknown") || !strings.Contains(r.stderr, "regionctl history") ||
		strings.Contains(r.stderr, "nothing") {
		t.Fatalf("a commit and its read-back unanswered: want exit 4 naming the outcome unknown and history, and never nothing written, got %s", r)
	}
	if rec := e.audit(2); !strings.HasPrefix(rec.Command, "pool drain eu-west") {
		t.Fatalf("audit 2: %+v; the commit applied (its reply alone was lost)", rec)
	}
}

// TestEpochResetExitsRefused: with the epoch key deleted by hand, a write
// exits 1 (a retry cannot fix it), leaves audit/…001 as it was, and says
// how to restore the key.
func TestEpochResetExitsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "drain", "eu-north", "--reason", "two")
	first := e.get(e.ks.Audit(1))
	if _, err := testClient.Delete(context.Background(), e.ks.Epoch()); err != nil {
		t.Fatal(err)
	}
	r := e.run("pool", "undrain", "eu-north", "--retry", "3")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "etcdctl put "+e.ks.Epoch()+" 2") || !strings.Contains(r.stderr, "deleted or rewritten by hand") {
		t.Fatalf("want exit 1 naming the restore command: %s", r)
	}
	// A dry run does not promise the write the guard refuses.
	r = e.run("pool", "undrain", "eu-north", "--dry-run")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "etcdctl put "+e.ks.Epoch()+" 2") {
		t.Fatalf("--dry-run with the epoch key deleted: want exit 1 naming the restore command: %s", r)
	}
	if e.get(e.ks.Audit(1)) != first {
		t.Fatal("audit record of epoch 1 overwritten")
	}
}

// TestUnreachableWriteSaysNothingWritten: a write that meets an etcd not
// answering before its Txn is sent (its read, a boost's lease grant)
// exits 4 saying nothing was written, as a refusal does, and writes
// nothing; a read that meets it does not say so (it writes nothing
// anyway). The dial's own failure is TestExitUnreachable's; a commit's
// unknown outcome, which must never say it,
// TestOutcomeUnknownExitsUnreachable's.
func TestUnreachableWriteSaysNothingWritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--id", "kr-week")
	rev, n := e.fingerprint()
	unanswered := func(fail func(method string, req any) bool) context.Context {
		intercept := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if fail(method, req) {
				return status.Error(codes.Unavailable, "no answer (injected network fault)")
			}
			return invoke(ctx, method, req, reply, cc, opts...)
		}
		return context.WithValue(context.Background(), dialOptionsHook{}, []grpc.DialOption{grpc.WithChainUnaryInterceptor(intercept)})
	}
	// The state's read (the dial's probe, a count, is answered).
	load := unanswered(func(method string, req any) bool {
		r, ok := req.(*pb.RangeRequest)
		return method == "/etcdserverpb.KV/Range" && ok && !r.CountOnly
	})
	grant := unanswered(func(method string, _ any) bool { return method == "/etcdserverpb.Lease/LeaseGrant" })
	for _, tc := range []struct {
		ctx  context.Context
		args []string
		want string
	}{
		{load, []string{"pool", "drain", "eu-west", "--reason", "x"}, "; nothing was written"},
		{load, []string{"pool", "drain", "eu-west", "--dry-run"}, "; nothing was written"},
		{load, []string{"rollback", "1"}, "; nothing was written"},
		{grant, []string{"boost", "KR", "--target", "kr-music=100", "--ttl", "1h"}, "; nothing was written"},
		{grant, []string{"boost", "extend", "kr-week", "--ttl", "2h"}, "; nothing was written"},
	} {
		r := e.runCtx(tc.ctx, append([]string{"--command-timeout", "1s"}, tc.args...)...)
		if r.code != ExitUnreachable || !strings.Contains(r.stderr, "etcd unreachable at ") || !strings.HasSuffix(strings.TrimSpace(r.stderr), tc.want) {
			t.Errorf("regionctl %s with etcd not answering before the commit: want exit 4 ending %q, got %s", strings.Join(tc.args, " "), tc.want, r)
		}
	}
	if r := e.runCtx(load, "--command-timeout", "1s", "get"); r.code != ExitUnreachable || strings.Contains(r.stderr, "nothing") {
		t.Errorf("regionctl get with etcd not answering: want exit 4 without a word of writing, got %s", r)
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatalf("etcd changed: newest revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}
}
