package agent

import (
	"encoding/json"
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/logbuf"
)

// TestServerLogIsThrottled: net/http's own lines (here the accept loop's,
// out of file descriptors, twice a second per listener) go through the
// agent's logger, in its format, at most one per period, the next saying
// how many were left out.
func TestServerLogIsThrottled(t *testing.T) {
	var buf logbuf.Buffer
	l := log.New(&serverLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), listener: "tcp", every: 200 * time.Millisecond}, "", 0)
	line := "http: Accept error: accept tcp 127.0.0.1:7420: accept4: too many open files; retrying in 1s"
	for range 5 {
		l.Print(line)
	}
	time.Sleep(250 * time.Millisecond)
	l.Print(line)
	var recs []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatalf("a line not in the agent's format: %q: %v", s, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 || recs[0]["msg"] != "API server: "+line || recs[0]["listener"] != "tcp" || recs[0]["left_out"] != 0.0 || recs[1]["left_out"] != 4.0 {
		t.Fatalf("6 lines, the first 5 within a period: logged %v", recs)
	}
}
