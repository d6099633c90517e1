package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/regiond/regiond/internal/testprog"
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

// fakeSystemctl writes a systemctl stand-in into dir that logs its
// arguments to dir/calls, answers each is-active with the next of states
// (the last one repeated; exit 0 only for "active", as systemctl does) and
// try-restart with exit code tryRestart.
func fakeSystemctl(t *testing.T, dir string, tryRestart int, states ...string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "states"), []byte(strings.Join(states, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `#!/bin/sh
echo "systemctl $*" >> DIR/calls
case "$1" in
is-active)
	state=$(head -n 1 DIR/states)
	if [ "$(wc -l < DIR/states)" -gt 1 ]; then sed -i 1d DIR/states; fi
	[ "$2" = --quiet ] || echo "$state"
	[ "$state" = active ]
	exit $?
	;;
try-restart) exit CODE ;;
esac
exit 0
`
	script = strings.ReplaceAll(script, "DIR", dir)
	script = strings.ReplaceAll(script, "CODE", string(rune('0'+tryRestart)))
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// scriptRoot returns a DPKG_ROOT as dpkg leaves it before postinst: the
// package's templates in /usr/share/regiond/, an empty /etc/regiond/, and
// its own /etc/passwd and /etc/group, where user and group regiond are (as
// an earlier install left them; setAccounts changes that).
func scriptRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/share/regiond", "etc/regiond/heartbeat"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	setAccounts(t, root, true, true)
	for _, name := range []string{"regiond.env", "heartbeat.env"} {
		b, err := os.ReadFile(filepath.Join("etc", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "usr/share/regiond", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// setAccounts writes root's /etc/passwd and /etc/group: root's entries,
// and user and group regiond when user and group say so.
func setAccounts(t *testing.T, root string, user, group bool) {
	t.Helper()
	passwd, groups := "root:x:0:0:root:/root:/bin/sh\n", "root:x:0:\n"
	if user {
		passwd += "regiond:x:999:999::/nonexistent:/usr/sbin/nologin\n"
	}
	if group {
		groups += "regiond:x:999:\n"
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"passwd": passwd, "group": groups} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scriptBin returns a directory of stand-ins for getent (answering
// userExists), adduser, addgroup, useradd, systemctl and
// deb-systemd-invoke (a test must not
// add users to this machine nor touch its units), and chown when the test
// is not root (the scripts run as root).
func scriptBin(t *testing.T, userExists bool) string {
	t.Helper()
	bin := t.TempDir()
	code := 2 // getent's "not found"
	if userExists {
		code = 0
	}
	fakeBin(t, bin, "getent", code)
	for _, name := range []string{"adduser", "addgroup", "useradd"} {
		fakeBin(t, bin, name, 0)
	}
	fakeSystemctl(t, bin, 0, "inactive")
	// deb-systemd-invoke logs its call, then runs the systemctl stand-in
	// (as the real one does when policy-rc.d allows).
	dsi := "#!/bin/sh\necho \"deb-systemd-invoke $*\" >> " + filepath.Join(bin, "calls") + "\nexec " + filepath.Join(bin, "systemctl") + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "deb-systemd-invoke"), []byte(dsi), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		fakeBin(t, bin, "chown", 0)
	}
	return bin
}

// runScript runs a packaged maintainer script with DPKG_ROOT=root and
// bin's stand-ins first in PATH, and returns its output (stderr's: the
// scripts print nothing else).
func runScript(t *testing.T, root, bin, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command("sh", append([]string{filepath.Join("scripts", script)}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/sbin:/usr/bin:/sbin:/bin", "DPKG_ROOT="+root) // as dpkg sets it
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", script, args, err, out)
	}
	return string(out)
}

// calls returns the commands the stand-ins in bin logged, systemctl's
// left out unless withSystemctl.
func calls(t *testing.T, bin string, withSystemctl bool) []string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(bin, "calls"))
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" && (withSystemctl || !strings.HasPrefix(l, "systemctl")) && !strings.HasPrefix(l, "chown") {
			out = append(out, l)
		}
	}
	return out
}

// runPostinst runs the packaged postinst in a fresh root, whose
// /etc/passwd has user regiond when userExists, and returns the root and
// the commands it ran but systemctl's.
func runPostinst(t *testing.T, userExists bool, args ...string) (string, []string) {
	t.Helper()
	bin, root := scriptBin(t, userExists), scriptRoot(t)
	setAccounts(t, root, userExists, userExists)
	runScript(t, root, bin, "postinst", args...)
	return root, calls(t, bin, false)
}

// postinst under a DPKG_ROOT creates the regiond system user and group
// once, in that root (useradd --prefix), never through getent or adduser,
// which act on this machine: a second configure (an upgrade, a reinstall)
// finds the user in the root's /etc/passwd and leaves it alone. A group
// regiond already there is the user's; a root without /etc/passwd gets a
// warning, and no user.
func TestPostinstCreatesUserOnce(t *testing.T) {
	root, ran := runPostinst(t, false, "configure", "")
	want := "useradd --prefix " + root + " --system --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin regiond"
	if strings.Join(ran, "\n") != want {
		t.Errorf("first install ran:\n%s\nwant:\n%s", strings.Join(ran, "\n"), want)
	}
	if _, ran = runPostinst(t, true, "configure", "1.3.0"); len(ran) != 0 {
		t.Errorf("upgrade with the user present ran: %q, want nothing", ran)
	}
	if _, ran = runPostinst(t, false, "abort-upgrade", "1.3.0"); len(ran) != 0 {
		t.Errorf("abort-upgrade ran %q, want nothing", ran)
	}

	bin, root := scriptBin(t, false), scriptRoot(t)
	setAccounts(t, root, false, true)
	runScript(t, root, bin, "postinst", "configure", "")
	if got := strings.Join(calls(t, bin, false), "\n"); !strings.Contains(got, " --system --gid regiond ") {
		t.Errorf("with group regiond present, postinst ran %q; want useradd --gid regiond", got)
	}

	bin, root = scriptBin(t, false), scriptRoot(t)
	for _, name := range []string{"passwd", "group"} {
		if err := os.Remove(filepath.Join(root, "etc", name)); err != nil {
			t.Fatal(err)
		}
	}
	out := runScript(t, root, bin, "postinst", "configure", "")
	if got := calls(t, bin, false); len(got) != 0 || !strings.Contains(out, "warning: "+root+" has no /etc/passwd") {
		t.Errorf("in a root without /etc/passwd, postinst ran %q and printed %q; want nothing run and a warning", got, out)
	}
}

// On this machine (DPKG_ROOT empty), postinst's add_user makes the user
// with adduser when getent does not find it, without --gecos (deprecated
// after bookworm; adduser --system asks for nothing), and leaves an
// existing one alone. The function is run alone: the whole script with an
// empty DPKG_ROOT would write this machine's /etc/regiond.
func TestPostinstAddsUserOnThisMachine(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("scripts", "postinst"))
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?ms)^add_user\(\) \{\n.*?^\}\n`).Find(script)
	if fn == nil {
		t.Fatal("scripts/postinst has no add_user function")
	}
	for _, exists := range []bool{false, true} {
		bin := scriptBin(t, exists)
		cmd := exec.Command("sh", "-c", "set -e\nroot=\n"+string(fn)+"add_user\n")
		cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("add_user: %v: %s", err, out)
		}
		want := "getent passwd regiond"
		if !exists {
			want += "\nadduser --system --group --no-create-home --home /nonexistent --shell /usr/sbin/nologin --quiet regiond"
		}
		if got := strings.Join(calls(t, bin, false), "\n"); got != want {
			t.Errorf("add_user (user present: %v) ran:\n%s\nwant:\n%s", exists, got, want)
		}
	}
}

// Under a non-empty DPKG_ROOT, postinst (with the real useradd) makes user
// and group regiond in that root's /etc/passwd and /etc/group, and this
// machine's are untouched (the packaging review: getent and adduser acted
// on /); a second run adds nothing.
func TestPostinstCreatesUserInDpkgRoot(t *testing.T) {
	testprog.NeedRoot(t, "useradd writes the root's /etc/passwd")
	testprog.Need(t, "useradd", "apt-get install -y passwd")
	bin, root := scriptBin(t, false), scriptRoot(t)
	if err := os.Remove(filepath.Join(bin, "useradd")); err != nil {
		t.Fatal(err)
	}
	setAccounts(t, root, false, false)
	hostPasswd, _ := os.ReadFile("/etc/passwd")
	hostGroup, _ := os.ReadFile("/etc/group")
	runScript(t, root, bin, "postinst", "configure", "")
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	group, _ := os.ReadFile(filepath.Join(root, "etc/group"))
	if !regexp.MustCompile(`(?m)^regiond:[^:]*:[0-9]+:[0-9]+:[^:]*:/nonexistent:/usr/sbin/nologin$`).Match(passwd) {
		t.Errorf("the root's /etc/passwd has no user regiond (home /nonexistent, shell nologin):\n%s", passwd)
	}
	if !regexp.MustCompile(`(?m)^regiond:`).Match(group) {
		t.Errorf("the root's /etc/group has no group regiond:\n%s", group)
	}
	if b, _ := os.ReadFile("/etc/passwd"); string(b) != string(hostPasswd) {
		t.Error("postinst under DPKG_ROOT changed this machine's /etc/passwd")
	}
	if b, _ := os.ReadFile("/etc/group"); string(b) != string(hostGroup) {
		t.Error("postinst under DPKG_ROOT changed this machine's /etc/group")
	}
	if got := calls(t, bin, false); len(got) != 0 {
		t.Errorf("postinst under DPKG_ROOT ran %q (this machine's accounts)", got)
	}
	runScript(t, root, bin, "postinst", "configure", "1.3.0")
	if again, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); string(again) != string(passwd) {
		t.Errorf("a second configure changed the root's /etc/passwd:\n%s", again)
	}
}

// checkSettingsFile fails unless root's /etc/regiond/name is a regular
// file, mode 0600, owned by root (when the test runs as root), holding want.
func checkSettingsFile(t *testing.T, root, name, want string) {
	t.Helper()
	p := filepath.Join(root, "etc/regiond", name)
	fi, err := os.Lstat(p)
	if err != nil {
		t.Errorf("/etc/regiond/%s: %v", name, err)
		return
	}
	if fi.Mode() != 0o600 {
		t.Errorf("/etc/regiond/%s: mode %v, want 0600", name, fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && (st.Uid != 0 || st.Gid != 0) {
		t.Errorf("/etc/regiond/%s: owned by %d:%d, want root:root", name, st.Uid, st.Gid)
	}
	if b, _ := os.ReadFile(p); string(b) != want {
		t.Errorf("/etc/regiond/%s holds %q, want %q", name, b, want)
	}
}

// postinst configure makes each settings file missing from /etc/regiond/
// from its template (0600 root:root, whatever the umask), and leaves one
// that is there as it is: an upgrade never changes what the node set, and
// asks nothing.
func TestPostinstInstallsSettingsOnce(t *testing.T) {
	root, bin := scriptRoot(t), scriptBin(t, true)
	tmpl := map[string]string{}
	for _, name := range []string{"regiond.env", "heartbeat.env"} {
		b, err := os.ReadFile(filepath.Join("etc", name))
		if err != nil {
			t.Fatal(err)
		}
		tmpl[name] = string(b)
	}
	runScript(t, root, bin, "postinst", "abort-upgrade", "1.3.0")
	if _, err := os.Lstat(filepath.Join(root, "etc/regiond/regiond.env")); err == nil {
		t.Error("postinst abort-upgrade made /etc/regiond/regiond.env")
	}
	old := syscall.Umask(0) // the script sets its own
	if out := runScript(t, root, bin, "postinst", "configure", ""); !strings.Contains(out, "regiond: installed, not started") ||
		!strings.Contains(out, "systemctl enable --now regiond") {
		t.Errorf("a first install printed %q, want the next step", out)
	}
	syscall.Umask(old)
	for name, want := range tmpl {
		checkSettingsFile(t, root, name, want)
	}
	edited := "REGIOND_ARGS=\"--endpoints=https://etcd-1:2379\"\n"
	if err := os.WriteFile(filepath.Join(root, "etc/regiond/regiond.env"), []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "etc/regiond/heartbeat.env")); err != nil {
		t.Fatal(err)
	}
	if out := runScript(t, root, bin, "postinst", "configure", "1.3.0"); out != "" {
		t.Errorf("postinst configure (upgrade) printed %q, want nothing", out)
	}
	checkSettingsFile(t, root, "regiond.env", edited)
	checkSettingsFile(t, root, "heartbeat.env", tmpl["heartbeat.env"])
	if left, _ := filepath.Glob(filepath.Join(root, "etc/regiond/*.regiond-new")); len(left) != 0 {
		t.Errorf("postinst left %v", left)
	}

	// A link left at the temp name (an interrupted run) is not followed:
	// its target keeps its bytes and mode, the file is the template.
	precious := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(precious, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "etc/regiond/heartbeat.env")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(precious, filepath.Join(root, "etc/regiond/heartbeat.env.regiond-new")); err != nil {
		t.Fatal(err)
	}
	runScript(t, root, bin, "postinst", "configure", "1.3.0")
	checkSettingsFile(t, root, "heartbeat.env", tmpl["heartbeat.env"])
	if b, err := os.ReadFile(precious); err != nil || string(b) != "keep\n" {
		t.Errorf("the link's target: %q %v; want it untouched", b, err)
	}
	if fi, err := os.Stat(precious); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the link's target's mode: %v %v; want 0644 as it was", fi, err)
	}
}

// postinst warns, and does not fail, about an etcd key under /etc/regiond/
// that its group or others can read (the front doors' user is in group
// regiond), and about nothing else.
func TestPostinstWarnsAboutReadableKeys(t *testing.T) {
	root, bin := scriptRoot(t), scriptBin(t, true)
	tls := filepath.Join(root, "etc/regiond/tls")
	if err := os.MkdirAll(tls, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{
		"node-key.pem": 0o640, "origin-key.pem": 0o400, "key.pem": 0o604, "node.pem": 0o644, "ca.pem": 0o644, "old-key.pem.bak": 0o644,
	} {
		p := filepath.Join(tls, name)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	// Keys named otherwise, or kept elsewhere, that the settings name (the
	// packaging review: only *key.pem under /etc/regiond was checked), and
	// one named only in a line commented out.
	for path, mode := range map[string]os.FileMode{
		"etc/regiond/tls/node.key": 0o644, "srv/keys/agent": 0o640, "srv/keys/origin": 0o604, "srv/keys/commented": 0o644,
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	for path, text := range map[string]string{
		"etc/regiond/regiond.env":             "#REGIOND_ARGS=\"--key=/srv/keys/commented\"\nREGIOND_ARGS=\"--endpoints=https://e:2379 --key /srv/keys/agent --listen=127.0.0.1:7420\"\n",
		"etc/regiond/heartbeat/fra-1a.env":    "REGIONCTL_KEY='/srv/keys/origin'\n",
		"etc/regiond/heartbeat/commented.env": "# REGIONCTL_KEY=/srv/keys/commented\n",
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := runScript(t, root, bin, "postinst", "configure", "1.3.0")
	for _, key := range []string{"/etc/regiond/tls/node-key.pem", "/etc/regiond/tls/key.pem", "/etc/regiond/tls/node.key", "/srv/keys/agent", "/srv/keys/origin"} {
		if !strings.Contains(out, "warning: "+key+" is readable by its group or by others (mode 6") ||
			!strings.Contains(out, "chmod 0400 '"+key+"'") {
			t.Errorf("postinst does not warn about %s:\n%s", key, out)
		}
	}
	if !strings.Contains(out, "join group regiond") {
		t.Errorf("the warning does not say why (group regiond):\n%s", out)
	}
	for _, name := range []string{"origin-key.pem", "node.pem", "ca.pem", "old-key.pem.bak", "commented"} {
		if strings.Contains(out, "/"+name) {
			t.Errorf("postinst warns about %s:\n%s", name, out)
		}
	}
	if strings.Contains(out, root) {
		t.Errorf("the warning names the files under DPKG_ROOT's path, not the node's:\n%s", out)
	}
}

// An upgrade restarts a running agent; when the restart fails, or the new
// agent is not running 2 s later, postinst says so on stderr, naming
// journalctl -u regiond, and the upgrade still succeeds. A first install
// restarts nothing, and an agent that was not running is not checked.
func TestPostinstWarnsOnFailedRestart(t *testing.T) {
	for _, c := range []struct {
		name       string
		args       []string
		tryRestart int
		states     []string
		warn       string // "" for none
		restarted  bool
	}{
		{"restarted", []string{"configure", "1.3.0"}, 0, []string{"active", "active"}, "", true},
		{"restart fails", []string{"configure", "1.3.0"}, 1, []string{"active", "failed"}, "its restart on the new binary failed", true},
		{"dies after start", []string{"configure", "1.3.0"}, 0, []string{"active", "activating"}, "not running 2 s after its start", true},
		{"crash loop before, still", []string{"configure", "1.3.0"}, 0, []string{"activating", "activating"}, "not running 2 s after its start", true},
		{"not running", []string{"configure", "1.3.0"}, 0, []string{"inactive"}, "", true},
		{"first install", []string{"configure", ""}, 0, []string{"inactive"}, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root, bin := scriptRoot(t), scriptBin(t, true)
			if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
				t.Fatal(err)
			}
			fakeSystemctl(t, bin, c.tryRestart, c.states...)
			out := runScript(t, root, bin, "postinst", c.args...)
			ran := strings.Join(calls(t, bin, true), "\n")
			if got := strings.Contains(ran, "systemctl try-restart regiond.service"); got != c.restarted {
				t.Errorf("try-restart run: %v, want %v; ran:\n%s", got, c.restarted, ran)
			}
			if c.warn == "" {
				// A first install says what comes next, no warning.
				if out != "" && (c.args[1] != "" || strings.Contains(out, "warning")) {
					t.Errorf("postinst printed %q, want nothing", out)
				}
				return
			}
			for _, want := range []string{"warning", c.warn, "journalctl -u regiond"} {
				if !strings.Contains(out, want) {
					t.Errorf("postinst printed %q; want it to say %q", out, want)
				}
			}
		})
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
// regiond and of every heartbeat instance, nothing else's), the runtime
// directory and the state directory (the snapshot's copy); remove keeps
// them all (the enablement is configuration; the copy serves after a
// reinstall).
func TestPostrmPurgeForgetsEnablement(t *testing.T) {
	root := t.TempDir()
	wants := filepath.Join(root, "etc", "systemd", "system", "multi-user.target.wants")
	run := filepath.Join(root, "run", "regiond")
	state := filepath.Join(root, "var", "lib", "regiond")
	for _, d := range []string{wants, run, state} {
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
	for _, d := range []string{run, state} {
		if err := os.WriteFile(filepath.Join(d, "table.json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := scriptBin(t, true)
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }

	runScript(t, root, bin, "postrm", "remove")
	for _, name := range ours {
		if !exists(filepath.Join(wants, name)) {
			t.Errorf("postrm remove dropped %s's enablement", name)
		}
	}
	if !exists(filepath.Join(state, "table.json")) {
		t.Error("postrm remove dropped the snapshot's copy")
	}
	runScript(t, root, bin, "postrm", "purge")
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
	if exists(state) {
		t.Error("postrm purge kept /var/lib/regiond")
	}
}

// postrm purge removes the settings files postinst made (no conffiles:
// dpkg does not) and what dpkg left of them, and /etc/regiond/ once empty;
// the administrator's own files there (a heartbeat instance's, the keys)
// stay, and so does the directory then. remove keeps everything.
func TestPostrmPurgeRemovesSettings(t *testing.T) {
	bin := scriptBin(t, true)
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	for _, own := range []string{"", "heartbeat/fra-1a.env", "tls/node-key.pem"} {
		root := scriptRoot(t)
		runScript(t, root, bin, "postinst", "configure", "")
		etc := filepath.Join(root, "etc/regiond")
		ours := []string{"regiond.env", "heartbeat.env", "regiond.env.dpkg-new", "heartbeat.env.dpkg-old"}
		for _, name := range append(ours[2:], own) {
			if name == "" {
				continue
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(etc, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(etc, name), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		runScript(t, root, bin, "postrm", "remove")
		for _, name := range ours {
			if !exists(filepath.Join(etc, name)) {
				t.Errorf("postrm remove removed /etc/regiond/%s", name)
			}
		}
		runScript(t, root, bin, "postrm", "purge")
		for _, name := range ours {
			if exists(filepath.Join(etc, name)) {
				t.Errorf("postrm purge kept /etc/regiond/%s", name)
			}
		}
		if own == "" && exists(etc) {
			t.Error("postrm purge kept the empty /etc/regiond")
		}
		if own != "" && !exists(filepath.Join(etc, own)) {
			t.Errorf("postrm purge removed the administrator's /etc/regiond/%s", own)
		}
	}
}

// The first install's message points at files the package ships (the
// packaging review: it named /usr/share/doc/regiond/operations.md, which
// is under docs/).
func TestPostinstMessageNamesShippedFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	_, pkg := installed(t)
	out := runScript(t, scriptRoot(t), scriptBin(t, false), "postinst", "configure", "")
	paths := regexp.MustCompile(`/usr/share/[^ ;)]+`).FindAllString(out, -1)
	if len(paths) == 0 {
		t.Fatalf("the first install's message names no documentation: %q", out)
	}
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join(pkg, p)); err != nil {
			t.Errorf("the first install's message names %s, which the package does not ship (%v):\n%s", p, err, out)
		}
	}
}

// withoutProgram returns a PATH directory holding links to every program
// of this machine's /usr/sbin, /usr/bin, /sbin and /bin but name, for
// a script run where name is not installed.
func withoutProgram(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	for _, sys := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		entries, _ := os.ReadDir(sys)
		for _, e := range entries {
			if e.Name() == name {
				continue
			}
			// The first one found wins, as in PATH.
			_ = os.Symlink(filepath.Join(sys, e.Name()), filepath.Join(dir, e.Name()))
		}
	}
	return dir
}

// The scripts start and stop the agent through deb-systemd-invoke, so that
// policy-rc.d is asked first (lintian: maintainer-script-calls-systemctl),
// and through systemctl where deb-systemd-invoke is missing; the heartbeat
// instances are stopped by systemctl's glob. With the real
// deb-systemd-invoke, a root's policy-rc.d that forbids it (exit 101)
// keeps the agent from being restarted.
func TestScriptsInvokeThroughPolicy(t *testing.T) {
	systemdRoot := func(t *testing.T) string {
		root := scriptRoot(t)
		if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
			t.Fatal(err)
		}
		return root
	}
	root, bin := systemdRoot(t), scriptBin(t, true)
	runScript(t, root, bin, "postinst", "configure", "1.3.0")
	runScript(t, root, bin, "prerm", "remove")
	ran := strings.Join(calls(t, bin, true), "\n") + "\n"
	for _, want := range []string{"deb-systemd-invoke try-restart regiond.service\n", "deb-systemd-invoke stop regiond.service\n",
		"systemctl stop regiond-heartbeat@*.service\n"} {
		if !strings.Contains(ran, want) {
			t.Errorf("with deb-systemd-invoke, the scripts did not run %q; ran:\n%s", want, ran)
		}
	}

	// Without deb-systemd-invoke: systemctl.
	root, bin = systemdRoot(t), scriptBin(t, true)
	if err := os.Remove(filepath.Join(bin, "deb-systemd-invoke")); err != nil {
		t.Fatal(err)
	}
	sys := withoutProgram(t, "deb-systemd-invoke")
	for _, script := range [][]string{{"postinst", "configure", "1.3.0"}, {"prerm", "remove"}} {
		cmd := exec.Command("sh", append([]string{filepath.Join("scripts", script[0])}, script[1:]...)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+sys, "DPKG_ROOT="+root)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v without deb-systemd-invoke: %v: %s", script, err, out)
		}
	}
	ran = strings.Join(calls(t, bin, true), "\n") + "\n"
	for _, want := range []string{"systemctl try-restart regiond.service\n", "systemctl stop regiond.service\n"} {
		if !strings.Contains(ran, want) || strings.Contains(ran, "deb-systemd-invoke") {
			t.Errorf("without deb-systemd-invoke, the scripts did not run %q; ran:\n%s", want, ran)
		}
	}

	// The real deb-systemd-invoke asks the root's policy-rc.d, which says no.
	testprog.Need(t, "deb-systemd-invoke", "apt-get install -y init-system-helpers")
	root, bin = systemdRoot(t), scriptBin(t, true)
	if err := os.Remove(filepath.Join(bin, "deb-systemd-invoke")); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(root, "usr/sbin/policy-rc.d")
	if err := os.MkdirAll(filepath.Dir(policy), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	runScript(t, root, bin, "postinst", "configure", "1.3.0")
	if ran := strings.Join(calls(t, bin, true), "\n"); strings.Contains(ran, "try-restart") {
		t.Errorf("policy-rc.d forbids it, and postinst restarted the agent; ran:\n%s", ran)
	}
}
