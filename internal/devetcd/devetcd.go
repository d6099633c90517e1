// Package devetcd starts an embedded etcd server on loopback: the one code
// path behind `regiond dev` and every integration test.
//
//	srv, err := devetcd.Start(ctx, devetcd.Config{Dir: dir})
//	if err != nil { … }
//	defer srv.Close()
//	cli, err := srv.Client()
package devetcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
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
}

// Server is a running embedded etcd.
type Server struct {
	// Endpoints are the client URLs to dial.
	Endpoints []string
	etcd      *embed.Etcd
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
	clientURL, err := urlOrFree(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("devetcd: client url: %w", err)
	}
	peerURL, err := urlOrFree(c.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("devetcd: peer url: %w", err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*clientURL}, []url.URL{*clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peerURL}, []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("devetcd: start etcd in %s on %s: %w", c.Dir, clientURL, err)
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
	return &Server{Endpoints: []string{clientURL.String()}, etcd: e}, nil
}

// Client returns a new client of the server; the caller closes it.
func (s *Server) Client() (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   s.Endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("devetcd: client for %v: %w", s.Endpoints, err)
	}
	return cli, nil
}

// Close stops the server and waits for it to exit.
func (s *Server) Close() { s.etcd.Close() }

// Err reports fatal server errors.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

func urlOrFree(raw string) (*url.URL, error) {
	if raw == "" {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		raw = fmt.Sprintf("http://127.0.0.1:%d", port)
	}
	return url.Parse(raw)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
