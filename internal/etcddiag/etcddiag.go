// Package etcddiag checks etcd endpoints as an operator wrote them, and
// names why etcd does not answer at them. A gRPC
// client waiting for a connection reports only that its deadline passed,
// so a refused connection, a certificate etcd's CA did not sign and TLS
// spoken to a plaintext port all read "context deadline exceeded". Why
// dials each endpoint as an etcd client would, outside gRPC, and says
// what went wrong there.
package etcddiag

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Timeout bounds each endpoint's dial and handshake.
const Timeout = time.Second

// Silent is what Why says of an endpoint that takes the TCP connection and
// then answers nothing within Timeout, not even to refuse a TLS hello: the
// path drops packets (a firewall, a dead link) or the member is stopped
// (SIGSTOP), overloaded, or just started and waiting for its peers (a
// restored or restarted cluster whose quorum is not up yet: it takes
// connections, and completes no TLS handshake until then).
var Silent = "took the connection, but answered nothing within " + Timeout.String() + ": a path that drops packets (a firewall, a dead link), a member stopped or overloaded, or one just started and waiting for its peers (a restore, a cluster start: it answers once a quorum of members is up)"

// Why dials each endpoint at once (TCP, then for https:// a TLS handshake with tc,
// or with the system's roots when tc is nil, as the etcd client does) and
// returns what failed, one "endpoint: why" per endpoint, joined with "; ".
// An http:// endpoint that completes a TLS handshake is reported as
// serving TLS. It returns "" when every endpoint accepts the connection as
// configured: then etcd itself did not answer (no leader, overloaded).
func Why(ctx context.Context, endpoints []string, tc *tls.Config) string {
	why, _ := Check(ctx, endpoints, tc)
	return why
}

// Check is Why, and also returns the endpoints that took the connection
// as configured: where etcd itself did not answer (a member without a
// leader, when a quorum of members is down; an overloaded one).
func Check(ctx context.Context, endpoints []string, tc *tls.Config) (string, []string) {
	ws := make([]string, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w := endpoint(ctx, ep, tc); w != "" {
				ws[i] = ep + ": " + w
			}
		}()
	}
	wg.Wait()
	var why, connected []string
	for i, w := range ws {
		if w != "" {
			why = append(why, w)
		} else {
			connected = append(connected, endpoints[i])
		}
	}
	return strings.Join(why, "; "), connected
}

// Describe joins Check's results for a message: what failed at each
// endpoint, and, when some did take the connection, that etcd there did
// not answer, as a member without a leader does when a quorum of members
// is down. "" when why is "" (every endpoint took the connection).
func Describe(why string, connected []string) string {
	if why == "" || len(connected) == 0 {
		return why
	}
	return why + "; " + strings.Join(connected, ", ") + ": took the connection, but etcd did not answer: has the cluster a leader, a quorum of its members up?"
}

// NoSpaceHint says what etcd's NOSPACE alarm means and how it ends.
const NoSpaceHint = "etcd's NOSPACE alarm is raised (its database reached --quota-backend-bytes): it refuses every write until the alarm is disarmed; " +
	"free space (etcdctl compact <revision>, then etcdctl defrag --cluster), then etcdctl alarm disarm"

// Hint is the way out of an etcd refusal that has one (its NOSPACE
// alarm: NoSpaceHint), or "".
func Hint(err error) string {
	if NoSpace(err) {
		return NoSpaceHint
	}
	return ""
}

// NoSpace reports whether err is etcd refusing a write under its NOSPACE
// alarm ("mvcc: database space exceeded").
func NoSpace(err error) bool {
	return errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace) ||
		err != nil && strings.Contains(err.Error(), "database space exceeded") // wrapped as text
}

// InvalidToken reports whether err is etcd refusing a request or a watch
// for an auth token it does not take ("invalid auth token"): dropped
// (its user's password changed, a simple token's TTL ran out) or not
// known yet to the member asked. A request's error carries it as a value;
// a watch whose creation is refused carries it only as text, the cancel
// reason (etcd v3.7.3 clientv3, watch.go addSubstream: the reason, itself
// a gRPC status's text, is not one of the errors it maps back). The next
// request or watch logs in again.
func InvalidToken(err error) bool {
	return errors.Is(err, rpctypes.ErrInvalidAuthToken) || errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) ||
		err != nil && strings.Contains(err.Error(), rpctypes.ErrInvalidAuthToken.Error()) // a watch's cancel reason
}

