package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
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
