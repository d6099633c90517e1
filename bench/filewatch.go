package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// fileObs is one version of the snapshot file as the bench saw it: the
// revision in it, and when the bench had read it (after the rename event).
type fileObs struct {
	rev int64
	at  time.Time
	// event is when the replacement was signalled (inotify), before the
	// file was read; zero where the file is polled.
	event time.Time
	n     int // replacements of the file this observation covers (>= 1)
}

// fileWatcher reports every replacement of the snapshot file on C. Linux
// uses inotify on the directory (IN_MOVED_TO | IN_CLOSE_WRITE); elsewhere
// the file is polled.
type fileWatcher struct {
	C     chan fileObs
	Kind  string
	close func()
}

func (w *fileWatcher) Close() { w.close() }

// readRevision reads the whole file, as a reader would, and returns its
// revision (the table JSON starts with {"revision":N,...}).
func readRevision(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return parseRevision(b)
}

// fileReader reads the snapshot file whole into a buffer it keeps, as a
// long-running reader would: open, read to the end, close; no allocation
// and no runtime poller per read, so the figure holds the read itself and
// not the bench's garbage.
type fileReader struct{ buf []byte }

func (r *fileReader) readRevision(path string) (int64, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	if r.buf == nil {
		r.buf = make([]byte, 256<<10)
	}
	n := 0
	for {
		if n == len(r.buf) {
			r.buf = append(r.buf, make([]byte, len(r.buf))...)
		}
		m, err := syscall.Read(fd, r.buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	return parseRevision(r.buf[:n])
}

var revisionField = []byte(`"revision":`)

func parseRevision(b []byte) (int64, error) {
	i := bytes.Index(b, revisionField)
	if i < 0 {
		return 0, fmt.Errorf("no revision in %d bytes", len(b))
	}
	b = b[i+len(revisionField):]
	j := 0
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	return strconv.ParseInt(string(b[:j]), 10, 64)
}

func readFileSize(path string) (int, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return int(fi.Size()), nil
}
