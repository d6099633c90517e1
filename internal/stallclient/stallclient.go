// Package stallclient is a test client that stops reading: it pipelines
// requests on one connection and reads none of their answers for a while,
// as a front door whose worker hung mid-response would. Tests of the API's
// write bound use it against a real server.
package stallclient

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Pipeline writes request (a whole HTTP/1.1 request, headers and blank
// line) n times on c, from its own goroutine until c fails, reads nothing
// for hold, then reads the answers until the connection ends or all n are
// read. It returns how many answers it read in full: fewer than n when the
// server closed the connection. It gives up reading after a minute, as a
// hang guard; the caller closes c.
func Pipeline(c net.Conn, request string, n int, hold time.Duration) (int, error) {
	go func() {
		for range n {
			if _, err := io.WriteString(c, request); err != nil {
				return // closed by the server
			}
		}
	}()
	time.Sleep(hold) // the server blocks on a full socket, then its deadline passes
	if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		return 0, fmt.Errorf("stall client: %w", err)
	}
	br := bufio.NewReader(c)
	read := 0
	for ; read < n; read++ {
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		_, err = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if err != nil {
			break
		}
	}
	return read, nil
}
