package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBin writes a stand-in for a system command into dir that logs its
// arguments to dir/calls and exits with code.
func fakeBin(t *testing.T, dir, name string, code int) {
	t.Helper()
	script := "#!/bin/sh\necho \"" + name + " $*\" >> " + filepath.Join(dir, "calls") + "\nexit " + string(rune('0'+code)) + "\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// runPostinst runs the packaged postinst with getent answering exists
// and adduser, addgroup and systemctl replaced by loggers (a test must not
// add users to this machine), and returns the commands it ran.
func runPostinst(t *testing.T, userExists bool, args ...string) []string {
	t.Helper()
	bin := t.TempDir()
	code := 2 // getent's "not found"
	if userExists {
		code = 0
	}
	fakeBin(t, bin, "getent", code)
	for _, name := range []string{"adduser", "addgroup", "systemctl"} {
		fakeBin(t, bin, name, 0)
	}
	cmd := exec.Command("sh", append([]string{"scripts/postinst"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("postinst %v: %v: %s", args, err, out)
	}
	b, _ := os.ReadFile(filepath.Join(bin, "calls"))
	var calls []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" && !strings.HasPrefix(l, "systemctl") {
			calls = append(calls, l)
		}
	}
	return calls
}

// postinst creates the regiond system user and group once: a second
// configure (an upgrade, a reinstall) finds it and leaves it alone.
func TestPostinstCreatesUserOnce(t *testing.T) {
	calls := runPostinst(t, false, "configure", "")
	want := []string{"getent passwd regiond",
		"adduser --system --group --no-create-home --home /nonexistent --shell /usr/sbin/nologin --gecos regiond agent --quiet regiond"}
	if strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("first install ran:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	calls = runPostinst(t, true, "configure", "1.3.0")
	if strings.Join(calls, "\n") != "getent passwd regiond" {
		t.Errorf("upgrade with the user present ran: %q, want only the lookup", calls)
	}
	if calls := runPostinst(t, false, "abort-upgrade", "1.3.0"); len(calls) != 0 {
		t.Errorf("abort-upgrade ran %q, want nothing", calls)
	}
}

// Every maintainer script is valid POSIX sh (dash, Debian's /bin/sh).
func TestScriptsParse(t *testing.T) {
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		if out, err := exec.Command("sh", "-n", filepath.Join("scripts", s)).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v: %s", s, err, out)
		}
	}
}
