package etcddiag

import "testing"

// TestCertAlertNamesEveryCertificateAlert proves that each TLS alert Go
// names for the client's certificate (crypto/tls's alert texts: unknown
// certificate, access denied, revoked, unsupported) gets the certificate
// note, not only the four TestCertAlert lists, and that the match is on
// the alert's start: a wrapped error's later text does not count.
func TestCertAlertNamesEveryCertificateAlert(t *testing.T) {
	for msg, want := range map[string]bool{
		"remote error: tls: unknown certificate":                         true,
		"remote error: tls: access denied":                               true,
		"remote error: tls: revoked certificate":                         true,
		"remote error: tls: unsupported certificate":                     true,
		"x: remote error: tls: bad certificate (wrapped)":                true,
		"remote error: tls: internal error":                              false,
		"remote error: tls: illegal parameter, then bad certificate":     false,
		"remote error: tls: no application protocol":                     false,
		"remote error: tls: error decrypting message (bad certificate?)": false,
	} {
		if got := certAlert(msg); got != want {
			t.Errorf("certAlert(%q) = %v, want %v", msg, got, want)
		}
	}
}
