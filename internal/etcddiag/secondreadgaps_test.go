package etcddiag_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/etcddiag"
)

// tls12ClientAuthServer starts an HTTPS server that speaks TLS 1.2 at
// most and requires a client certificate signed by caFile: under TLS 1.2
// the server refuses a client certificate inside the handshake (a
// "remote error: tls: …" alert of the client's Handshake), unlike TLS
// 1.3, where the refusal comes after it.
func tls12ClientAuthServer(t *testing.T, caFile string, alsoTrust ...*x509.Certificate) *httptest.Server {
	t.Helper()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, c := range alsoTrust {
		pool.AddCert(c)
	}
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MaxVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestRefusedCertNoteInsideTheHandshake proves the note of a refused
// client certificate on the handshake branch of Why (a TLS 1.2 server,
// which refuses it inside the handshake): the expired certificate is
// named with its CN and expiry, a certificate not valid yet names its
// start and asks about the clock, and a handshake that fails on the
// client's side (the server's certificate is not trusted) carries no
// note about the client's certificate, which the server never judged.
func TestRefusedCertNoteInsideTheHandshake(t *testing.T) {
	t.Parallel()
	certs := devetcd.NewTestCerts(t)
	// A self-signed certificate valid only from an hour on, which the
	// server trusts as a CA (so the client sends it): the server refuses
	// it (not valid yet); the client's note names its start.
	from := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	later := selfSigned(t, "later-one", from)
	laterCert, err := x509.ParseCertificate(later.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	srv := tls12ClientAuthServer(t, certs.CAFile, laterCert)
	ep := strings.Replace(srv.URL, "http://", "https://", 1)
	trustSrv := x509.NewCertPool()
	trustSrv.AddCert(srv.Certificate())

	expired, expiredAt := expiredClient(t, certs)
	expired.RootCAs = trustSrv

	future := &tls.Config{RootCAs: trustSrv, Certificates: []tls.Certificate{later}}

	good, err := certs.ClientTLSConfig() // trusts the CA, not the server's certificate
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		cfg     *tls.Config
		want    []string
		notWant string
	}{
		{"expired", expired, []string{ep + ": TLS handshake: ", "remote error: tls:",
			"(this client's certificate --cert, CN old-one, expired at " + expiredAt.Format(time.RFC3339) + ": renew it"}, ""},
		{"not valid yet", future, []string{ep + ": TLS handshake: ", "remote error: tls:",
			"(this client's certificate --cert, CN later-one, is valid only from " + from.Format(time.RFC3339) + ": is this host's clock right?)"}, ""},
		{"server not trusted", good, []string{ep + ": TLS handshake: ", "certificate signed by unknown authority"}, "this client's certificate"},
	} {
		got := etcddiag.Why(context.Background(), []string{ep}, tc.cfg)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: Why = %q, want it to contain %q", tc.name, got, w)
			}
		}
		if tc.notWant != "" && strings.Contains(got, tc.notWant) {
			t.Errorf("%s: Why = %q, names the client's certificate for a failure on the client's side", tc.name, got)
		}
	}
}

// selfSigned is a client certificate for cn, self-signed, valid from
// notBefore for a day.
func selfSigned(t *testing.T, cn string, notBefore time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: notBefore, NotAfter: notBefore.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestUserEmptyAsAWatchCancelReason proves that UserEmpty and Refused
// know etcd's "user name is empty" as the text of a watch's cancel
// reason (a watch created by a client without a user while
// authentication is on), where errors.Is does not: the store and the
// mirror classify a refused watch by it.
func TestUserEmptyAsAWatchCancelReason(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	devetcd.EnableTestRootAuth(t, srv)
	anon, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var werr error
	for resp := range anon.Watch(ctx, "/regiond/v1/routing/", clientv3.WithPrefix()) {
		if werr = resp.Err(); werr != nil {
			break
		}
	}
	if werr == nil {
		t.Fatal("the watch of a client without a user was not refused")
	}
	if errors.Is(werr, rpctypes.ErrUserEmpty) || errors.Is(werr, rpctypes.ErrGRPCUserEmpty) {
		t.Logf("the cancel reason is a value (%v): the text match is not needed here", werr)
	}
	if !etcddiag.UserEmpty(werr) || !etcddiag.Refused(werr) {
		t.Fatalf("watch refused with %q: UserEmpty %v, Refused %v; want both", werr, etcddiag.UserEmpty(werr), etcddiag.Refused(werr))
	}
}
