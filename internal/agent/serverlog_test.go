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

// TestServerLogIsThrottled: net/http's own lines go through the agent's
// logger, in its format. Its failed accepts (out of file descriptors,
// twice a second per listener) are logged at most once per period, the
// next saying how many were left out; any other line (a handler's panic)
// is logged as it comes.
func TestServerLogIsThrottled(t *testing.T) {
	var buf logbuf.Buffer
	now := time.Unix(1000, 0)
	l := log.New(&serverLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), listener: "tcp", every: 10 * time.Second,
		now: func() time.Time { return now }}, "", 0)
	accept := "http: Accept error: accept tcp 127.0.0.1:7420: accept4: too many open files; retrying in 1s"
	for range 5 {
		l.Print(accept)
		now = now.Add(time.Second)
	}
	l.Print("http: panic serving 127.0.0.1:5555: boom")
	now = now.Add(5 * time.Second)
	l.Print(accept)
	var recs []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatalf("a line not in the agent's format: %q: %v", s, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 || recs[0]["err"] != accept || recs[0]["listener"] != "tcp" || recs[0]["left_out"] != 0.0 ||
		recs[1]["err"] != "http: panic serving 127.0.0.1:5555: boom" || recs[2]["left_out"] != 4.0 {
		t.Fatalf("5 failed accepts a second apart, a panic, one more 5 s later: logged %v", recs)
	}
}
