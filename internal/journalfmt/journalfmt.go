// Package journalfmt fits a program's stderr to systemd's journal when
// stderr is the journal's stream (a unit's default): each line starts with
// its syslog priority ("<3>" for an error, sd-daemon(3)), which journald
// takes as the line's priority, so journalctl -p warning shows the
// warnings and errors; and slog's lines carry no time of their own
// (journald stamps every line).
package journalfmt

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"

	"github.com/coreos/go-systemd/v22/journal"
)

// Stderr returns os.Stderr, wrapped by Writer when stderr is the
// journal's stream ($JOURNAL_STREAM names it).
func Stderr() io.Writer {
	if on, err := journal.StderrIsJournalStream(); err != nil || !on {
		return os.Stderr
	}
	return Writer(os.Stderr)
}

// StreamOf is the $JOURNAL_STREAM value that names f (its device and
// inode numbers), as systemd sets it for a unit's stderr: tests give it to
// a process whose stderr is f.
func StreamOf(f *os.File) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("journal stream of %s: %w", f.Name(), err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("journal stream of %s: no device and inode numbers on this system", f.Name())
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino), nil
}

// Writer returns w with each line prefixed by its syslog priority, read
// from the start of each write (every write is one message, of one or
// more lines; slog's handlers write one line per record): 3 (err) for
// slog's ERROR and a "prog: error" message, 4 (warning) for WARN and
// "prog: warning", 7 (debug) for DEBUG, 6 (info) for anything else.
func Writer(w io.Writer) io.Writer { return priorityWriter{w: w} }

// Errors returns w for messages that are errors whatever they say: when
// w is a Writer, one that prefixes every line with 3 (err); otherwise w.
func Errors(w io.Writer) io.Writer {
	if pw, ok := w.(priorityWriter); ok {
		pw.prio = '3'
		return pw
	}
	return w
}

// Options returns opts fitted to w: when w is a Writer, the same options
// with the time dropped (the level then starts the line, where the
// Writer reads it); otherwise opts as given. opts may be nil.
func Options(w io.Writer, opts *slog.HandlerOptions) *slog.HandlerOptions {
	if _, ok := w.(priorityWriter); !ok {
		return opts
	}
	o := slog.HandlerOptions{}
	if opts != nil {
		o = *opts
	}
	replace := o.ReplaceAttr
	o.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		if replace != nil {
			return replace(groups, a)
		}
		return a
	}
	return &o
}

// priorityWriter is Writer's writer.
type priorityWriter struct {
	w    io.Writer
	prio byte // every write's priority; 0: read from each write
}

// Write writes p in one write, each of its lines prefixed with "<N>", N
// the priority of p's first line (or pw's own).
func (pw priorityWriter) Write(p []byte) (int, error) {
	prio := pw.prio
	if prio == 0 {
		prio = Priority(p)
	}
	prefix := [3]byte{'<', prio, '>'}
	line := make([]byte, 0, len(p)+3+3*bytes.Count(p, []byte{'\n'}))
	for rest := p; len(rest) > 0; {
		n := bytes.IndexByte(rest, '\n') + 1
		if n == 0 {
			n = len(rest)
		}
		line = append(line, prefix[:]...)
		line = append(line, rest[:n]...)
		rest = rest[n:]
	}
	if _, err := pw.w.Write(line); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Priority is the syslog priority digit of a message by how it starts:
// slog's level, in text (level=WARN) or JSON ({"level":"WARN"), or a
// program's "prog: error" / "prog: warning". 3 (err) for ERROR (and
// above) and error, 4 (warning) for WARN and warning, 7 (debug) for
// DEBUG, 6 (info) for anything else.
func Priority(msg []byte) byte {
	var rest []byte
	switch {
	case bytes.HasPrefix(msg, []byte("level=")):
		rest = msg[len("level="):]
	case bytes.HasPrefix(msg, []byte(`{"level":"`)):
		rest = msg[len(`{"level":"`):]
	default:
		// "regionctl: error: ...", "regiond: warning: ...": the first
		// word, a colon, then the kind.
		i := bytes.Index(msg, []byte(": "))
		if i <= 0 || bytes.ContainsAny(msg[:i], " \n") {
			return '6'
		}
		switch rest = msg[i+2:]; {
		case bytes.HasPrefix(rest, []byte("error")):
			return '3'
		case bytes.HasPrefix(rest, []byte("warning")):
			return '4'
		}
		return '6'
	}
	switch {
	case bytes.HasPrefix(rest, []byte("ERROR")):
		return '3'
	case bytes.HasPrefix(rest, []byte("WARN")):
		return '4'
	case bytes.HasPrefix(rest, []byte("DEBUG")):
		return '7'
	default:
		return '6'
	}
}
