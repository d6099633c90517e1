package agent_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"

	"github.com/regiond/regiond/internal/tcpproxy"
)

// pingCounter counts the HTTP/2 PING frames (not ACKs) that clients of
// a tcpproxy.Proxy send through it.
type pingCounter struct {
	pings atomic.Int64
}

// newPingCounter starts a proxy in front of target (host:port) that
// counts PINGs; the test's cleanup stops it.
func newPingCounter(t *testing.T, target string) (*pingCounter, *tcpproxy.Proxy) {
	t.Helper()
	p := &pingCounter{}
	proxy, err := tcpproxy.NewCopying(target, p.frames)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return p, proxy
}

// frames copies a client's HTTP/2 stream (the connection preface, then
// frames) to dst, counting PING frames that are not ACKs.
func (p *pingCounter) frames(dst io.Writer, src io.Reader) {
	r := io.TeeReader(src, dst) // what is read is forwarded as it is read
	if _, err := io.CopyN(io.Discard, r, int64(len(http2.ClientPreface))); err != nil {
		return
	}
	for {
		fh, err := http2.ReadFrameHeader(r)
		if err != nil {
			return
		}
		if fh.Type == http2.FramePing && !fh.Flags.Has(http2.FlagPingAck) {
			p.pings.Add(1)
		}
		if _, err := io.CopyN(io.Discard, r, int64(fh.Length)); err != nil {
			return
		}
	}
}

// TestWatchSendsNoPingPerChange: the agent's connection to etcd does not
// send a PING for every watch response (gRPC's bandwidth estimation,
// which a fixed flow-control window turns off): thirty changes, each
// waited for in the snapshot file, cost no more than a few PINGs (the
// keepalive's), not one or more each.
func TestWatchSendsNoPingPerChange(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, cli := exampleEtcd(t)
	pc, proxy := newPingCounter(t, strings.TrimPrefix(srv.Endpoints[0], "http://"))
	h := startAgent(t, t.TempDir(), []string{proxy.URL()})
	waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })
	before := pc.pings.Load()
	const changes = 30
	for i := range changes {
		p, err := cli.Put(context.Background(), prefix+"routes/DE", fmt.Sprintf(`{"targets":[{"pool":"eu-west","weight":%d}]}`, 10+i))
		if err != nil {
			t.Fatal(err)
		}
		rev := p.Header.Revision
		waitFor(t, fmt.Sprintf("change %d in the snapshot file", i), func() bool {
			tb := h.snapshot()
			return tb != nil && tb.Revision() >= rev
		})
	}
	pings := pc.pings.Load() - before
	t.Logf("%d PINGs for %d changes", pings, changes)
	if pings > 3 {
		t.Fatalf("the agent sent %d PINGs to etcd over %d changes; want none per change (a fixed gRPC window)", pings, changes)
	}
}
