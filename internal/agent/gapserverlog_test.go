package agent

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/logbuf"
)

// logRecords decodes the JSON lines of buf.
func logRecords(t *testing.T, buf *logbuf.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if s == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatalf("a line not in the agent's format: %q: %v", s, err)
		}
		recs = append(recs, r)
	}
	return recs
}

const acceptErr = "http: Accept error: accept unix /run/regiond/regiond.sock: accept4: too many open files; retrying in 5ms"

// TestGapServerLogAsBuilt guards newServerLog, the ErrorLog the agent's
// servers get: failed accepts are logged at most once per 10 s
// (docs/agent.md), with the listener named; a line of another kind (a
// handler's panic) is logged at error level, naming the listener too.
func TestGapServerLogAsBuilt(t *testing.T) {
	var buf logbuf.Buffer
	l := newServerLog(slog.New(slog.NewJSONHandler(&buf, nil)), "unix")
	sl := l.Writer().(*serverLog)
	if sl.every != 10*time.Second {
		t.Fatalf("failed accepts logged at most every %v, want 10s", sl.every)
	}
	for range 3 {
		l.Print(acceptErr)
	}
	l.Print("http: panic serving @: boom")
	recs := logRecords(t, &buf)
	if len(recs) != 2 || recs[0]["err"] != acceptErr || recs[0]["listener"] != "unix" || recs[0]["level"] != "WARN" {
		t.Fatalf("3 failed accepts at once, then a panic: logged %v; want the first accept alone, at WARN, naming the listener", recs)
	}
	if recs[1]["level"] != "ERROR" || recs[1]["listener"] != "unix" || recs[1]["err"] != "http: panic serving @: boom" {
		t.Fatalf("a panic's line: %v; want it at ERROR naming the listener", recs[1])
	}
}

// TestGapServerLogCountsEachPeriodAnew guards the reset of left_out: each
// line of failed accepts says how many were left out since the line
// before, not since the first.
func TestGapServerLogCountsEachPeriodAnew(t *testing.T) {
	var buf logbuf.Buffer
	now := time.Unix(1000, 0)
	s := &serverLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), listener: "tcp", every: 10 * time.Second, now: func() time.Time { return now }}
	for range 3 { // three periods of 4 failed accepts each
		for range 4 {
			s.Write([]byte(acceptErr))
			now = now.Add(2500 * time.Millisecond)
		}
	}
	recs := logRecords(t, &buf)
	var left []float64
	for _, r := range recs {
		left = append(left, r["left_out"].(float64))
	}
	if len(left) != 3 || left[0] != 0 || left[1] != 3 || left[2] != 3 {
		t.Fatalf("left_out of 3 lines, 4 failed accepts a period: %v; want [0 3 3]", left)
	}
}
