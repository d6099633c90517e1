// Package sdnotify speaks systemd's notify protocol (sd_notify(3)) for a
// service of Type=notify: one datagram of newline-separated assignments,
// such as "READY=1" or "STATUS=serving epoch 42", sent to the unix
// datagram socket systemd names in $NOTIFY_SOCKET. systemd counts the
// unit started at READY=1 and shows the last STATUS= in `systemctl
// status`.
//
// Outside systemd (no $NOTIFY_SOCKET) a Notifier is nil and sends nothing.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// The assignments a service sends.
const (
	// Ready says the service is up: its listeners accept connections.
	Ready = "READY=1"
	// Stopping says the service has begun to stop.
	Stopping = "STOPPING=1"
)

// Status is the STATUS= assignment of a one-line free-form status. A
// newline in line would end the assignment: it is replaced by a space.
func Status(line string) string {
	return "STATUS=" + strings.ReplaceAll(line, "\n", " ")
}

// Notifier sends notifications to one socket. A nil Notifier sends
// nothing. Its methods may be called from several goroutines.
type Notifier struct {
	addr *net.UnixAddr
}

// New returns a Notifier of the socket at path, $NOTIFY_SOCKET's value: a
// file system path, or an abstract socket name starting with "@". An
// empty path (not under systemd, or a unit of another Type) gives a nil
// Notifier and no error. Each Send dials the socket anew, as sd_notify
// does: the socket outlives no systemd re-execution.
func New(path string) (*Notifier, error) {
	if path == "" {
		return nil, nil
	}
	if !strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "@") {
		return nil, fmt.Errorf("NOTIFY_SOCKET %q: want an absolute path or an abstract name starting with @ (vsock addresses are not supported)", path)
	}
	// Go takes a leading "@" as Linux's abstract namespace.
	return &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}, nil
}

// Send sends the assignments in one datagram.
func (n *Notifier) Send(assignments ...string) error {
	if n == nil {
		return nil
	}
	if len(assignments) == 0 {
		return errors.New("sdnotify: nothing to send")
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("notify systemd at NOTIFY_SOCKET %s: %w", n.addr.Name, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(assignments, "\n"))); err != nil {
		return fmt.Errorf("notify systemd at NOTIFY_SOCKET %s: %w", n.addr.Name, err)
	}
	return nil
}
