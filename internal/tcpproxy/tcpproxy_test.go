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

// With its replies frozen, the proxy still carries what a client sends:
// the server gets it and answers, and the answer is held until the thaw.
func TestFreezeRepliesCarriesRequests(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 4)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			got <- line
			c.Write([]byte(line))
		}
	}()
	p, err := tcpproxy.New(ln.Addr().String())
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
	if line, err := roundTrip(c, r, "before", 5*time.Second); err != nil || line != "before\n" {
		t.Fatalf("before the freeze: %q, %v", line, err)
	}
	<-got

	p.FreezeReplies()
	if line, err := roundTrip(c, r, "applied", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("replies frozen: read %q, %v; want nothing until the deadline", line, err)
	}
	select {
	case line := <-got:
		if line != "applied\n" {
			t.Fatalf("the server got %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("replies frozen: the request did not reach the server")
	}

	p.Thaw()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "applied\n" {
		t.Fatalf("after the thaw: %q, %v; want the held answer", line, err)
	}
}

// TestRestoreRacingCloseLeavesNoListener: a Restore racing Close (a fault
// healed in a goroutine as the test's cleanup closes the proxy) leaves no
// listener accepting after Close, and Close returns (the infrastructure
// review: one in seven such races kept accepting, and Close could hang
// on the accept goroutine's WaitGroup).
func TestRestoreRacingCloseLeavesNoListener(t *testing.T) {
	target := echo(t)
	for i := 0; i < 50; i++ {
		p, err := tcpproxy.New(target)
		if err != nil {
			t.Fatal(err)
		}
		p.Sever()
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Restore()
		}()
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			p.Close()
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("Close racing Restore did not return")
		}
		<-done
		if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
			c.Close()
			t.Fatalf("round %d: %s accepts after Close", i, p.Addr())
		}
	}
}
