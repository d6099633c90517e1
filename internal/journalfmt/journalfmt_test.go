package journalfmt

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// TestLinesCarryTheirPriority: slog's text and JSON records through
// Writer and Options start with the priority journald reads, without a
// time; a program's error and warning messages too, each of their lines.
func TestLinesCarryTheirPriority(t *testing.T) {
	for _, json := range []bool{false, true} {
		var out bytes.Buffer
		w := Writer(&out)
		opts := Options(w, &slog.HandlerOptions{Level: slog.LevelDebug})
		var h slog.Handler = slog.NewTextHandler(w, opts)
		if json {
			h = slog.NewJSONHandler(w, opts)
		}
		log := slog.New(h)
		log.Error("e", "err", errors.New("x"))
		log.Warn("w")
		log.Info("i")
		log.Debug("d")
		log.Log(t.Context(), slog.LevelError+4, "worse")
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		want := []string{"<3>", "<4>", "<6>", "<7>", "<3>"}
		if len(lines) != len(want) {
			t.Fatalf("json=%v: %d lines, want %d:\n%s", json, len(lines), len(want), out.String())
		}
		for i, l := range lines {
			if !strings.HasPrefix(l, want[i]) {
				t.Errorf("json=%v: line %q, want it to start %s", json, l, want[i])
			}
			if strings.Contains(l, "time") {
				t.Errorf("json=%v: line %q carries a time (journald stamps each line)", json, l)
			}
		}
	}

	var out bytes.Buffer
	w := Writer(&out)
	w.Write([]byte("regionctl: error: two\nlines\n"))
	w.Write([]byte("regionctl: warning: --ttl 1m: long\n"))
	w.Write([]byte("heartbeat: pools/eu alive under lease 1\n"))
	Errors(w).Write([]byte("regiond: --max-stale 0: want more\nregiond: --snapshot rel: want absolute\n"))
	want := "<3>regionctl: error: two\n<3>lines\n<4>regionctl: warning: --ttl 1m: long\n<6>heartbeat: pools/eu alive under lease 1\n" +
		"<3>regiond: --max-stale 0: want more\n<3>regiond: --snapshot rel: want absolute\n"
	if out.String() != want {
		t.Errorf("messages written as\n%s\nwant\n%s", out.String(), want)
	}
}

// TestOtherWritersAreLeftAlone: a writer that is not the journal's keeps
// its options (the time) and gets no prefix, and Errors returns it as is.
func TestOtherWritersAreLeftAlone(t *testing.T) {
	var out bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if Options(&out, opts) != opts {
		t.Error("Options changed the options of a plain writer")
	}
	if Errors(&out) != &out {
		t.Error("Errors wrapped a plain writer")
	}
	slog.New(slog.NewTextHandler(&out, Options(&out, opts))).Info("i")
	if !strings.HasPrefix(out.String(), "time=") {
		t.Errorf("plain line %q: want it to start with its time", out.String())
	}
}

// TestStderrFollowsJournalStream: Stderr wraps os.Stderr only when
// $JOURNAL_STREAM names stderr's device and inode (systemd sets it for a
// unit whose stderr is the journal; a shell started from such a unit
// inherits the variable with another stderr).
func TestStderrFollowsJournalStream(t *testing.T) {
	t.Setenv("JOURNAL_STREAM", "")
	if Stderr() != os.Stderr {
		t.Error("Stderr wrapped stderr without JOURNAL_STREAM")
	}
	t.Setenv("JOURNAL_STREAM", "1:1")
	if Stderr() != os.Stderr {
		t.Error("Stderr wrapped stderr for a JOURNAL_STREAM naming another file")
	}
	stream, err := StreamOf(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("JOURNAL_STREAM", stream)
	if _, ok := Stderr().(priorityWriter); !ok {
		t.Error("Stderr did not wrap stderr for a JOURNAL_STREAM naming it")
	}
}
