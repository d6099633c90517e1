package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
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
}
