package php_test

// What a failing front door logs (ThrottledLog.php), under php-fpm and
// in the CLI.

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/phpfront"
)

// fpmHasAPCu says whether php-fpm loads APCu.
func fpmHasAPCu(t *testing.T) bool {
	fpm, _ := frontServers(t)
	out, err := exec.Command(fpm, "-m").Output()
	return err == nil && regexp.MustCompile(`(?m)^apcu$`).Match(out)
}

// TestFrontDoorLogsFailuresRarely: while the table cannot be read, every
// request fails; one php-fpm child answering a burst of them logs the first
// failure at once, then at most one line per period (REGIOND_LOG_EVERY, 2 s
// here), and the lines account for every failure (each line plus the
// failures it says were left out). With APCu and without it (the state
// file per child in sys_get_temp_dir()).
func TestFrontDoorLogsFailuresRarely(t *testing.T) {
	for _, apcu := range []bool{true, false} {
		name := "file" // no '=' in the test's directories: php-fpm's configuration refuses it
		if apcu {
			name = "apcu"
		}
		t.Run(name, func(t *testing.T) {
			// Each has its own php-fpm and nginx (free port, own
			// directories): the two wait out their periods side by side.
			t.Parallel()
			if apcu && !fpmHasAPCu(t) {
				t.Skip("php-fpm has no APCu (php-apcu)")
			}
			tmp := t.TempDir()
			defines := []string{"sys_temp_dir=" + tmp}
			if !apcu {
				defines = append(defines, "apc.enabled=0")
			}
			snapDir := t.TempDir()
			snapshot := filepath.Join(snapDir, "table.json") // never written
			s := startFront(t, phpfront.Config{Snapshot: snapshot, Children: 1, Defines: defines,
				Params: map[string]string{"REGIOND_LOG_EVERY": "2"}, ReadyPath: "/ready"})
			lines := func() []string {
				t.Helper()
				var out []string
				// nginx logs what PHP says on the FastCGI stderr (fpm.log
				// has it too: catch_workers_output).
				b, _ := os.ReadFile(filepath.Join(s.Dir(), "nginx-error.log"))
				for _, l := range strings.Split(string(b), "\n") {
					if strings.Contains(l, "PHP message: regiond: ") && strings.Contains(l, snapDir) {
						out = append(out, l)
					}
				}
				return out
			}
			// The start's ready request (ReadyPath) was the first failure:
			// logged at once.
			requests := 1
			if n := len(lines()); n != 1 {
				t.Fatalf("%d lines after the first failing request, want 1\n%s", n, s.Logs())
			}
			time.Sleep(3500 * time.Millisecond) // its period is over
			resp, _ := get(t, s, "/watch/1", "PL", 10*time.Second)
			requests++
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503", resp.StatusCode)
			}
			if n := len(lines()); n != 2 {
				t.Fatalf("%d lines after the first failing request of a new period, want 2 (logged at once)\n%s", n, s.Logs())
			}
			began := time.Now()
			const burst = 400
			for i := range burst {
				resp, _ := get(t, s, "/watch/"+strconv.Itoa(i), "PL", 10*time.Second)
				if resp.StatusCode != http.StatusServiceUnavailable {
					t.Fatalf("request %d: status %d, want 503", i, resp.StatusCode)
				}
			}
			requests += burst
			took := time.Since(began)
			inBurst := len(lines()) - 2
			// A period is 2 s (APCu's TTL: up to 3 s): at most one line per
			// period begun during the burst.
			if max := int(took/(2*time.Second)) + 1; inBurst > max {
				t.Errorf("%d requests in %v logged %d lines, want at most %d", burst, took, inBurst, max)
			}
			time.Sleep(3500 * time.Millisecond)
			get(t, s, "/watch/last", "PL", 10*time.Second)
			requests++
			ls := lines()
			t.Logf("%d failing requests, %d lines (%d in a burst of %d in %v); the last: %s", requests, len(ls), inBurst, burst, took, ls[len(ls)-1])
			leftOut := regexp.MustCompile(`\((\d+) more of this message not logged since the last line; at most one line per 2 s\)`)
			accounted, beforeLast := 0, 0
			for i, l := range ls {
				if i == len(ls)-1 {
					beforeLast = accounted
				}
				accounted++
				if m := leftOut.FindStringSubmatch(l); m != nil {
					n, _ := strconv.Atoi(m[1])
					accounted += n
				} else if !strings.Contains(l, "(repeats within 2 s are counted, not logged)") {
					t.Errorf("line %q says neither how many were left out nor that repeats are", l)
				}
			}
			if accounted != requests {
				t.Errorf("lines account for %d failures, want the %d requests\n%s", accounted, requests, strings.Join(ls, "\n"))
			}
			// The line after the burst says how many were left out, unless
			// none was: a period that ended at the burst's last request
			// (the file's times are whole seconds) logged that one.
			if beforeLast < requests-1 && !strings.Contains(ls[len(ls)-1], "more of this message not logged") {
				t.Errorf("the line after the burst %q does not say how many were left out (%d of %d failures before it accounted for)", ls[len(ls)-1], beforeLast, requests-1)
			}
			files, _ := filepath.Glob(filepath.Join(tmp, "regiond-front-log-*", "regiond-front-log.*"))
			if apcu && len(files) != 0 {
				t.Errorf("with APCu, state files %v: want the count in APCu", files)
			}
			if !apcu && len(files) != 1 {
				t.Errorf("without APCu, state files %v: want one (the child's)", files)
			}
		})
	}
}

