package agent_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTCPRequestLimits: on the loopback TCP listener, open to every local
// user, a request whose line and headers pass 64 KiB is a 431, and a
// connection that trickles its headers is closed within seconds (it held
// one of the listener's connections for 5 s, and another user could hold
// them all);
// a request sent at once is answered.
func TestTCPRequestLimits(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	h, _ := startExampleAgent(t)
	addr := h.a.Addr()
	req := func(extra string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(c, "GET /v1/resolve?country=DE&key=k HTTP/1.1\r\nHost: localhost\r\n"+extra+"Connection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		resp.Body.Close()
		return resp.Status
	}
	if got := req(""); !strings.HasPrefix(got, "200") {
		t.Fatalf("a plain request: %s", got)
	}
	if got := req("X-Pad: " + strings.Repeat("a", 80<<10) + "\r\n"); !strings.HasPrefix(got, "431") {
		t.Fatalf("80 KiB of headers: %s, want 431", got)
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /v1/resolve?country=DE HTTP/1.1\r\nHost: local") // and no more
	// Closed after a second (the socket's 5 s would outlast this
	// deadline), with room for a loaded machine.
	c.SetReadDeadline(time.Now().Add(4 * time.Second))
	start := time.Now()
	n, err := c.Read(make([]byte, 512))
	if err == nil && n > 0 {
		// Go's server may answer 408 before closing: the connection is
		// closed all the same.
		_, err = c.Read(make([]byte, 512))
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a connection trickling its headers still open after %s", time.Since(start).Round(time.Millisecond))
	}
	t.Logf("closed after %s (%v)", time.Since(start).Round(time.Millisecond), err)
}
