package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// rawGetter polls one GET over one keep-alive HTTP/1.1 connection with a
// pre-built request and no allocation per request, so the poller's own
// CPU use perturbs the two-CPU machine as little as possible (net/http's
// client costs several times more per request).
type rawGetter struct {
	addr string
	req  []byte
	conn net.Conn
	br   *bufio.Reader
	body []byte
	// timeout bounds each request (0: 5s); a blocking query needs more
	// than its wait.
	timeout time.Duration
}

func newRawGetter(addr, path string) *rawGetter {
	return &rawGetter{addr: addr,
		req: []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: regiond-bench\r\n\r\n")}
}

// setPath changes the request's path (same connection).
func (g *rawGetter) setPath(path string) {
	g.req = []byte("GET " + path + " HTTP/1.1\r\nHost: " + g.addr + "\r\nUser-Agent: regiond-bench\r\n\r\n")
}

func (g *rawGetter) Close() {
	if g.conn != nil {
		g.conn.Close()
		g.conn = nil
	}
}

// get sends the request and returns the status and the body, which is
// valid until the next call.
func (g *rawGetter) get() (int, []byte, error) {
	code, body, err := g.once()
	if err != nil && g.conn == nil {
		code, body, err = g.once() // reconnect once
	}
	return code, body, err
}

func (g *rawGetter) once() (int, []byte, error) {
	if g.conn == nil {
		c, err := net.DialTimeout("tcp", g.addr, time.Second)
		if err != nil {
			return 0, nil, err
		}
		c.(*net.TCPConn).SetNoDelay(true)
		g.conn, g.br = c, bufio.NewReaderSize(c, 16<<10)
	}
	timeout := g.timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	g.conn.SetDeadline(time.Now().Add(timeout))
	if _, err := g.conn.Write(g.req); err != nil {
		g.Close()
		return 0, nil, err
	}
	code, body, err := g.readResponse()
	if err != nil {
		g.Close()
	}
	return code, body, err
}

var errBadResponse = errors.New("malformed HTTP response")

func (g *rawGetter) readResponse() (int, []byte, error) {
	line, err := g.br.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, nil, errBadResponse
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, errBadResponse
	}
	length, chunked, closeConn := -1, false, false
	for {
		line, err := g.br.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, errBadResponse
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(v)); err != nil {
				return 0, nil, errBadResponse
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			closeConn = bytes.EqualFold(v, []byte("close"))
		}
	}
	g.body = g.body[:0]
	switch {
	case chunked:
		for {
			line, err := g.br.ReadSlice('\n')
			if err != nil {
				return 0, nil, err
			}
			n, err := strconv.ParseInt(string(bytes.TrimRight(line, "\r\n")), 16, 32)
			if err != nil {
				return 0, nil, errBadResponse
			}
			if n == 0 {
				if _, err := g.br.ReadSlice('\n'); err != nil {
					return 0, nil, err
				}
				break
			}
			if err := g.readN(int(n)); err != nil {
				return 0, nil, err
			}
			if _, err := g.br.Discard(2); err != nil {
				return 0, nil, err
			}
		}
	case length >= 0:
		if err := g.readN(length); err != nil {
			return 0, nil, err
		}
	default:
		return 0, nil, fmt.Errorf("response without a length")
	}
	if closeConn {
		g.Close()
	}
	return code, g.body, nil
}

func (g *rawGetter) readN(n int) error {
	off := len(g.body)
	if cap(g.body)-off < n {
		nb := make([]byte, off, off+n+4096)
		copy(nb, g.body)
		g.body = nb
	}
	g.body = g.body[:off+n]
	_, err := io.ReadFull(g.br, g.body[off:])
	return err
}

// decisionFields extracts "pool" and "revision" from a Decision body
// without decoding the whole document.
func decisionFields(b []byte) (pool []byte, rev int64, ok bool) {
	i := bytes.Index(b, []byte(`"pool":"`))
	if i < 0 {
		return nil, 0, false
	}
	rest := b[i+len(`"pool":"`):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return nil, 0, false
	}
	rev, err := parseRevision(b)
	if err != nil {
		return nil, 0, false
	}
	return rest[:j], rev, true
}
