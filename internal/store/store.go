package store

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/keyspace"
)

// Defaults of Options.
const (
	DefaultPageSize       = 5000
	DefaultAuditKeep      = 10000
	DefaultRequestTimeout = 5 * time.Second
)

// Options tune a Store. The zero value uses the defaults.
type Options struct {
	// PageSize is the number of keys read per Get when loading a prefix
	// (default 5000, as the agents' list: etcd counts the rest of the
	// range at every page, so small pages make a large prefix's read
	// quadratic: BenchmarkLoadPages).
	PageSize int64
	// AuditKeep is the number of newest audit records kept; older ones are
	// deleted by the Txn that writes a new one.
	AuditKeep int64
	// RequestTimeout bounds each etcd request.
	RequestTimeout time.Duration
	// Endpoints are named in *UnreachableError messages.
	Endpoints []string
	// Now returns the current time (audit timestamps, a boost's
	// expires_at, a heartbeat's since); nil means time.Now.
	Now func() time.Time
	// Logger receives warnings and retries; nil discards them.
	Logger *slog.Logger
	// User is the etcd user named in a *PermissionError (the --user, or
	// the common name of the client certificate).
	User string
	// UserFromCert says User is the client certificate's common name (no
	// --user): behind an etcd grpc-proxy, which passes no client
	// certificate on, etcd saw no user at all, as a refusal says.
	UserFromCert bool
	// RolePrefix starts the role names that a *PermissionError suggests
	// (empty: DefaultRolePrefix).
	RolePrefix string
	// TLS is the client's TLS configuration (DialConfig.TLSConfig), nil
	// without TLS: a running heartbeat that cannot reach etcd dials each
	// endpoint with it to say why (an expired certificate, a refused
	// connection), as Dial does at start.
	TLS *tls.Config
}

// Store reads and writes the routing state of one keyspace.
type Store struct {
	cli   *clientv3.Client
	ks    keyspace.Space
	opts  Options
	log   *slog.Logger
	roles Roles
}

// New returns a store on an open client; the caller owns and closes cli.
func New(cli *clientv3.Client, ks keyspace.Space, opts Options) *Store {
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.AuditKeep <= 0 {
		opts.AuditKeep = DefaultAuditKeep
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if len(opts.Endpoints) == 0 {
		opts.Endpoints = cli.Endpoints()
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Store{cli: cli, ks: ks, opts: opts, log: lg, roles: NewRoles(ks, opts.RolePrefix)}
}

// Client returns the etcd client of the store.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Keyspace returns the key layout of the store.
func (s *Store) Keyspace() keyspace.Space { return s.ks }

// reqCtx bounds one etcd request.
func (s *Store) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.RequestTimeout)
}
