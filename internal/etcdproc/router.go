package etcdproc

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"time"
)

// router is the HTTP forward proxy every member's peer requests go to (its
// HTTP_PROXY, through the member's outbound tcpproxy). It routes a request
// by the member host name of its absolute URL to that member's inbound
// tcpproxy. It holds no state about partitions: cutting is done by the
// tcpproxies on either side of it.
type router struct {
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
}

// startRouter serves on a free loopback port; hosts maps a member's peer
// host name to the address of its inbound proxy.
func startRouter(hosts map[string]string, logTo io.Writer) (*router, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("peer router: listen: %w", err)
	}
	logger := log.New(logTo, "peer router: ", log.LstdFlags|log.Lmicroseconds)
	tr := &http.Transport{
		Proxy:               nil, // never the test process's own HTTP_PROXY
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     30 * time.Second,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = hosts[hostOf(pr.In)]
			pr.Out.Host = pr.In.Host
		},
		Transport:     tr,
		FlushInterval: -1, // raft streams are long-lived responses: pass every write on at once
		ErrorLog:      logger,
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := hosts[hostOf(r)]; !ok {
			http.Error(w, fmt.Sprintf("etcdproc peer router: unknown member host %q", r.Host), http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	})
	r := &router{ln: ln, transport: tr, srv: &http.Server{Handler: h, ErrorLog: logger, ReadHeaderTimeout: 10 * time.Second}}
	go r.srv.Serve(ln)
	return r, nil
}

// hostOf returns the host name a peer request is for: proxied requests
// carry an absolute URL.
func hostOf(r *http.Request) string {
	if h := r.URL.Hostname(); h != "" {
		return h
	}
	h, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		return r.Host
	}
	return h
}

func (r *router) addr() string { return r.ln.Addr().String() }

func (r *router) close() {
	r.srv.Close()
	r.transport.CloseIdleConnections()
}
