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
	"regexp"
	"sync"
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

	mu     sync.Mutex // guards serial
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	now    time.Time
	serial int64
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
	if c.ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	c.caKey, c.now, c.serial = caKey, now, 1
	if err := writePEM(c.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	// The server certificate may also act as a client (etcd dials itself
	// with it in some set-ups).
	if err := c.leaf("localhost", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		[]string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		c.ServerCertFile, c.ServerKeyFile, time.Time{}); err != nil {
		return nil, err
	}
	if err := c.leaf(TestClientCN, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil,
		c.ClientCertFile, c.ClientKeyFile, time.Time{}); err != nil {
		return nil, err
	}
	return c, nil
}

// leaf writes a certificate for cn signed by the CA, and its key, valid
// until notAfter (zero: a day).
func (c *TestCerts) leaf(cn string, usage []x509.ExtKeyUsage, dns []string, ips []net.IP, certFile, keyFile string, notAfter time.Time) error {
	if notAfter.IsZero() {
		notAfter = c.now.Add(24 * time.Hour)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(c.nextSerial()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    c.now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
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

func (c *TestCerts) nextSerial() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.serial++
	return c.serial
}

// ClientCert is a client certificate of TestCerts and its key.
type ClientCert struct {
	// CN is the certificate's common name: the etcd user it
	// authenticates as, with authentication on.
	CN string
	// CertFile and KeyFile are the PEM files of the certificate and its
	// key, in TestCerts.Dir.
	CertFile, KeyFile string
}

// IssueClient writes a client certificate with common name cn, signed by
// the CA, into Dir. With authentication on, etcd takes cn as the user of
// requests that carry no user token.
func (c *TestCerts) IssueClient(cn string) (ClientCert, error) {
	return c.IssueClientUntil(cn, time.Time{})
}

// IssueClientUntil is IssueClient with a certificate that expires at
// notAfter (zero: a day after the CA was made).
func (c *TestCerts) IssueClientUntil(cn string, notAfter time.Time) (ClientCert, error) {
	if c.caKey == nil {
		return ClientCert{}, fmt.Errorf("devetcd: IssueClient %s: the CA key is not loaded", cn)
	}
	name := fmt.Sprintf("client-%s-%d", nonFileChars.ReplaceAllString(cn, "_"), c.nextSerial())
	cc := ClientCert{CN: cn, CertFile: filepath.Join(c.Dir, name+".pem"), KeyFile: filepath.Join(c.Dir, name+"-key.pem")}
	if err := c.leaf(cn, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil, cc.CertFile, cc.KeyFile, notAfter); err != nil {
		return ClientCert{}, err
	}
	return cc, nil
}

// TLSConfig returns a client TLS config that trusts caFile and presents
// the certificate.
func (cc ClientCert) TLSConfig(caFile string) (*tls.Config, error) {
	return clientTLS(caFile, cc.CertFile, cc.KeyFile)
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
	return clientTLS(c.CAFile, c.ClientCertFile, c.ClientKeyFile)
}

func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

var nonFileChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

func writePEM(path, typ string, der []byte) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
