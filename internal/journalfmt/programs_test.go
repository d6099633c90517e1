package journalfmt_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/gobuild"
	"github.com/regiond/regiond/internal/journalfmt"
)

// runJournaled runs bin with args, its stderr a file that $JOURNAL_STREAM
// names (as systemd runs a unit), until it exits or until done says the
// stderr so far is enough (then it is killed); it returns that stderr.
func runJournaled(t *testing.T, done func(string) bool, bin string, args ...string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stream, err := journalfmt.StreamOf(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = f
	cmd.Env = append(os.Environ(), "JOURNAL_STREAM="+stream)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	for {
		select {
		case <-exited:
			out, _ := os.ReadFile(f.Name())
			return string(out)
		case <-time.After(50 * time.Millisecond):
			if out, _ := os.ReadFile(f.Name()); done != nil && done(string(out)) {
				cmd.Process.Kill()
				<-exited
				return string(out)
			}
		}
	}
}

// TestProgramsWriteToTheJournal: regiond and regionctl, their stderr the
// journal's stream, prefix every line with its priority (an error that
// ends the run 3, slog's warnings 4) and log no time of their own.
func TestProgramsWriteToTheJournal(t *testing.T) {
	regiond := gobuild.Binary(t, "./cmd/regiond", "-tags", "nodev")
	regionctl := gobuild.Binary(t, "./cmd/regionctl")
	dead := "http://127.0.0.1:1" // nothing listens on port 1

	check := func(name, out string, want ...string) {
		t.Helper()
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if len(l) < 3 || l[0] != '<' || l[2] != '>' {
				t.Errorf("%s: line %q has no priority", name, l)
			}
			if strings.Contains(l, "time=") {
				t.Errorf("%s: line %q carries a time", name, l)
			}
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", name, w, out)
			}
		}
	}

	// Two bad flags: two error lines, each at priority 3.
	out := runJournaled(t, nil, regiond, "--snapshot", "rel/table.json", "--max-stale", "0")
	check("regiond bad flags", out, "<3>regiond: --snapshot", "<3>regiond: --max-stale")
	// etcd away: the agent warns, and serves on.
	sock := t.TempDir() + "/s.sock"
	out = runJournaled(t, func(s string) bool { return strings.Contains(s, "<4>level=WARN") },
		regiond, "--endpoints", dead, "--socket", sock, "--snapshot", t.TempDir()+"/table.json")
	check("regiond etcd away", out, "<4>level=WARN")

	// A heartbeat (a unit of its own) logs its retries with slog: a
	// warning, without a time (the diff review: the options were fitted
	// to the wrapped writer, not the journal's).
	out = runJournaled(t, func(s string) bool { return strings.Contains(s, "level=WARN") },
		regionctl, "--endpoints", dead, "--dial-timeout", "200ms", "heartbeat", "eu-central", "--instance", "i1", "--addr", "10.0.0.1:443")
	check("regionctl heartbeat etcd away", out, "<4>level=WARN msg=\"heartbeat: etcd unreachable")

	out = runJournaled(t, nil, regionctl, "--endpoints", dead, "--dial-timeout", "200ms", "get", "pools")
	check("regionctl etcd away", out, "<3>regionctl: ")
	out = runJournaled(t, nil, regionctl, "get", "pools", "--outptu", "json")
	check("regionctl bad flag", out, "<3>regionctl: unknown flag: --outptu", "<3>Run 'regionctl get --help' for usage.")
	if bytes.Contains([]byte(out), []byte("<6>")) {
		t.Errorf("regionctl's usage error has an info line:\n%s", out)
	}
}
