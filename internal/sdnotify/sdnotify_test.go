package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen opens a datagram socket as systemd's notify socket is, at a
// file system path or (name starting with @) an abstract name.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func receive(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(b[:n])
}

// TestSendsOneDatagram: the assignments arrive in one datagram, newline
// separated, at a path and at an abstract name; a status line's newline
// does not start another assignment.
func TestSendsOneDatagram(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@regiond-sdnotify-test-%d", os.Getpid()),
	} {
		srv := listen(t, name)
		n, err := New(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Send(Ready, Status("serving\nepoch 42")); err != nil {
			t.Fatal(err)
		}
		if got, want := receive(t, srv), "READY=1\nSTATUS=serving epoch 42"; got != want {
			t.Fatalf("%s: got %q, want %q", name, got, want)
		}
		if err := n.Send(Stopping); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, srv); got != "STOPPING=1" {
			t.Fatalf("%s: got %q", name, got)
		}
	}
}

// TestOutsideSystemd: no $NOTIFY_SOCKET gives a nil Notifier, whose Send
// does nothing; a socket that is not there, or an address systemd would
// not give, is an error naming it.
func TestOutsideSystemd(t *testing.T) {
	n, err := New("")
	if n != nil || err != nil {
		t.Fatalf("New(\"\") = %v, %v; want nil, nil", n, err)
	}
	if err := n.Send(Ready); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "gone")
	gone, err := New(missing)
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Send(Ready); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Send to %s = %v; want an error naming it", missing, err)
	}
	if _, err := New("vsock:2:1234"); err == nil || !strings.Contains(err.Error(), "vsock") {
		t.Fatalf("New(vsock) = %v; want refused", err)
	}
}

// TestSocketMadeAgain: systemd re-executed (daemon-reexec) binds its
// notify socket again; the next Send reaches the new one.
func TestSocketMadeAgain(t *testing.T) {
	name := filepath.Join(t.TempDir(), "notify")
	first := listen(t, name)
	n, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Send(Status("one")); err != nil {
		t.Fatal(err)
	}
	receive(t, first)
	first.Close()
	os.Remove(name)
	second := listen(t, name)
	if err := n.Send(Status("two")); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, second); got != "STATUS=two" {
		t.Fatalf("got %q", got)
	}
}
