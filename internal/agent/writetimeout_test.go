package agent_test

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/stallclient"
)

// TestClientThatStopsReadingIsCut: the agent's own servers, on its unix
// socket and on loopback TCP, close the connection of a client that
// pipelines requests and reads none of the answers once an answer has
// waited Config.WriteTimeout to be written (the soak review: such a
// client held a connection and a goroutine for the agent's life); the
// agent goes on answering others.
func TestClientThatStopsReadingIsCut(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	h, _ := startExampleAgent(t, func(c *agent.Config) { c.WriteTimeout = 300 * time.Millisecond })
	for _, l := range []struct{ network, addr string }{{"unix", filepath.Join(h.dir, "run", "regiond.sock")}, {"tcp", h.a.Addr()}} {
		c, err := net.Dial(l.network, l.addr)
		if err != nil {
			t.Fatal(err)
		}
		const sent = 20000 // far past the socket buffers: the example table is a few kB
		read, err := stallclient.Pipeline(c, "GET /v1/table HTTP/1.1\r\nHost: localhost\r\n\r\n", sent, 2*time.Second)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if read == sent {
			t.Fatalf("%s: all %d answers written to a client that read none for 2 s: its connection was not closed", l.network, sent)
		}
		if code, _ := h.resolve("DE", "k"); code != 200 {
			t.Fatalf("%s: after the stalled client, /v1/resolve answers HTTP %d", l.network, code)
		}
	}
}
