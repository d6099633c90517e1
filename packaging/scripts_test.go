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

// postrm purge forgets the units' enablement (the dangling symlinks of
// regiond and of every heartbeat instance, nothing else's) and the
// runtime directory; remove keeps both (the enablement is configuration).
func TestPostrmPurgeForgetsEnablement(t *testing.T) {
	root := t.TempDir()
	wants := filepath.Join(root, "etc", "systemd", "system", "multi-user.target.wants")
	run := filepath.Join(root, "run", "regiond")
	for _, d := range []string{wants, run} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ours := []string{"regiond.service", "regiond-heartbeat@fra-1a.service", "regiond-heartbeat@fra-1b.service"}
	for _, name := range append(ours, "nginx.service") {
		if err := os.Symlink("/lib/systemd/system/"+name, filepath.Join(wants, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(run, "table.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	fakeBin(t, bin, "systemctl", 0)
	postrm := func(arg string) {
		cmd := exec.Command("sh", "scripts/postrm", arg)
		cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin", "DPKG_ROOT="+root)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("postrm %s: %v: %s", arg, err, out)
		}
	}
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }

	postrm("remove")
	for _, name := range ours {
		if !exists(filepath.Join(wants, name)) {
			t.Errorf("postrm remove dropped %s's enablement", name)
		}
	}
	postrm("purge")
	for _, name := range ours {
		if exists(filepath.Join(wants, name)) {
			t.Errorf("postrm purge kept %s enabled", name)
		}
	}
	if !exists(filepath.Join(wants, "nginx.service")) {
		t.Error("postrm purge removed another package's enablement")
	}
	if exists(run) {
		t.Error("postrm purge kept /run/regiond")
	}
}
