package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/etcddiag"
	"github.com/regiond/regiond/internal/relogin"
)

// DefaultDialTimeout bounds the first contact with etcd.
const DefaultDialTimeout = 2 * time.Second

// ErrDialConfig marks connection settings that cannot work (a TLS file
// that does not load): an operator error, not an unreachable cluster.
var ErrDialConfig = errors.New("bad connection settings")

// DialConfig says how to reach etcd.
type DialConfig struct {
	// Endpoints are etcd's client URLs (--endpoints); a bare host:port
	// gets http://, or https:// with TLS.
	Endpoints []string
	// DialTimeout bounds the first contact and the probe; 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// CACert, Cert and Key are PEM files; CACert alone enables TLS with a
	// private CA, Cert and Key add a client certificate.
	CACert, Cert, Key string
	// Username and Password log in to etcd; with Username empty the client
	// certificate's common name is the user (or there is none).
	Username, Password string
	// ProbeKey is read (linearizably) once with DialTimeout so that an
	// unreachable cluster, or one without a leader, is reported at once.
	// Empty skips the probe.
	ProbeKey string
	// ProbeNeeds are the permissions named when etcd refuses the probe
	// (a *PermissionError): what the caller's job needs, which includes
	// reading ProbeKey. Empty: Roles.ReadNeed(ProbeKey).
	ProbeNeeds []Grant
	// Roles name the roles that hold ProbeNeeds in a *PermissionError.
	Roles Roles
	// DialOptions are added to the client's gRPC dial options (tests
	// inject network faults through an interceptor).
	DialOptions []grpc.DialOption
}

// Dial opens a client and probes the cluster. An etcd that does not answer
// within DialTimeout gives an *UnreachableError naming the endpoints.
func Dial(ctx context.Context, c DialConfig) (*clientv3.Client, error) {
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDialConfig, err)
	}
	eps, err := etcddiag.Endpoints(c.Endpoints, tlsCfg != nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDialConfig, err)
	}
	unreachable := func(err error) error {
		why, connected := etcddiag.Check(ctx, eps, tlsCfg)
		return &UnreachableError{Endpoints: c.Endpoints, Err: err, Why: why, Connected: connected}
	}
	cfg := clientv3.Config{
		Endpoints:   eps,
		DialTimeout: c.DialTimeout,
		TLS:         tlsCfg,
		Username:    c.Username,
		Password:    c.Password,
		Logger:      zap.NewNop(),
		// A heartbeat lives for months: after an etcd outage of minutes,
		// gRPC's own redial delay (up to 120 s) would keep it away from an
		// etcd that answers, its pool's health keys expiring meanwhile.
		DialOptions: append([]grpc.DialOption{grpc.WithConnectParams(backoff.GRPCReconnect)}, c.DialOptions...),
	}
	if c.Username != "" {
		// A heartbeat outlives a restore of etcd from a backup, whose
		// etcd holds its requests carrying a token of before it: log in
		// again after a timeout instead of timing out for good.
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(relogin.Interceptor(relogin.Every)))
	}
	cli, err := newClient(ctx, cfg)
	if err != nil {
		if errors.Is(err, rpctypes.ErrAuthFailed) || NoPasswordUser(err) {
			return nil, &AuthError{User: c.Username, Endpoints: c.Endpoints, Err: err, NoPassword: NoPasswordUser(err)}
		}
		if isUnreachable(err) {
			return nil, unreachable(err)
		}
		return nil, fmt.Errorf("connect to etcd at %v: %w", c.Endpoints, err)
	}
	if c.ProbeKey == "" {
		return cli, nil
	}
	pctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, c.ProbeKey, clientv3.WithCountOnly()); err != nil {
		defer cli.Close()
		if isUnreachable(err) {
			return nil, unreachable(fmt.Errorf("no answer within %s: %w", c.DialTimeout, err))
		}
		if status.Code(err) == codes.Unimplemented {
			return nil, unreachable(fmt.Errorf("the server there does not speak etcd's API (is --endpoints an etcd client URL?): %w", err))
		}
		needs := c.ProbeNeeds
		if len(needs) == 0 {
			needs = []Grant{c.Roles.ReadNeed(c.ProbeKey)}
		}
		o := Options{User: c.user(), UserFromCert: c.Username == "" && c.user() != "", Endpoints: c.Endpoints}
		return nil, permissionError(o, c.Roles, "read "+c.ProbeKey, false, err, needs,
			func(string, error) error { return fmt.Errorf("first request to etcd at %v: %w", c.Endpoints, err) },
			func() bool {
				vctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
				defer cancel()
				_, ok := viaProxy(vctx, cli)
				return ok
			})
	}
	return cli, nil
}

