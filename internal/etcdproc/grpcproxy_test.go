package etcdproc_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/poll"
)

// putVia writes key through cli, bounded.
func putVia(t *testing.T, cli *clientv3.Client, key, val string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Put(ctx, key, val)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

// reachable reports whether a read through cli succeeds within a second.
func reachable(cli *clientv3.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := cli.Get(ctx, "k")
	return err == nil
}

// TestProxyForwardsAndRestarts: the proxy serves reads, writes and watches
// of the cluster on its own address; it drops progress requests (what
// regiond's watch must live with); after Stop and after Kill, Start serves
// again on the same address and the same client reaches it.
func TestProxyForwardsAndRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and its grpc-proxy")
	}
	c := etcdproc.Start(t, etcdproc.Config{Members: 1})
	p := c.StartProxy(t, etcdproc.ProxyConfig{})
	direct, cli := c.Client(t), p.Client(t)
	if !strings.HasPrefix(p.Addr, "127.0.0.1:") || p.Addr == strings.TrimPrefix(c.Members[0].ClientURL, "http://") {
		t.Fatalf("proxy address %s: want its own 127.0.0.1 port", p.Addr)
	}

	rev := putVia(t, cli, "k", "v1")
	if got := get(t, direct, "k"); got != "v1" {
		t.Fatalf("written through the proxy, read directly: %q", got)
	}
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := cli.Watch(wctx, "k", clientv3.WithRev(rev+1), clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created || resp.Err() != nil {
		t.Fatalf("watch through the proxy: first response %+v, %v; want created", resp, resp.Err())
	}
	putVia(t, direct, "k", "v2")
	if resp := <-wch; len(resp.Events) != 1 || string(resp.Events[0].Kv.Value) != "v2" {
		t.Fatalf("watch through the proxy: %+v, want the direct put of v2", resp)
	}
	// The premise of regiond's watch liveness: the proxy logs a progress
	// request as unsupported and drops it.
	if err := cli.RequestProgress(clientv3.WithRequireLeader(wctx)); err != nil {
		t.Fatal(err)
	}
	poll.Must(t, 15*time.Second, "the proxy to log the dropped progress request", func() bool {
		b, err := os.ReadFile(p.LogPath)
		return err == nil && strings.Contains(string(b), "not supported request type by gRPC proxy")
	})

	for _, fault := range []struct {
		name string
		end  func()
	}{{"stop", p.Stop}, {"kill", p.Kill}} {
		addr := p.Addr
		fault.end()
		if reachable(cli) {
			t.Fatalf("after %s the proxy still answers", fault.name)
		}
		p.Start()
		if p.Addr != addr {
			t.Fatalf("started again on %s, want %s", p.Addr, addr)
		}
		poll.Must(t, 15*time.Second, "the client to reach the proxy started again after "+fault.name, func() bool { return reachable(cli) })
		if got := get(t, cli, "k"); got != "v2" {
			t.Fatalf("after %s and start: k = %q through the proxy", fault.name, got)
		}
	}
}
