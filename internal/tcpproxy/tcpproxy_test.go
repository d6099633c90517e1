package tcpproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/tcpproxy"
)

// echo serves an echo server on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes line on c and reads a line back within d.
func roundTrip(c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(d))
	return r.ReadString('\n')
}

// A frozen proxy carries nothing on open or new connections and closes
// none; thawed, it delivers what it held; severed while frozen, it closes
// them.
func TestFreezeHoldsAndThawDelivers(t *testing.T) {
	p, err := tcpproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "before", 5*time.Second); err != nil || got != "before\n" {
		t.Fatalf("before the freeze: %q, %v", got, err)
	}

	p.Freeze()
	if got, err := roundTrip(c, r, "held", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("frozen: read %q, %v; want nothing until the deadline", got, err)
	}
	fresh, err := net.Dial("tcp", p.Addr()) // accepted, but carries nothing
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	fr := bufio.NewReader(fresh)
	if got, err := roundTrip(fresh, fr, "new", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection made while frozen: read %q, %v; want nothing", got, err)
	}

	p.Thaw()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after the thaw: %q, %v; want what was held", got, err)
	}
	fresh.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := fr.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("the new connection after the thaw: %q, %v", got, err)
	}

	p.Freeze()
	p.Sever()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("severed while frozen: %v; want the connection closed", err)
	}
}
