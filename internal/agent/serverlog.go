package agent

import (
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// serverLogEvery is the least time between two lines of an API server's
// own errors.
const serverLogEvery = 10 * time.Second

// serverLog is an API server's ErrorLog (what net/http logs on its own: a
// failed accept, a panic in a handler), through the agent's logger, at
// most a line per serverLogEvery, with how many it left out since. Out of
// file descriptors, each listener's accept loop logged twice a second, as
// unstructured lines that ignored --log-format (the host review).
type serverLog struct {
	log      *slog.Logger
	listener string
	every    time.Duration
	mu       sync.Mutex
	last     time.Time
	dropped  int
}

// newServerLog returns the ErrorLog of the server of listener.
func newServerLog(l *slog.Logger, listener string) *log.Logger {
	return log.New(&serverLog{log: l, listener: listener, every: serverLogEvery}, "", 0)
}

// Write logs p, one line of net/http's, unless one was logged within
// serverLogEvery.
func (s *serverLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	now := time.Now()
	if !s.last.IsZero() && now.Sub(s.last) < s.every {
		s.dropped++
		s.mu.Unlock()
		return len(p), nil
	}
	dropped := s.dropped
	s.last, s.dropped = now, 0
	s.mu.Unlock()
	s.log.Warn("API server: "+strings.TrimSpace(string(p)), "listener", s.listener, "left_out", dropped)
	return len(p), nil
}
