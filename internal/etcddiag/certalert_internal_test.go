package etcddiag

import "testing"

// TestCertAlert: only the server's alerts about the client's certificate
// get the note on it; an alert about the protocol or the ciphers, or a
// failure on the client's side, do not (the second read: any alert got
// "is it signed by a CA etcd trusts?").
func TestCertAlert(t *testing.T) {
	for msg, want := range map[string]bool{
		"remote error: tls: expired certificate":                 true,
		"remote error: tls: bad certificate":                     true,
		"remote error: tls: certificate required":                true,
		"remote error: tls: unknown certificate authority":       true,
		"remote error: tls: protocol version not supported":      false,
		"remote error: tls: handshake failure":                   false,
		"x509: certificate signed by unknown authority":          false,
		"tls: failed to verify certificate: x509: expired":       false,
		"read tcp 127.0.0.1:1->127.0.0.1:2: connection reset by": false,
	} {
		if got := certAlert(msg); got != want {
			t.Errorf("certAlert(%q) = %v, want %v", msg, got, want)
		}
	}
}
