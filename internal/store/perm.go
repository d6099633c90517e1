package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"

	"github.com/regiond/regiond/internal/etcddiag"
)

// PermissionError means etcd refused a request for lack of permission:
// the request changed nothing.
type PermissionError struct {
	// User is the etcd user refused: the --user, or the common name of the
	// client certificate (CertUser); empty when there was neither.
	User string
	// UserFromCert says User is the certificate's CN (no --user).
	UserFromCert bool
	// Endpoints are the endpoints the client was given.
	Endpoints []string
	// Op is the refused request: "read /regiond/v1/routing/",
	// "put /regiond/v1/routing/health/eu-central/fra-1", "commit epoch 3".
	Op string
	// Needs are the permissions Op needs.
	Needs []Grant
	// Roles are the regiond roles (see Roles) that hold all of Needs,
	// least privileged first.
	Roles []string
	// Write is set when Op was a write: the message says nothing was written.
	Write bool
	// ViaProxy says the endpoints answered as etcd's grpc-proxy (asked
	// only for a user from a certificate, which a proxy does not pass on).
	ViaProxy bool
	// Err is etcd's error.
	Err error
}

// Error names the user, the request, what it needs and the roles that
// hold it.
func (e *PermissionError) Error() string {
	who := "for user " + e.User
	if e.User == "" {
		who = "without a user"
	}
	msg := fmt.Sprintf("permission denied %s at %s: %s needs %s", who, strings.Join(e.Endpoints, ","), e.Op, needsString(e.Needs))
	switch len(e.Roles) {
	case 0:
	case 1:
		msg += " (role " + e.Roles[0] + ")"
	default:
		msg += " (role " + strings.Join(e.Roles[:len(e.Roles)-1], ", ") + " or " + e.Roles[len(e.Roles)-1] + ")"
	}
	if e.Write {
		msg += ", nothing written"
	}
	msg += ": " + e.Err.Error()
	switch {
	case e.User == "":
		msg += " (etcd has authentication on: set --user, or --cert with a certificate whose common name is an etcd user)"
	case e.UserFromCert && e.ViaProxy:
		// The RBAC review: through a proxy the message blamed the role
		// of a user etcd never saw.
		msg += " (user " + e.User + " is the client certificate's common name, but --endpoints are etcd's grpc-proxy, which passes no client certificate on: etcd saw no user at all; " +
			"log in there with --user and a password (regionctl auth apply --passwords), or point --endpoints at the members)"
	case e.UserFromCert:
		// The auth review: the proxy's note came with every refusal of a
		// certificate's user, the members' too.
		msg += " (user " + e.User + " is the client certificate's common name: it must be an etcd user holding that role; regionctl auth apply makes each job's user and role)"
	}
	return msg
}

// Unwrap returns etcd's error.
func (e *PermissionError) Unwrap() error { return e.Err }

// needsString is "readwrite on A and B", "readwrite on A, B and C",
// "read on A and readwrite on B".
func needsString(needs []Grant) string {
	var parts []string
	for i := 0; i < len(needs); {
		j := i + 1
		for j < len(needs) && needs[j].Access == needs[i].Access {
			j++
		}
		where := make([]string, 0, j-i)
		for _, n := range needs[i:j] {
			where = append(where, n.Where())
		}
		list := where[len(where)-1]
		if len(where) > 1 {
			list = strings.Join(where[:len(where)-1], ", ") + " and " + list
		}
		parts = append(parts, string(needs[i].Access)+" on "+list)
		i = j
	}
	return strings.Join(parts, " and ")
}

// isPermissionDenied reports whether etcd refused a request for lack of
// permission, or because it carried no user while authentication is on.
func isPermissionDenied(err error) bool {
	return etcddiag.Refused(err)
}

// permErr is rpcErr for a request that needs needs: a permission refusal
// becomes a *PermissionError naming them and the roles that hold them.
func (s *Store) permErr(what string, err error, needs ...Grant) error {
	return permissionError(s.opts, s.roles, what, false, err, needs, s.rpcErr, s.viaProxy)
}

// writeErr is permErr for a write.
func (s *Store) writeErr(what string, err error, needs ...Grant) error {
	return permissionError(s.opts, s.roles, what, true, err, needs, s.rpcErr, s.viaProxy)
}

// viaProxy is ViaProxy for a refusal's message.
func (s *Store) viaProxy() bool {
	_, ok := s.ViaProxy(context.Background())
	return ok
}

// permissionError is a refusal of err as a *PermissionError, or other's
// error for any other err. viaProxy is asked only for a user from a
// certificate.
func permissionError(o Options, roles Roles, what string, write bool, err error, needs []Grant,
	other func(string, error) error, viaProxy func() bool) error {
	if err == nil {
		return nil
	}
	if len(needs) == 0 || !isPermissionDenied(err) {
		return other(what, err)
	}
	return &PermissionError{User: o.User, UserFromCert: o.UserFromCert, Endpoints: o.Endpoints, Op: what, Needs: needs,
		Roles: roles.Holding(needs...), Write: write, Err: err, ViaProxy: o.UserFromCert && viaProxy()}
}

// CertUser returns the etcd user of a client certificate: with
// authentication on (and --client-cert-auth), etcd takes the common name
// of a verified client certificate as the user of a request that carries
// no user token. Empty when certFile is empty or does not load.
func CertUser(certFile, keyFile string) string {
	if certFile == "" {
		return ""
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return ""
	}
	return CertCN(pair)
}

// CertCN returns the common name of a loaded client certificate's leaf
// (etcd's user with --client-cert-auth), or "".
func CertCN(cert tls.Certificate) string {
	if len(cert.Certificate) == 0 {
		return ""
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return ""
	}
	return leaf.Subject.CommonName
}