// AuthFailed reports whether err is etcd refusing the client's login
// ("authentication failed"): a client whose token etcd no longer knows
// logs in again, and its password is refused (changed in etcd), or its
// user is gone (deleted, or etcd restored from a backup made before the
// user). As a value, or as text (a watch's cancel reason).
func AuthFailed(err error) bool {
	return errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrGRPCAuthFailed) ||
		err != nil && strings.Contains(err.Error(), rpctypes.ErrAuthFailed.Error())
}

// UserEmpty reports whether err is etcd refusing a request that carried
// no user while its authentication is on ("user name is empty"): the
// client has no login and no client certificate etcd took, or its
// certificate did not reach etcd (etcd's grpc-proxy passes none on; etcd
// without --client-cert-auth ignores it). As a value, or as the text of a
// watch's cancel reason (see InvalidToken).
func UserEmpty(err error) bool {
	return errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrGRPCUserEmpty) ||
		err != nil && strings.Contains(err.Error(), rpctypes.ErrUserEmpty.Error())
}

// Refused reports whether err is etcd refusing a request to the client's
// user (permission denied) or to a client without one (UserEmpty), as a
// value or as a watch's cancel reason.
func Refused(err error) bool {
	return err != nil && (errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied) ||
		strings.Contains(err.Error(), rpctypes.ErrPermissionDenied.Error()) || UserEmpty(err))
}

// endpoint is Why for one endpoint.
func endpoint(ctx context.Context, ep string, clientTLS *tls.Config) string {
	u, err := url.Parse(ep)
	if err != nil {
		return "not a URL of the form http(s)://host:port"
	}
	network, addr, serverName := "tcp", u.Host, u.Hostname()
	switch u.Scheme {
	case "unix", "unixs":
		// As etcd's client dials it: the path after "://", absolute
		// (unix:///run/etcd.sock) or relative (unix://etcd.sock), its
		// TLS server name the file's.
		_, addr, _ = strings.Cut(ep, "://")
		network, serverName = "unix", path.Base(addr)
		if addr == "" {
			return "not a socket path of the form " + u.Scheme + "://PATH"
		}
	case "http", "https":
		if u.Host == "" {
			return "not a URL of the form http(s)://host:port"
		}
	default:
		return fmt.Sprintf("unknown scheme %q (http, https, unix, unixs)", u.Scheme)
	}
	// The scheme to name in advice: TLS or plaintext of the same kind.
	tlsScheme, plainScheme := "https://", "http://"
	if network == "unix" {
		tlsScheme, plainScheme = "unixs://", "unix://"
	}
	d := net.Dialer{Timeout: Timeout}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return cause(err)
	}
	defer c.Close()
	secure := u.Scheme == "https" || u.Scheme == "unixs"
	cfg := &tls.Config{ServerName: serverName}
	if clientTLS != nil {
		cfg = clientTLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = serverName
		}
	}
	if !secure {
		// Plaintext configured: does the port speak TLS?
		cfg = &tls.Config{InsecureSkipVerify: true} // only to learn whether it answers TLS
	}
	hctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	tc := tls.Client(c, cfg)
	err = tc.HandshakeContext(hctx)
	var ne net.Error
	switch {
	case err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()):
		// etcd's port answers a TLS hello at once, with TLS or by closing
		// a plaintext connection: nothing at all is silence.
		return Silent
	case secure && errors.Is(err, io.EOF):
		return "TLS handshake: the server closed the connection (a plaintext port? then " + plainScheme + ")"
	case secure && err != nil:
		return "TLS handshake: " + cause(err) + refusedCertNote(err, clientTLS)
	case !secure && err == nil:
		return "the server there speaks TLS: use " + tlsScheme + " (and --cacert for a private CA)"
	case !secure:
		httpHost := u.Host
		if network == "unix" {
			httpHost = "localhost" // a socket's path is no host
		}
		return notEtcd(ctx, network, addr, httpHost)
	}
	// With TLS 1.3 the server checks the client's certificate after the
	// client's handshake is done: its refusal is the first thing read.
	tc.SetReadDeadline(time.Now().Add(Timeout / 4))
	_, err = tc.Read(make([]byte, 1))
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		return ""
	}
	if note := refusedCertNote(err, clientTLS); note != "" {
		return "TLS: the server refused this client's certificate after the handshake: " + cause(err) + note
	}
	return "TLS: the server closed the connection after the handshake: " + cause(err) + " (a client certificate it accepts? --cert, --key)"
}

