package agent_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/agent"
)

// floodQuery is a blocking query for a revision that never comes, with the
// longest wait: what a misconfigured client sends on every request.
const floodQuery = "/v1/resolve?country=DE&key=k&min_revision=999999999&wait=5m"

// flood opens n connections to addr, sends floodQuery on each and keeps
// the connection open; it returns the status and headers of each answer
// (a waiting query answers only when the flood ends).
type flood struct {
	mu      sync.Mutex
	answers []*http.Response
	bodies  []string
	conns   []net.Conn
	wg      sync.WaitGroup
}

func startFlood(t *testing.T, network, addr string, n int) *flood {
	t.Helper()
	f := &flood{}
	for i := 0; i < n; i++ {
		c, err := net.Dial(network, addr) // completes in the backlog, accepted or not
		if err != nil {
			t.Fatalf("flood connection %d: %v", i, err)
		}
		f.conns = append(f.conns, c)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", floodQuery)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return // closed: by the agent at the limit (idle) or by stop
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			f.mu.Lock()
			f.answers, f.bodies = append(f.answers, resp), append(f.bodies, string(b))
			f.mu.Unlock()
		}()
	}
	t.Cleanup(f.stop)
	return f
}

// refusals returns the 429 answers so far, and the first one's body.
func (f *flood) refusals() (int, *http.Response, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, first, body := 0, (*http.Response)(nil), ""
	for i, r := range f.answers {
		if r.StatusCode == http.StatusTooManyRequests {
			if n == 0 {
				first, body = r, f.bodies[i]
			}
			n++
		}
	}
	return n, first, body
}

func (f *flood) stop() {
	for _, c := range f.conns {
		c.Close()
	}
	f.wg.Wait()
}

// TestBlockingQueryFloodIsBounded: a client floods the agent with blocking
// queries that never end, on 80 connections, beyond both caps (8 waiting
// queries, 16 connections per listener). The agent keeps at most 4 of
// them waiting (TCP's half of the cap: the socket's front doors keep the
// other half, which a flood of 6 on the socket then fills) and 16
// connections open; every other query is refused with 429,
// Retry-After and a body naming the cap and its flag, and counted; plain
// resolves on new connections still answer; the snapshot file still
// follows changes.
func TestBlockingQueryFloodIsBounded(t *testing.T) {
	srv, cli := exampleEtcd(t)
	dir := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.Endpoints, cfg.Node, cfg.Logger = srv.Endpoints, "node-1", quietLogger()
	cfg.Socket, cfg.Listen, cfg.Snapshot = filepath.Join(dir, "run", "regiond.sock"), "127.0.0.1:0", filepath.Join(dir, "shm", "table.json")
	cfg.StatusTTL = 2 * time.Second
	cfg.MaxBlockingQueries, cfg.MaxConnections = 8, 16
	h := runAgent(t, dir, cfg)
	waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })

	// Over TCP (open to every local user) at most half the cap waits: 4.
	const n = 80
	f := startFlood(t, "tcp", h.a.Addr(), n)
	waitFor(t, "all but TCP's half of the waiting queries refused", func() bool { c, _, _ := f.refusals(); return c == n-4 })
	_, r, body := f.refusals()
	if r.Header.Get("Retry-After") == "" || !strings.Contains(body, "--max-blocking-queries") || !strings.Contains(body, " 8 ") || !strings.Contains(body, "over TCP") {
		t.Fatalf("429 answer: Retry-After %q, body %q; want a Retry-After and a body naming TCP's half of the cap (8) and --max-blocking-queries",
			r.Header.Get("Retry-After"), body)
	}
	// The socket's front doors keep the other half.
	sf := startFlood(t, "unix", cfg.Socket, 6)
	waitFor(t, "the socket's queries beyond the cap refused", func() bool { c, _, _ := sf.refusals(); return c == 2 })
	if _, _, body := sf.refusals(); strings.Contains(body, "over TCP") || !strings.Contains(body, "the cap of 8") {
		t.Fatalf("429 answer on the socket: %q; want the whole cap (8) named", body)
	}
	if got := counter(t, h, "regiond_api_blocking_queries_refused_total"); got != n-4+2 {
		t.Fatalf("regiond_api_blocking_queries_refused_total = %v, want %d", got, n-4+2)
	}
	if got := gauge(t, h, "regiond_api_blocking_queries_waiting"); got != 8 {
		t.Fatalf("regiond_api_blocking_queries_waiting = %v, want 8 (the cap)", got)
	}
	if open := labelled(t, h, "regiond_api_connections_open", "tcp"); open > 16 {
		t.Fatalf("%v TCP connections open, over the cap of 16", open)
	}
	if waits := labelled(t, h, "regiond_api_connection_limit_waits_total", "tcp"); waits == 0 {
		t.Fatal("the TCP listener never reached its connection limit, yet 80 connections came")
	}

	// The flood goes on (8 waiting, the refused connections kept open).
	for i := 0; i < 20; i++ {
		if c, d := h.resolve("DE", "k"); c != 200 || d.Pool == "" {
			t.Fatalf("plain resolve %d during the flood: %d %+v", i, c, d)
		}
	}
	resp, err := h.unixHTTP.Get("http://regiond/v1/resolve?country=DE&key=k")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("plain resolve on the unix socket during the flood: %v %v", resp, err)
	}
	resp.Body.Close()
	p, err := cli.Put(context.Background(), prefix+"routes/DE", `{"targets":[{"pool":"eu-north","weight":100}]}`)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the snapshot file at the change during the flood", func() bool {
		s := h.snapshot()
		return s != nil && s.Revision() >= p.Header.Revision
	})
	if c, d := h.resolve("DE", "k"); c != 200 || d.Pool != "eu-north" {
		t.Fatalf("plain resolve after the change: %d %+v", c, d)
	}
}

// labelled returns the value of the series of an agent's gauge or counter
// whose listener label is listener.
func labelled(t *testing.T, h *harness, name, listener string) float64 {
	t.Helper()
	mfs, err := h.a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "listener" && l.GetValue() == listener {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue() // one of them is nil: 0
				}
			}
		}
	}
	t.Fatalf("metric %s{listener=%q} not found", name, listener)
	return 0
}
