package store

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCA writes a self-signed CA certificate and its key as PEM files.
func writeCA(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestTLSConfig(t *testing.T) {
	t.Parallel()
	cert, key := writeCA(t)
	cases := []struct {
		name    string
		c       DialConfig
		tls     bool
		wantErr string
	}{
		{name: "no TLS", c: DialConfig{}},
		{name: "CA only", c: DialConfig{CACert: cert}, tls: true},
		{name: "CA and client cert", c: DialConfig{CACert: cert, Cert: cert, Key: key}, tls: true},
		{name: "cert without key", c: DialConfig{Cert: cert}, wantErr: "--cert and --key go together"},
		{name: "missing CA file", c: DialConfig{CACert: "/nonexistent/ca.pem"}, wantErr: "read --cacert"},
		{name: "CA file without PEM", c: DialConfig{CACert: key}, wantErr: "no PEM certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.c.tlsConfig()
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error %q, got %v", tc.wantErr, err)
				}
			case err != nil:
				t.Fatal(err)
			case (cfg != nil) != tc.tls:
				t.Fatalf("TLS config %v, want TLS %v", cfg, tc.tls)
			}
		})
	}
}
