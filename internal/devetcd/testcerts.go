package devetcd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCerts are throwaway PEM files for TLS tests: a CA, a server
// certificate it signed for 127.0.0.1, ::1 and localhost, and a client
// certificate it signed. Keys are unencrypted ECDSA P-256.
type TestCerts struct {
	// Dir holds every file.
	Dir string
	// CAFile is the CA certificate: what clients pass as --cacert and what
	// the server checks client certificates against.
	CAFile string
	// ServerCertFile and ServerKeyFile are the server's certificate and key.
	ServerCertFile, ServerKeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate (common
	// name TestClientCN) and its key, for --cert and --key.
	ClientCertFile, ClientKeyFile string
}

// TestClientCN is the common name of the client certificate of
// NewTestCerts. With authentication enabled, etcd takes the common name of
// a verified client certificate as the user of requests that carry no
// token, so no test user should be named like this.
const TestClientCN = "regiond-test-client"

// NewTestCerts writes a fresh CA, server and client certificate into
// t.TempDir(); they are valid from an hour ago for a day.
func NewTestCerts(t testing.TB) *TestCerts {
	t.Helper()
	c, err := WriteTestCerts(t.TempDir())
	if err != nil {
		t.Fatalf("test certificates: %v", err)
	}
	return c
}

// WriteTestCerts is NewTestCerts into dir (which must exist), for callers
// without a testing.TB (TestMain).
func WriteTestCerts(dir string) (*TestCerts, error) {
	c := &TestCerts{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "regiond test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	if err := writePEM(c.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(serial int64, cn string, usage []x509.ExtKeyUsage, dns []string, ips []net.IP, certFile, keyFile string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			DNSNames:     dns,
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("create certificate %s: %w", cn, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyFile, "PRIVATE KEY", keyDER)
	}
	// The server certificate may also act as a client (etcd dials itself
	// with it in some set-ups).
	if err := leaf(2, "localhost", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		[]string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		c.ServerCertFile, c.ServerKeyFile); err != nil {
		return nil, err
	}
	if err := leaf(3, TestClientCN, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil,
		c.ClientCertFile, c.ClientKeyFile); err != nil {
		return nil, err
	}
	return c, nil
}

// ServerTLS returns the TLS settings of a server that uses the server
// certificate and requires client certificates signed by the CA; its Dial
// config (for Server.Client) presents the client certificate.
func (c *TestCerts) ServerTLS() (*TLS, error) {
	dial, err := c.ClientTLSConfig()
	if err != nil {
		return nil, err
	}
	return &TLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKeyFile, ClientCAFile: c.CAFile, Dial: dial}, nil
}

// ClientTLSConfig returns a client TLS config that trusts the CA and
// presents the client certificate.
func (c *TestCerts) ClientTLSConfig() (*tls.Config, error) {
	caPEM, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no certificate", c.CAFile)
	}
	pair, err := tls.LoadX509KeyPair(c.ClientCertFile, c.ClientKeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

func writePEM(path, typ string, der []byte) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