// TestThrottledLogStateFile: without APCu (the CLI's default) the count is
// kept in sys_get_temp_dir()/regiond-front-log-EUID/regiond-front-log.PID,
// the directory 0700: three failures in one process log one line. A state
// directory that is not this user's own (writable by others; another
// user's) is not used, nor is a link at the file's path: a count planted
// there (a timestamp kept fresh would silence the log) and a link's target
// are left untouched, and messages are then sampled, not all logged.
func TestThrottledLogStateFile(t *testing.T) {
	bin := php(t)
	code := `require 'ThrottledLog.php';
for ($i = 0; $i < 3; $i++) { \Regiond\ThrottledLog::error('regiond: test failure'); }
echo "pid=", getmypid(), "\n";`
	run := func(tmp string) string {
		t.Helper()
		cmd := exec.Command(bin, "-d", "apc.enable_cli=0", "-d", "sys_temp_dir="+tmp, "-d", "log_errors=1", "-d", "error_log=", "-r", code)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("php: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "Warning") {
			t.Errorf("php warned:\n%s", out)
		}
		return string(out)
	}
	uid := os.Geteuid()
	stateDir := func(tmp string) string { return filepath.Join(tmp, fmt.Sprintf("regiond-front-log-%d", uid)) }

	tmp := t.TempDir()
	if out := run(tmp); strings.Count(out, "regiond: test failure") != 1 {
		t.Errorf("3 failures in one process: want 1 line:\n%s", out)
	}
	if fi, err := os.Lstat(stateDir(tmp)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("the state directory: %v %v; want a directory 0700", fi, err)
	}

	// Planted: a state directory writable by others, with every pid's
	// file holding a fresh count; and, as root, one of another user.
	planted := `{"planted":[1,0]}`
	cases := map[string]func(dir string){"writable by others": func(dir string) { os.Chmod(dir, 0o777) }}
	if uid == 0 {
		cases["another user's"] = func(dir string) { os.Chown(dir, 65534, 65534) }
	}
	for name, spoil := range cases {
		tmp := t.TempDir()
		dir := stateDir(tmp)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		// The pid is not known before the run: plant the next ones.
		var files []string
		for pid := range 64 {
			f := filepath.Join(dir, fmt.Sprintf("regiond-front-log.%d", os.Getpid()+pid))
			if err := os.WriteFile(f, []byte(planted), 0o666); err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		spoil(dir)
		run(tmp)
		for _, f := range files {
			if b, _ := os.ReadFile(f); string(b) != planted {
				t.Errorf("%s: the state directory was used: %s holds %q", name, f, b)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) != len(files) {
			t.Errorf("%s: the state directory was used: %d files in it, %d planted", name, len(entries), len(files))
		}
	}

	// A link at the state file's path, in the user's own directory: not
	// written through.
	tmp = t.TempDir()
	target := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(target, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(stateDir(tmp), 0o700); err != nil {
		t.Fatal(err)
	}
	code = `require 'ThrottledLog.php';
symlink($argv[1], sys_get_temp_dir() . '/regiond-front-log-' . posix_geteuid() . '/regiond-front-log.' . getmypid());
for ($i = 0; $i < 3; $i++) { \Regiond\ThrottledLog::error('regiond: test failure'); }`
	cmd := exec.Command(bin, "-d", "apc.enable_cli=0", "-d", "sys_temp_dir="+tmp, "-d", "log_errors=1", "-d", "error_log=", "-r", code, "--", target)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("php: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("the link's target was written: %q", b)
	}
}
