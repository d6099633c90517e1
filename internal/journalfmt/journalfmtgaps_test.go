package journalfmt_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/regiond/regiond/internal/journalfmt"
)

// TestPriorityReadsOnlyAProgramsName protects the "prog: error" reading
// of a message: the word before ": " must be one word (a program's name),
// so an info line whose text says "error" after a colon is not taken for
// an error, nor a line that starts with ": ".
func TestPriorityReadsOnlyAProgramsName(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want byte
	}{
		{"regionctl: error: two\n", '3'},
		{"regiond: warning: --ttl 1m: long\n", '4'},
		{"pool eu-central: error budget spent\n", '6'},
		{"2 agents: warning of a clock off\n", '6'},
		{": error\n", '6'},
		{"level=ERROR msg=x\n", '3'},
		{`{"level":"DEBUG","msg":"x"}` + "\n", '7'},
		{"level=INFO msg=\"regionctl: error\"\n", '6'},
	} {
		if got := journalfmt.Priority([]byte(tc.msg)); got != tc.want {
			t.Errorf("Priority(%q) = %c, want %c", tc.msg, got, tc.want)
		}
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("journal gone") }

// TestWriterKeepsTheWriteContract protects Writer as an io.Writer: it
// returns len(p) (what the caller gave, not what it wrote with the
// prefixes: io.Copy and bufio count on it), returns the underlying
// writer's error (a journal gone is not swallowed), and writes a last
// line that has no newline too.
func TestWriterKeepsTheWriteContract(t *testing.T) {
	var out bytes.Buffer
	w := journalfmt.Writer(&out)
	p := []byte("regionctl: error: two\nlines, the last unterminated")
	if n, err := w.Write(p); n != len(p) || err != nil {
		t.Errorf("Write = %d, %v; want %d, nil", n, err, len(p))
	}
	if want := "<3>regionctl: error: two\n<3>lines, the last unterminated"; out.String() != want {
		t.Errorf("written %q, want %q", out.String(), want)
	}
	if n, err := journalfmt.Writer(failWriter{}).Write([]byte("level=INFO msg=x\n")); err == nil || n != 0 {
		t.Errorf("Write to a failing writer = %d, %v; want 0 and its error", n, err)
	}
}

// TestOptionsKeepTheCallersReplaceAttr protects Options' ReplaceAttr
// chain: the caller's ReplaceAttr still runs under the journal, and only
// the record's own time is dropped, not an attribute named "time" inside
// a group.
func TestOptionsKeepTheCallersReplaceAttr(t *testing.T) {
	var out bytes.Buffer
	w := journalfmt.Writer(&out)
	redact := func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == "password" {
			a.Value = slog.StringValue("REDACTED")
		}
		return a
	}
	log := slog.New(slog.NewTextHandler(w, journalfmt.Options(w, &slog.HandlerOptions{ReplaceAttr: redact})))
	log.Info("login", "password", "hunter2", slog.Group("req", "time", "5ms"))
	got := out.String()
	if !strings.HasPrefix(got, "<6>level=INFO") || strings.Contains(got, "hunter2") || !strings.Contains(got, "password=REDACTED") ||
		!strings.Contains(got, "req.time=5ms") {
		t.Errorf("logged %q: want <6>level=INFO first, no time of the record's own, password=REDACTED and req.time=5ms", got)
	}
}
