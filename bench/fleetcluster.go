package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/freeport"
)

// etcdCluster is a multi-member etcd cluster of real processes on
// loopback, plus etcd's grpc-proxy in front of member 0.
type etcdCluster struct {
	members []*etcdProc
	names   []string
	// proxy is `etcd grpc-proxy start`; proxyAddr is its gRPC address
	// (host:port) and proxyMetrics its /metrics URL.
	proxy        *proc
	proxyAddr    string
	proxyMetrics string // its own counters: /proxy/metrics
}

// startCluster starts an n-member cluster under dir, waits until every
// member is healthy, then starts the grpc-proxy with member 0 as its only
// upstream. Ports found free a moment before can be taken by someone else:
// the whole cluster is then started again, up to three times.
func startCluster(ctx context.Context, bin, dir string, n int) (*etcdCluster, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := startClusterOnce(ctx, bin, filepath.Join(dir, fmt.Sprintf("try-%d", attempt)), n)
		if err == nil {
			return c, nil
		}
		lastErr = err
		c.stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, lastErr
}

func startClusterOnce(ctx context.Context, bin, dir string, n int) (*etcdCluster, error) {
	c := &etcdCluster{}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return c, err
	}
	var initial []string
	var clientURLs, peerURLs []string
	for i := 0; i < n; i++ {
		cport, err := freeport.Get()
		if err != nil {
			return c, err
		}
		pport, err := freeport.Get()
		if err != nil {
			return c, err
		}
		name := fmt.Sprintf("m%d", i)
		c.names = append(c.names, name)
		clientURLs = append(clientURLs, fmt.Sprintf("http://127.0.0.1:%d", cport))
		peerURLs = append(peerURLs, fmt.Sprintf("http://127.0.0.1:%d", pport))
		initial = append(initial, name+"="+peerURLs[i])
	}
	for i, name := range c.names {
		p, err := startProc("etcd "+name, filepath.Join(dir, name+".log"), nil, bin,
			"--name="+name, "--data-dir="+filepath.Join(dir, name),
			"--listen-client-urls="+clientURLs[i], "--advertise-client-urls="+clientURLs[i],
			"--listen-peer-urls="+peerURLs[i], "--initial-advertise-peer-urls="+peerURLs[i],
			"--initial-cluster="+strings.Join(initial, ","), "--initial-cluster-state=new",
			"--initial-cluster-token=regiond-bench-fleet", "--log-level=warn")
		if err != nil {
			return c, err
		}
		c.members = append(c.members, &etcdProc{proc: p, clientURL: clientURLs[i]})
	}
	for _, m := range c.members {
		if err := m.waitHealthy(ctx, 60*time.Second); err != nil {
			return c, fmt.Errorf("etcd cluster member %s: %w", m.name, err)
		}
	}
	if err := c.startProxy(ctx, bin, dir); err != nil {
		return c, err
	}
	return c, nil
}

// startProxy starts `etcd grpc-proxy start` in front of member 0 and waits
// until a Get through it succeeds.
func (c *etcdCluster) startProxy(ctx context.Context, bin, dir string) error {
	gport, err := freeport.Get()
	if err != nil {
		return err
	}
	mport, err := freeport.Get()
	if err != nil {
		return err
	}
	c.proxyAddr = fmt.Sprintf("127.0.0.1:%d", gport)
	// The proxy's /metrics forwards to a member's; its own are /proxy/metrics.
	c.proxyMetrics = fmt.Sprintf("http://127.0.0.1:%d/proxy/metrics", mport)
	up := strings.TrimPrefix(c.members[0].clientURL, "http://")
	c.proxy, err = startProc("grpc-proxy", filepath.Join(dir, "grpc-proxy.log"), nil, bin,
		"grpc-proxy", "start", "--endpoints="+up, "--listen-addr="+c.proxyAddr,
		"--advertise-client-url="+c.proxyAddr, "--metrics-addr="+fmt.Sprintf("http://127.0.0.1:%d", mport),
		"--data-dir="+filepath.Join(dir, "grpc-proxy"))
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.proxyAddr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("client of the grpc-proxy at %s: %w", c.proxyAddr, err)
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c.proxy.exited() {
			return fmt.Errorf("grpc-proxy exited at start: %v\n%s", c.proxy.err, c.proxy.logTail())
		}
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		_, gerr := cli.Get(gctx, "/regiond-bench-probe")
		cancel()
		_, merr := scrape(ctx, c.proxyMetrics)
		if gerr == nil && merr == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("grpc-proxy at %s not serving after 30s: get: %v; metrics: %v\n%s",
				c.proxyAddr, gerr, merr, c.proxy.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// memberURLs returns the client URLs of members idx (all when empty).
func (c *etcdCluster) memberURLs(idx ...int) []string {
	if len(idx) == 0 {
		for i := range c.members {
			idx = append(idx, i)
		}
	}
	var out []string
	for _, i := range idx {
		out = append(out, c.members[i].clientURL)
	}
	return out
}

// pids returns the process ids of the members and the proxy.
func (c *etcdCluster) pids() []int {
	var out []int
	for _, m := range c.members {
		out = append(out, m.pid())
	}
	if c.proxy != nil {
		out = append(out, c.proxy.pid())
	}
	return out
}

// alive returns an error naming the first member or proxy that exited.
func (c *etcdCluster) alive() error {
	for _, m := range c.members {
		if m.exited() {
			return fmt.Errorf("etcd member %s exited: %v\n%s", m.name, m.err, m.logTail())
		}
	}
	if c.proxy != nil && c.proxy.exited() {
		return fmt.Errorf("grpc-proxy exited: %v\n%s", c.proxy.err, c.proxy.logTail())
	}
	return nil
}

// stop stops the proxy, then the members (in parallel). Safe on a
// partly started cluster and twice.
func (c *etcdCluster) stop() {
	if c == nil {
		return
	}
	c.proxy.stop(5 * time.Second)
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.stop(10 * time.Second)
		}()
	}
	wg.Wait()
}

// scrape fetches a Prometheus text endpoint.
func scrape(ctx context.Context, url string) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return b, nil
}