// certAlert reports whether msg is the server's TLS alert about the
// client's certificate (not a protocol version or cipher it refused).
func certAlert(msg string) bool {
	i := strings.Index(msg, "remote error: tls: ")
	if i < 0 {
		return false
	}
	alert := msg[i+len("remote error: tls: "):]
	for _, a := range []string{"bad certificate", "unsupported certificate", "revoked certificate", "expired certificate",
		"unknown certificate", "unknown certificate authority", "certificate required", "access denied"} {
		if strings.HasPrefix(alert, a) {
			return true
		}
	}
	return false
}

// refusedCertNote describes the client certificate of cfg when err is the
// server's TLS alert refusing it ("remote error: tls: expired
// certificate", "bad certificate"): its CN and validity, naming an expiry
// passed or a start not reached (the auth review: an expired certificate
// was named, not which, nor since when). "" otherwise.
func refusedCertNote(err error, cfg *tls.Config) string {
	if err == nil || cfg == nil || !certAlert(err.Error()) {
		return ""
	}
	var cert *tls.Certificate
	switch {
	case cfg.GetClientCertificate != nil:
		cert, _ = cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
	case len(cfg.Certificates) > 0:
		cert = &cfg.Certificates[0]
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return " (this client presents no certificate: --cert, --key)"
	}
	leaf, perr := x509.ParseCertificate(cert.Certificate[0])
	if perr != nil {
		return ""
	}
	cn, now := leaf.Subject.CommonName, time.Now()
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Sprintf(" (this client's certificate --cert, CN %s, expired at %s: renew it, as docs/operations.md says)", cn, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Sprintf(" (this client's certificate --cert, CN %s, is valid only from %s: is this host's clock right?)", cn, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf(" (this client's certificate --cert, CN %s, valid until %s: is it signed by a CA etcd trusts, --trusted-ca-file?)", cn, leaf.NotAfter.UTC().Format(time.RFC3339))
}

// notEtcd asks the plaintext server at addr for etcd's GET /version over
// HTTP/1.1, as etcd's client port answers it, and says so when an HTTP
// server answers without being etcd (regiond's own API, --listen, is the
// usual mix-up); "" when etcd answers, or when nothing answers HTTP/1.1
// (a bare gRPC server, which the client's calls name themselves).
func notEtcd(ctx context.Context, network, addr, host string) string {
	status, body, ok := get(ctx, network, addr, host, "/version", Timeout)
	if !ok {
		return ""
	}
	if status == http.StatusOK && strings.Contains(body, `"etcdserver"`) {
		// A member's peer port answers /version too, and /members,
		// which its client port does not serve.
		if st, members, ok := get(ctx, network, addr, host, "/members", Timeout); ok && st == http.StatusOK && strings.HasPrefix(members, "[") {
			return "an etcd member's peer port answers there (its --listen-peer-urls, 2380 by default), not its client port: give the client URL (--listen-client-urls, 2379 by default)"
		}
		return ""
	}
	if status == http.StatusNotFound {
		// etcd's grpc-proxy has no /version; its /proxy/health asks the
		// members behind it (within a second of its own).
		if why, proxy := proxyHealth(ctx, network, addr, host); proxy {
			return why
		}
	}
	return fmt.Sprintf("an HTTP server that is not etcd answers there (GET /version: %d %s): check the port (regiond's own API, --listen, is not etcd)", status, http.StatusText(status))
}

// proxyHealth says whether etcd's grpc-proxy answers at addr, and if so
// what it says of the members behind it ("" when they answer it).
func proxyHealth(ctx context.Context, network, addr, host string) (string, bool) {
	_, body, ok := get(ctx, network, addr, host, "/proxy/health", 2*Timeout)
	var h struct {
		Health *string `json:"health"`
		Reason string  `json:"reason"`
	}
	if !ok || json.Unmarshal([]byte(body), &h) != nil || h.Health == nil {
		return "", false
	}
	if *h.Health == "true" {
		return "", true
	}
	why := "etcd's grpc-proxy answers there, but the etcd members behind it do not answer it"
	if h.Reason != "" {
		why += " (GET /proxy/health: " + h.Reason + ")"
	}
	why += ": check the proxy's --endpoints and those members"
	if strings.Contains(h.Reason, "deadline exceeded") {
		// Its check timed out: as likely an overloaded proxy or member
		// (the herd review: a fleet's agents listing at once, every
		// member answering).
		why += " (a check that timed out may also be an overloaded proxy or member: a fleet's agents listing at once?)"
	}
	return why, true
}

// get asks the plaintext HTTP/1.1 server at addr for path, within d; ok
// is false when no HTTP answer came.
func get(ctx context.Context, network, addr, host, path string, d time.Duration) (status int, body string, ok bool) {
	dl := net.Dialer{Timeout: Timeout}
	c, err := dl.DialContext(ctx, network, addr)
	if err != nil {
		return 0, "", false
	}
	defer c.Close()
	deadline := time.Now().Add(d)
	if cd, ok := ctx.Deadline(); ok && cd.Before(deadline) {
		deadline = cd
	}
	c.SetDeadline(deadline)
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host); err != nil {
		return 0, "", false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b), true
}

// cause is err's innermost message, without the layers that repeat the
// address.
func cause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Op + ": " + op.Err.Error()
	}
	return err.Error()
}

