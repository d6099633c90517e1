// Package devetcd starts an embedded etcd server on loopback: the one code
// path behind `regiond dev` and every integration test.
//
//	srv, err := devetcd.Start(ctx, devetcd.Config{Dir: dir})
//	if err != nil { … }
//	defer srv.Close()
//	cli, err := srv.Client()
//
// Config.ClientTLS serves clients over TLS (optionally requiring client
// certificates) and EnableAuth turns on etcd's user/password
// authentication, so TLS and auth can be tested against a real etcd;
// NewTestCerts writes throwaway certificates for that.
package devetcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/freeport"
)

// Config says where and how to run the embedded server.
type Config struct {
	// Dir is the data directory (created if missing).
	Dir string
	// ClientURL is the client URL to listen on; empty means a free
	// loopback port.
	ClientURL string
	// PeerURL is the peer URL to listen on; empty means a free loopback port.
	PeerURL string
	// ReadyTimeout bounds the wait for the server to serve; zero means 30s.
	ReadyTimeout time.Duration
	// Logger receives etcd's own logs; nil discards them.
	Logger *zap.Logger
	// MaxTxnOps is the most operations one Txn may hold; zero means 8192
	// (etcd's own default of 128 is too small for a whole-config apply).
	MaxTxnOps uint
	// ClientTLS, when set, serves clients over TLS (https); nil serves
	// plain http as before.
	ClientTLS *TLS
	// BcryptCost is the cost of hashing user passwords; zero means etcd's
	// default (10). Tests with authentication use bcrypt.MinCost (4), so
	// that logins do not dominate their run time (least of all under the
	// race detector).
	BcryptCost uint
}

// TLS is how the embedded server serves its client URL over TLS.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and key (PEM).
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the server require client
	// certificates signed by this CA (PEM); empty accepts any client.
	ClientCAFile string
	// Dial is the client TLS config that Server.Client and
	// Server.ClientAs use: it must trust the server's certificate and,
	// with ClientCAFile set, present a client certificate.
	Dial *tls.Config
}

// Server is a running embedded etcd.
type Server struct {
	// Endpoints are the client URLs to dial.
	Endpoints []string
	etcd      *embed.Etcd
	dialTLS   *tls.Config
}

// Start starts an embedded etcd and waits until it serves clients.
func Start(ctx context.Context, c Config) (*Server, error) {
	if c.Dir == "" {
		return nil, errors.New("devetcd: Config.Dir is empty")
	}
	cfg := embed.NewConfig()
	cfg.Name = "regiond-dev"
	cfg.Dir = c.Dir
	cfg.LogLevel = "error"
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	cfg.MaxTxnOps = c.MaxTxnOps
	if cfg.MaxTxnOps == 0 {
		cfg.MaxTxnOps = 8192
	}
	if c.BcryptCost != 0 {
		cfg.BcryptCost = c.BcryptCost
	}
	clientScheme := "http"
	if t := c.ClientTLS; t != nil {
		if t.CertFile == "" || t.KeyFile == "" {
			return nil, errors.New("devetcd: ClientTLS needs CertFile and KeyFile")
		}
		clientScheme = "https"
		cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = t.CertFile, t.KeyFile
		if t.ClientCAFile != "" {
			cfg.ClientTLSInfo.TrustedCAFile, cfg.ClientTLSInfo.ClientCertAuth = t.ClientCAFile, true
		}
	}
	// A port picked free can be taken by another process before etcd binds
	// it (tests run in parallel packages); then pick again, a few times.
	var (
		e                  *embed.Etcd
		clientURL, peerURL *url.URL
		err                error
	)
	for attempt := 0; ; attempt++ {
		clientURL, err = urlOrFree(c.ClientURL, clientScheme)
		if err != nil {
			return nil, fmt.Errorf("devetcd: client url: %w", err)
		}
		if c.ClientTLS != nil && clientURL.Scheme != clientScheme {
			// etcd would silently serve plain http on an http URL with TLS files.
			return nil, fmt.Errorf("devetcd: client url %s: want scheme %s", clientURL, clientScheme)
		}
		peerURL, err = urlOrFree(c.PeerURL, "http")
		if err != nil {
			return nil, fmt.Errorf("devetcd: peer url: %w", err)
		}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*clientURL}, []url.URL{*clientURL}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peerURL}, []url.URL{*peerURL}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		e, err = embed.StartEtcd(cfg)
		if err == nil {
			break
		}
		picked := c.ClientURL == "" || c.PeerURL == ""
		if !picked || !errors.Is(err, syscall.EADDRINUSE) || attempt == 4 {
			return nil, fmt.Errorf("devetcd: start etcd in %s on %s: %w", c.Dir, clientURL, err)
		}
	}
	timeout := c.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("devetcd: etcd failed while starting: %w", err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("devetcd: etcd not ready after %s", timeout)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("devetcd: %w", ctx.Err())
	}
	srv := &Server{Endpoints: []string{clientURL.String()}, etcd: e}
	if c.ClientTLS != nil {
		srv.dialTLS = c.ClientTLS.Dial
	}
	return srv, nil
}

// Client returns a new client of the server; the caller closes it. On a
// TLS server it uses ClientTLS.Dial.
func (s *Server) Client() (*clientv3.Client, error) { return s.ClientAs("", "") }

// ClientAs is Client authenticated as user with password (an empty user
// means no authentication).
func (s *Server) ClientAs(user, password string) (*clientv3.Client, error) {
	return s.client(s.dialTLS, user, password)
}

// ClientTLS is Client dialing with tc instead of ClientTLS.Dial, without a
// user: with authentication on, etcd takes the common name of tc's client
// certificate as the user.
func (s *Server) ClientTLS(tc *tls.Config) (*clientv3.Client, error) { return s.client(tc, "", "") }

func (s *Server) client(tc *tls.Config, user, password string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: s.Endpoints,
		// Generous: with a user, New logs in (a bcrypt check), which a
		// loaded 2-core machine under -race can take seconds to answer.
		DialTimeout: 15 * time.Second,
		TLS:         tc,
		Username:    user,
		Password:    password,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("devetcd: client for %v: %w", s.Endpoints, err)
	}
	return cli, nil
}

// Close stops the server and waits for it to exit.
func (s *Server) Close() { s.etcd.Close() }

func urlOrFree(raw, scheme string) (*url.URL, error) {
	if raw == "" {
		port, err := freeport.Get()
		if err != nil {
			return nil, err
		}
		raw = fmt.Sprintf("%s://127.0.0.1:%d", scheme, port)
	}
	return url.Parse(raw)
}
