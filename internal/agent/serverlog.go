package agent

import (
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// serverLogEvery is the least time between two lines of an API server's
// failed accepts.
const serverLogEvery = 10 * time.Second

// serverLog is an API server's ErrorLog (what net/http logs on its own: a
// failed accept, a panic in a handler), through the agent's logger. Its
// failed accepts, retried by net/http with a growing pause up to a
// second, are logged at most once per serverLogEvery, with how many were
// left out since: out of file descriptors, each listener's accept loop
// logged twice a second, as unstructured lines that ignored --log-format
// (the host review). Any other line is logged as it comes.
type serverLog struct {
	log      *slog.Logger
	listener string
	every    time.Duration
	now      func() time.Time
	mu       sync.Mutex
	last     time.Time
	dropped  int
}

// newServerLog returns the ErrorLog of the server of listener.
func newServerLog(l *slog.Logger, listener string) *log.Logger {
	return log.New(&serverLog{log: l, listener: listener, every: serverLogEvery, now: time.Now}, "", 0)
}

// Write logs p, one line of net/http's; a failed accept only when none
// was logged within the period.
func (s *serverLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if !strings.HasPrefix(line, "http: Accept error") {
		s.log.Error("API server", "listener", s.listener, "err", line)
		return len(p), nil
	}
	s.mu.Lock()
	now := s.now()
	if !s.last.IsZero() && now.Sub(s.last) < s.every {
		s.dropped++
		s.mu.Unlock()
		return len(p), nil
	}
	dropped := s.dropped
	s.last, s.dropped = now, 0
	s.mu.Unlock()
	s.log.Warn("API server: accepting connections fails", "listener", s.listener, "err", line, "left_out", dropped)
	return len(p), nil
}
