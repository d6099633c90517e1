package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
)

// One embedded etcd serves every test of the package; each test works
// under its own --prefix.
var (
	testServer *devetcd.Server
	testClient *clientv3.Client
	prefixSeq  atomic.Int64
)

const exampleConfig = "../../examples/routing.yaml"

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "regionctl-test-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := devetcd.Start(context.Background(), devetcd.Config{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	cli, err := srv.Client()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	testServer, testClient = srv, cli
	defer func() {
		if binPath != "" {
			os.RemoveAll(filepath.Dir(binPath))
		}
	}()
	return m.Run()
}

// tenv is one test's corner of the shared etcd.
type tenv struct {
	t      testing.TB
	prefix string
	ks     keyspace.Space
	env    map[string]string
	// endpoints, when set, replace the shared test server's.
	endpoints []string
}

var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]+`)

func newEnv(t testing.TB) *tenv {
	t.Helper()
	prefix := fmt.Sprintf("/t/%s-%d", nonAlnum.ReplaceAllString(t.Name(), "-"), prefixSeq.Add(1))
	ks, err := keyspace.New(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return &tenv{t: t, prefix: prefix, ks: ks, env: map[string]string{}}
}

// result is one regionctl run.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs regionctl in-process against the test etcd and prefix.
func (e *tenv) run(args ...string) result {
	return e.runCtx(context.Background(), args...)
}

// runCtx is run with a context (carrying test hooks).
func (e *tenv) runCtx(ctx context.Context, args ...string) result {
	// Generous timeouts: the tests share a machine that may be busy; the
	// default timeouts are tested in TestExitUnreachable.
	eps := testServer.Endpoints
	if e.endpoints != nil {
		eps = e.endpoints
	}
	full := append([]string{"--endpoints", strings.Join(eps, ","), "--prefix", e.prefix,
		"--dial-timeout", "10s", "--command-timeout", "20s"}, args...)
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	environ := func() []string {
		var kvs []string
		for k, v := range e.env {
			kvs = append(kvs, k+"="+v)
		}
		return kvs
	}
	code := runIn(ctx, full, &out, &errb, func(k string) string { return e.env[k] }, environ)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// noAgentsWarning starts the warning of a write to a prefix with no live
// agent, which most tests' prefixes are.
const noAgentsWarning = "regionctl: warning: no live agent under "

// otherWarnings returns the warning lines of stderr but noAgentsWarning's.
func otherWarnings(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "warning") && !strings.HasPrefix(l, noAgentsWarning) {
			out = append(out, l)
		}
	}
	return out
}

// must runs regionctl and fails the test unless it exits with code.
func (e *tenv) must(code int, args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != code {
		e.t.Fatalf("regionctl %s: want exit %d, got %s", strings.Join(args, " "), code, r)
	}
	return r
}

// seed applies the example fleet.
func (e *tenv) seed() {
	e.t.Helper()
	e.must(0, "apply", "-f", exampleConfig, "--reason", "seed")
}

// writeFile writes a file in the test's temp dir and returns its path.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// get reads one key's value; "" when absent.
func (e *tenv) get(key string) string {
	e.t.Helper()
	resp, err := testClient.Get(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// prefixRevision returns the newest mod revision under the test's prefix
// and the number of keys: a fingerprint that any write changes.
func (e *tenv) fingerprint() (int64, int64) {
	e.t.Helper()
	resp, err := testClient.Get(context.Background(), e.prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	var maxRev int64
	for _, kv := range resp.Kvs {
		maxRev = max(maxRev, kv.ModRevision)
	}
	return maxRev, int64(len(resp.Kvs))
}
