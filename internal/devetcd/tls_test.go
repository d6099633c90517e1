package devetcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

// dial returns a client of srv with tlsCfg, closed when the test ends.
func dial(t *testing.T, srv *Server, tlsCfg *tls.Config, user, password string) (*clientv3.Client, error) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 2 * time.Second,
		TLS: tlsCfg, Username: user, Password: password, Logger: zap.NewNop()})
	if err == nil {
		t.Cleanup(func() { cli.Close() })
	}
	return cli, err
}

// TestTLSRequiresTrustAndClientCert: the TLS server serves a client that
// trusts its CA and presents a client certificate, and nobody else.
func TestTLSRequiresTrustAndClientCert(t *testing.T) {
	certs := NewTestCerts(t)
	srv := NewTestTLS(t, certs)
	if !strings.HasPrefix(srv.Endpoints[0], "https://127.0.0.1:") {
		t.Fatalf("endpoints %v, want https on loopback", srv.Endpoints)
	}
	cli := NewTestClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatalf("put with the client certificate: %v", err)
	}
	good, err := certs.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	noCert := good.Clone()
	noCert.Certificates = nil
	noCA := good.Clone()
	noCA.RootCAs = nil
	// Each refusal takes the request timeout: run them at once.
	var wg sync.WaitGroup
	for name, cfg := range map[string]*tls.Config{"no client certificate": noCert, "CA not trusted": noCA, "plain text": nil} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dial(t, srv, cfg, "", "")
			if err == nil {
				rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
				_, err = c.Get(rctx, "/k")
				rcancel()
			}
			if err == nil {
				t.Errorf("%s: get succeeded", name)
			} else {
				t.Logf("%s: %v", name, err)
			}
		}()
	}
	wg.Wait()
	// An http URL with TLS files is refused rather than served in clear.
	tlsCfg, _ := certs.ServerTLS()
	if _, err := Start(context.Background(), Config{Dir: t.TempDir(), ClientURL: "http://127.0.0.1:1", ClientTLS: tlsCfg}); err == nil || !strings.Contains(err.Error(), "want scheme https") {
		t.Fatalf("http URL with TLS: %v", err)
	}
}

// TestEnableAuth: after EnableAuth the user reads and writes its prefix
// only, root can do anything, and a wrong password is refused.
func TestEnableAuth(t *testing.T) {
	srv, err := Start(context.Background(), Config{Dir: t.TempDir(), BcryptCost: uint(bcrypt.MinCost)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	a := EnableTestAuth(t, srv, "/app/")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	user, err := srv.ClientAs(a.User, a.Password)
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	if _, err := user.Put(ctx, "/app/k", "v"); err != nil {
		t.Fatalf("user put in its prefix: %v", err)
	}
	if _, err := user.Put(ctx, "/other/k", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("user put outside its prefix: %v, want permission denied", err)
	}
	root, err := srv.ClientAs("root", a.RootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.Put(ctx, "/other/k", "v"); err != nil {
		t.Fatalf("root put: %v", err)
	}
	if _, err := srv.ClientAs(a.User, "wrong"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
	}
	anon := NewTestClient(t, srv)
	if _, err := anon.Get(ctx, "/app/k"); err == nil {
		t.Fatal("get without a user succeeded with auth on")
	}
}

// TestTLSWithAuth: both at once, as production runs.
func TestTLSWithAuth(t *testing.T) {
	srv := NewTestTLS(t, NewTestCerts(t))
	a := EnableTestAuth(t, srv, "/regiond/v1/")
	cli, err := srv.ClientAs(a.User, a.Password)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/regiond/v1/agents/n", "x"); err != nil {
		t.Fatal(err)
	}
}

// TestIssueClientCertIsUser: with authentication on, a client certificate
// from IssueClient authenticates as the user of its common name: it may do
// what that user's role allows and nothing else; a certificate whose
// common name is no user is refused.
func TestIssueClientCertIsUser(t *testing.T) {
	certs := NewTestCerts(t)
	srv := NewTestTLS(t, certs)
	root := EnableTestRootAuth(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "app-rw"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "app-rw", "/app/", clientv3.GetPrefixRangeEnd("/app/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error {
			_, err := root.UserAddWithOptions(ctx, "app-user", "", &clientv3.UserAddOptions{NoPassword: true})
			return err
		},
		func() error { _, err := root.UserGrantRole(ctx, "app-user", "app-rw"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	client := func(cn string) *clientv3.Client {
		cc, err := certs.IssueClient(cn)
		if err != nil {
			t.Fatal(err)
		}
		if cc.CN != cn || certCN(t, cc.CertFile) != cn {
			t.Fatalf("certificate %s: CN %q, want %q", cc.CertFile, certCN(t, cc.CertFile), cn)
		}
		tc, err := cc.TLSConfig(certs.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := srv.ClientTLS(tc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	user := client("app-user")
	if _, err := user.Put(ctx, "/app/k", "v"); err != nil {
		t.Fatalf("put by the certificate's user in its prefix: %v", err)
	}
	if _, err := user.Put(ctx, "/other/k", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("put outside the user's prefix: %v, want permission denied", err)
	}
	if _, err := client("nobody").Get(ctx, "/app/k"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("get with a certificate whose CN is no user: %v, want permission denied", err)
	}
}

// certCN returns the common name of the certificate in a PEM file.
func certCN(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", file)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.Subject.CommonName
}