// Endpoints checks the values of --endpoints and returns them as URLs:
// each an http(s)://host:port URL (a bare host:port gets http://, or
// https:// when tlsOn), unix:// or unixs://, none empty, and none
// plaintext (http://) when tlsOn: the client would speak plaintext and
// ignore the TLS flags. The errors name the flag and the value.
func Endpoints(in []string, tlsOn bool) ([]string, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("--endpoints is empty: give at least one, e.g. https://etcd-1:2379")
	}
	out := make([]string, len(in))
	for i, e := range in {
		e = strings.TrimSpace(e) // "a, b": the space after a comma
		if e == "" {
			return nil, fmt.Errorf("--endpoints %q: an empty endpoint (a stray comma?)", strings.Join(in, ","))
		}
		if !strings.Contains(e, "://") {
			e = "http://" + e
			if tlsOn {
				e = "https://" + e[len("http://"):]
			}
		}
		u, err := url.Parse(e)
		if err != nil {
			return nil, fmt.Errorf("--endpoints %q: %w", in[i], err)
		}
		switch u.Scheme {
		case "http", "https":
			if u.Hostname() != "" && u.Port() == "" && (u.Path == "" || u.Path == "/") {
				return nil, noPort(in[i], u)
			}
			if u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
				return nil, fmt.Errorf("--endpoints %q: want scheme://host:port, e.g. https://etcd-1:2379", in[i])
			}
		case "unix", "unixs":
		default:
			return nil, fmt.Errorf("--endpoints %q: unknown scheme %q (http, https, unix or unixs)", in[i], u.Scheme)
		}
		if tlsOn && (u.Scheme == "http" || u.Scheme == "unix") {
			return nil, fmt.Errorf("--endpoints %q is plaintext, but --cacert, --cert or --key ask for TLS: write %ss://", in[i], u.Scheme)
		}
		out[i] = e
	}
	return out, nil
}

// noPort refuses the endpoint in (parsed as u) that gives no port,
// naming etcd's usual client port: "127.0.0.1" is read as host:port (no
// scheme needed) whose port is missing.
func noPort(in string, u *url.URL) error {
	with := net.JoinHostPort(u.Hostname(), "2379")
	if strings.Contains(in, "://") {
		return fmt.Errorf("--endpoints %q: want scheme://host:port: the port is missing (%s://%s for etcd's usual client port)", in, u.Scheme, with)
	}
	return fmt.Errorf("--endpoints %q: want host:port or scheme://host:port: the port is missing (%s for etcd's usual client port)", in, with)
}

// KeyFileExposed says, when the private key file at path may be read by
// its group or by others (mode bits 0o077), that anyone who reads it can
// act as the certificate's etcd user, and how to close it; "" otherwise,
// or when it cannot be read (the TLS set-up says so).
func KeyFileExposed(flag, path string) string {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return ""
	}
	return fmt.Sprintf("%s %s may be read by its group or others (mode %#o): whoever reads it can act as the certificate's etcd user; chown it to the user this runs as and chmod 0400 it",
		flag, path, fi.Mode().Perm())
}

// CAPool reads the --cacert file at path into a certificate pool, refusing
// a file that holds no PEM certificate: the client would trust nothing,
// and every handshake would fail as "unreachable".
func CAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read --cacert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--cacert %s: no PEM certificate found", path)
	}
	return pool, nil
}
