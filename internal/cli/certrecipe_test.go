package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/internal/testprog"
)

// recipe returns the openssl recipe of docs/regionctl.md: the sh block
// after the paragraph that starts "A recipe with `openssl`".
func recipe(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/regionctl.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "A recipe with `openssl`")
	if ok {
		_, after, ok = strings.Cut(after, "```sh\n")
	}
	block, _, closed := strings.Cut(after, "\n```")
	if !ok || !closed {
		t.Fatal("docs/regionctl.md has no sh block after \"A recipe with `openssl`\"")
	}
	return block
}

// TestCertificateRecipe runs the docs' openssl recipe as written and sets
// up a fleet with what it made: etcd serves TLS with the member's
// certificate and requires client certificates; root (by certificate, no
// password) turns authentication on and runs auth apply; the operator
// alice then applies the example fleet, audited under her certificate's
// CN, and the agent's certificate reads it but cannot write it.
func TestCertificateRecipe(t *testing.T) {
	t.Parallel()
	bash := testprog.Need(t, "bash", "apt-get install -y bash")
	testprog.Need(t, "openssl", "apt-get install -y openssl")
	dir := t.TempDir()
	cmd := exec.Command(bash, "-e", "-c", recipe(t))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the recipe failed: %v\n%s", err, out)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	rootTLS, err := tls.LoadX509KeyPair(f("root.pem"), f("root-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(f("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	srv, err := devetcd.Start(context.Background(), devetcd.Config{Dir: f("etcd"), BcryptCost: 4, ClientTLS: &devetcd.TLS{
		CertFile: f("etcd-1.pem"), KeyFile: f("etcd-1-key.pem"), ClientCAFile: f("ca.pem"),
		Dial: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{rootTLS}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	root, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// As the docs say: root with no password, its certificate's CN root.
	if _, err := root.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := root.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	as := func(user string, args ...string) result {
		r, _ := runEnv(nil, append([]string{"--endpoints", srv.Endpoints[0], "--prefix", "/recipe/v1",
			"--cacert", f("ca.pem"), "--cert", f(user + ".pem"), "--key", f(user + "-key.pem")}, args...)...)
		return r
	}
	if r := as("root", "auth", "apply", "--operator", "alice", "--agent", "node-1", "--origin", "eu-central"); r.code != ExitOK {
		t.Fatalf("auth apply as root by certificate: %s", r)
	}
	if r := as("alice", "apply", "-f", exampleConfig, "--reason", "recipe"); r.code != ExitOK {
		t.Fatalf("apply as alice by certificate: %s", r)
	}
	var recs []struct{ User string }
	if r := as("alice", "history", "-o", "json"); r.code != ExitOK || json.Unmarshal([]byte(r.stdout), &recs) != nil || len(recs) != 1 || recs[0].User != "alice" {
		t.Fatalf("history as alice: %s; want one record by alice (the certificate's CN)", r)
	}
	if r := as("regiond-agent-node-1", "pool", "drain", "eu-central", "--reason", "not mine"); r.code != ExitRefused || !strings.Contains(r.stderr, "permission denied") {
		t.Fatalf("a drain with the agent's certificate: %s; want it refused", r)
	}
	behindTheProxy(t, dir, srv.Endpoints, as)
}

// behindTheProxy follows the docs past the recipe, for an agent behind
// etcd's grpc-proxy: auth apply --passwords gives its new user a password;
// the proxy runs with the recipe's certificates (its own without a CN to
// etcd, proxy-1's to its clients, which must present one of the CA's); the
// agent, its certificate for the proxy and its password for etcd, syncs,
// follows an operator's write and confirms it (its status key put through
// the proxy under its own role). A client of the proxy without a login is
// refused everything, and a proxy given a certificate with a CN to dial
// etcd with refuses to start.
func behindTheProxy(t *testing.T, dir string, etcd []string, as func(user string, args ...string) result) {
	f := func(name string) string { return filepath.Join(dir, name) }
	const user = "regiond-agent-node-2"
	noPasswordUserGetsNone(t, dir, etcd, as)
	r := as("root", "auth", "apply", "--agent", "node-2", "--passwords")
	m := regexp.MustCompile(`password of user ` + user + `: (\S+)`).FindStringSubmatch(r.stdout)
	if r.code != ExitOK || m == nil {
		t.Fatalf("auth apply --agent node-2 --passwords: %s; want the new user's password", r)
	}
	dial := func(name string) *tls.Config {
		tc, err := devetcd.ClientCert{CN: name, CertFile: f(name + ".pem"), KeyFile: f(name + "-key.pem")}.TLSConfig(f("ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
		return tc
	}
	p := etcdproc.StartProxyTo(t, etcd, etcdproc.ProxyConfig{AuthOn: true, TLS: &etcdproc.ProxyTLS{
		CAFile: f("ca.pem"), CertFile: f("proxy-1.pem"), KeyFile: f("proxy-1-key.pem"),
		UpstreamCertFile: f("grpc-proxy.pem"), UpstreamKeyFile: f("grpc-proxy-key.pem"), Dial: dial(user)}})

	var logs logbuf.Buffer
	cfg := agent.DefaultConfig()
	cfg.Endpoints, cfg.Prefix, cfg.Node = []string{p.URL()}, "/recipe/v1", "node-2"
	cfg.Socket, cfg.Listen = "", "127.0.0.1:0"
	cfg.Snapshot = filepath.Join(t.TempDir(), "shm", "table.json")
	cfg.TLS, cfg.Username, cfg.Password = dial(user), user, m[1]
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, _ := startAgent(t, cfg)
	if _, ok := poll.Until(20*time.Second, func() bool {
		code, d, err := agentResolve(a, "DE")
		return err == nil && code == 200 && d.Pool == "eu-central"
	}); !ok {
		t.Fatalf("the agent behind the proxy did not sync (DE to eu-central):\n%s", logs.String())
	}
	r = as("alice", "pool", "drain", "eu-central", "--reason", "behind the proxy", "--wait-converged=20s", "--expect-agents=1", "-o", "json")
	var w writeResult
	if r.code != ExitOK || json.Unmarshal([]byte(r.stdout), &w) != nil || w.Converged == nil || !*w.Converged || w.ConvergedAgents != 1 {
		t.Fatalf("a drain waiting for the agent behind the proxy: %s; want converged, by 1 agent\n%s", r, logs.String())
	}
	if code, d, err := agentResolve(a, "DE"); err != nil || code != 200 || d.Pool == "eu-central" || d.Revision < w.Revision {
		t.Fatalf("after the drain converged the agent serves %d %+v (%v), want another pool at revision %d", code, d, err, w.Revision)
	}
	if l := strings.ToLower(logs.String()); strings.Contains(l, "permission denied") {
		t.Fatalf("the agent behind the proxy met a refusal:\n%s", logs.String())
	}

	anon, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}, DialTimeout: 5 * time.Second, TLS: dial("alice"), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := anon.Get(ctx, "/recipe/v1/", clientv3.WithPrefix()); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("a read through the proxy without a login (alice's certificate only): %v; want permission denied", err)
	}

	// regionctl through the proxy with a certificate alone: etcd saw no
	// user, and the refusal says why rather than blaming alice's role
	// (the auth review); a heartbeat is not asked whether its pool id is
	// right (it is).
	viaProxy := func(user string, args ...string) result {
		r, _ := runEnv(nil, append([]string{"--endpoints", p.URL(), "--prefix", "/recipe/v1",
			"--cacert", f("ca.pem"), "--cert", f(user + ".pem"), "--key", f(user + "-key.pem")}, args...)...)
		return r
	}
	if r := viaProxy("alice", "get", "pools"); r.code != ExitRefused ||
		!strings.Contains(r.stderr, "user alice is the client certificate's common name, but --endpoints are etcd's grpc-proxy, which passes no client certificate on: etcd saw no user at all") {
		t.Fatalf("get through the proxy with alice's certificate alone: %s; want the refusal to name the proxy", r)
	}
	// Its key readable by its group, too: warned about (the recipe's
	// chmod 0400 skipped).
	if err := os.Chmod(f("regiond-origin-eu-central-key.pem"), 0o640); err != nil {
		t.Fatal(err)
	}
	if r := viaProxy("regiond-origin-eu-central", "heartbeat", "eu-central", "--instance", "fra-1", "--addr", "10.0.0.1:443"); r.code != ExitRefused ||
		!strings.Contains(r.stderr, "etcd saw no user at all") || strings.Contains(r.stderr, "pool's id") ||
		!strings.Contains(r.stderr, "regionctl: warning: --key "+f("regiond-origin-eu-central-key.pem")+" may be read by its group or others (mode 0640)") {
		t.Fatalf("a heartbeat through the proxy with the origin's certificate alone: %s; want the refusal to name the proxy, not the pool id, and the key's mode warned about", r)
	}

	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, etcdproc.Binary(t), "grpc-proxy", "start", "--endpoints="+strings.Join(etcd, ","),
		"--cacert="+f("ca.pem"), "--cert="+f("root.pem"), "--key="+f("root-key.pem"),
		fmt.Sprintf("--listen-addr=127.0.0.1:%d", port), "--data-dir="+filepath.Join(t.TempDir(), "proxy"))
	if out, err := cmd.CombinedOutput(); err == nil || ctx.Err() != nil || !strings.Contains(string(out), "non empty Common Name") {
		t.Fatalf("a grpc-proxy dialing etcd with root's certificate: %v; want it to refuse to start, naming the CN:\n%s", err, out)
	}
}

// noPasswordUserGetsNone: --passwords for a user the recipe made without
// a password (node-1's agent) is warned about, nothing changed, naming the
// way out (etcd gives such a user no password: the auth review found the docs'
// proxy step silently printing none); the way out works: once the user is
// deleted, a re-run adds it with a password and its role, and its
// certificate still logs it in.
func noPasswordUserGetsNone(t *testing.T, dir string, etcd []string, as func(user string, args ...string) result) {
	const user = "regiond-agent-node-1"
	r := as("root", "auth", "apply", "--agent", "node-1", "--passwords")
	if r.code != ExitOK || !strings.Contains(r.stderr, "regionctl: warning: --passwords: user(s) "+user+" exist without a password (made for client certificates) and get none") ||
		!strings.Contains(r.stderr, "etcdctl user delete "+user) || strings.Contains(r.stdout, "password of user") || !strings.Contains(r.stdout, "nothing to change") {
		t.Fatalf("auth apply --passwords of a user without one: %s; want a warning naming the delete, and nothing changed", r)
	}
	tc, err := devetcd.ClientCert{CN: "root", CertFile: filepath.Join(dir, "root.pem"), KeyFile: filepath.Join(dir, "root-key.pem")}.TLSConfig(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: etcd, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := root.UserDelete(ctx, user); err != nil {
		t.Fatal(err)
	}
	if r := as("root", "auth", "apply", "--agent", "node-1", "--passwords"); r.code != ExitOK || !strings.Contains(r.stdout, "password of user "+user+": ") {
		t.Fatalf("auth apply --passwords once the user was deleted: %s; want its new password", r)
	}
	if r := as(user, "get", "pools"); r.code != ExitOK {
		t.Fatalf("a read by the certificate of a user with a password now: %s; want it taken", r)
	}
}