// newClient is clientv3.New, given up when ctx ends first. With a user,
// New logs in before it returns, waiting up to the dial timeout for an
// etcd that does not answer: a Ctrl-C (ctx) must not wait for it. A
// client made after ctx ended is closed.
func newClient(ctx context.Context, cfg clientv3.Config) (*clientv3.Client, error) {
	type made struct {
		cli *clientv3.Client
		err error
	}
	ch := make(chan made, 1)
	go func() {
		cli, err := clientv3.New(cfg)
		ch <- made{cli, err}
	}()
	select {
	case m := <-ch:
		return m.cli, m.err
	case <-ctx.Done():
		go func() {
			if m := <-ch; m.cli != nil {
				m.cli.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// AuthError means etcd refused to log the user in: a wrong user or
// password. (A user that lacks a permission gets a *PermissionError.)
type AuthError struct {
	// User is the etcd user refused (DialConfig.Username).
	User string
	// Endpoints are the endpoints dialled, as given.
	Endpoints []string
	// Err is the client's error.
	Err error
	// NoPassword: the user has no password in etcd (made to log in by
	// its client certificate), and one was given.
	NoPassword bool
}

// Error names the user, the endpoints and what to check.
func (e *AuthError) Error() string {
	if e.NoPassword {
		return fmt.Sprintf("authentication failed for user %s at %s: the user has no password in etcd, it logs in by its client certificate (whose common name is the user): leave out --user (and REGIONCTL_PASSWORD) and give --cert and --key; "+
			"behind etcd's grpc-proxy, which passes no client certificate on, it needs a password: delete the user (etcdctl user delete) and make it again with one (regionctl auth apply --passwords) (%v)",
			e.User, strings.Join(e.Endpoints, ","), e.Err)
	}
	return fmt.Sprintf("authentication failed for user %s at %s: %v (check --user and its password)",
		e.User, strings.Join(e.Endpoints, ","), e.Err)
}

// NoPasswordUser reports whether err is etcd refusing a password for a
// user made without one (etcdctl user add --no-password, regionctl auth
// apply's users): such a user logs in by its client certificate. etcd
// sends it with code Unknown, so only its text tells.
func NoPasswordUser(err error) bool {
	return err != nil && strings.Contains(err.Error(), "password was given for no password user")
}

// user is the etcd user of the connection: Username, else the common
// name of the client certificate.
func (c DialConfig) user() string {
	if c.Username != "" {
		return c.Username
	}
	return CertUser(c.Cert, c.Key)
}

// Unwrap returns the underlying error.
func (e *AuthError) Unwrap() error { return e.Err }

// tlsConfig returns nil when no TLS file is set.
// TLSConfig returns the TLS configuration Dial uses (nil without TLS
// flags), the client certificate read again at each handshake.
func (c DialConfig) TLSConfig() (*tls.Config, error) { return c.tlsConfig() }

func (c DialConfig) tlsConfig() (*tls.Config, error) {
	if c.CACert == "" && c.Cert == "" && c.Key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CACert != "" {
		pool, err := etcddiag.CAPool(c.CACert)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (c.Cert == "") != (c.Key == "") {
		return nil, fmt.Errorf("--cert and --key go together (got cert %q, key %q)", c.Cert, c.Key)
	}
	if c.Cert != "" {
		pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("load client certificate %s: %w", c.Cert, err)
		}
		cfg.GetClientCertificate = renewedCertificate(c.Cert, c.Key, &pair)
	}
	return cfg, nil
}

// renewedCertificate returns a tls.Config.GetClientCertificate that reads
// the client certificate from its files at each new connection, as etcd's
// own clients do: a long-running client (regionctl heartbeat) presents a
// certificate renewed in place once it connects again, instead of the one
// it started with, which may have expired since. While the files do not
// load (a renewal between writing the certificate and its key), the last
// pair that did is presented.
func renewedCertificate(certFile, keyFile string, first *tls.Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	var last atomic.Pointer[tls.Certificate]
	last.Store(first)
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if pair, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil {
			last.Store(&pair)
		}
		return last.Load(), nil
	}
}
