package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/regiond/regiond/internal/testprog"
)

// systemdAnalyze returns systemd-analyze when it can verify units here
// (it needs no running systemd, but some containers lack it or break it).
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	sa := testprog.Need(t, "systemd-analyze", "apt-get install -y systemd")
	if out, err := exec.Command(sa, "--version").CombinedOutput(); err != nil {
		testprog.Missing(t, "systemd-analyze does not run here ("+err.Error()+": "+strings.TrimSpace(string(out))+")", "apt-get install -y systemd")
	}
	return sa
}

// verifyRoot prepares root for `systemd-analyze verify --root`: the
// system's own units (targets, slices) copied beside the package's, so
// that the package's units are checked against its own binaries and man
// pages and the targets they name exist.
func verifyRoot(t *testing.T, root string) {
	t.Helper()
	dst := filepath.Join(root, "usr/lib/systemd/system")
	for _, src := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if _, err := os.Stat(filepath.Join(src, "sysinit.target")); err != nil {
			continue
		}
		// cp -n keeps the package's units; system units are a few hundred small files.
		if out, err := exec.Command("cp", "-rn", src+"/.", dst+"/").CombinedOutput(); err != nil {
			t.Fatalf("copy the system units into %s: %v: %s", dst, err, out)
		}
		return
	}
	testprog.Missing(t, "no systemd units (sysinit.target) on this machine for systemd-analyze verify", "apt-get install -y systemd")
}

// verify runs systemd-analyze verify on units inside root and returns its
// output; man pages are looked up in root's.
func verify(t *testing.T, sa, root string, units ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(sa, append([]string{"verify", "--root=" + root}, units...)...)
	cmd.Env = append(os.Environ(), "MANPATH="+filepath.Join(root, "usr/share/man"), "SYSTEMD_LOG_COLOR=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// systemdVersion returns the version systemd-analyze reports (252 for
// "systemd 252 (252.39-1~deb12u2)").
func systemdVersion(t *testing.T, sa string) int {
	t.Helper()
	out, err := exec.Command(sa, "--version").Output()
	if err != nil {
		t.Fatalf("systemd-analyze --version: %v", err)
	}
	var v int
	if _, err := fmt.Sscanf(string(out), "systemd %d", &v); err != nil {
		t.Fatalf("systemd-analyze --version: %q: %v", out, err)
	}
	return v
}

// newerKeys are the units' settings that systemd before 254 does not know
// (the growing restart delay): it warns on them and ignores them.
var newerKeys = []string{"RestartSteps", "RestartMaxDelaySec"}

// unverified returns the lines of systemd-analyze verify's output other
// than the warnings an older systemd (before 254) gives on newerKeys.
func unverified(out string, version int) string {
	var rest []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		known := false
		for _, k := range newerKeys {
			known = known || version < 254 && strings.HasSuffix(line, ": Unknown key '"+k+"' in section [Service], ignoring.")
		}
		if line != "" && !known {
			rest = append(rest, line)
		}
	}
	return strings.Join(rest, "\n")
}

// The packaged units pass systemd-analyze verify with no warning at all,
// against the packaged binaries and man pages — but for the growing
// restart delay's settings on a systemd older than 254, which warns on
// them and ignores them; a broken copy does not, so the check is live
// here.
func TestUnitsVerify(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	sa := systemdAnalyze(t)
	version := systemdVersion(t, sa)
	_, root := installed(t)
	verifyRoot(t, root)
	for _, unit := range []string{"/usr/lib/systemd/system/regiond.service", "regiond-heartbeat@fra-1a.service"} {
		arg := unit
		if strings.HasPrefix(unit, "/") {
			arg = filepath.Join(root, unit)
		}
		if out, err := verify(t, sa, root, arg); err != nil || unverified(out, version) != "" {
			t.Errorf("systemd-analyze verify %s (systemd %d): %v\n%s", unit, version, err, out)
		}
	}
	unitDir := filepath.Join(root, "usr/lib/systemd/system")
	good, err := os.ReadFile(filepath.Join(unitDir, "regiond.service"))
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(good), "ExecStart=/usr/bin/regiond ", "ExecStart=/usr/bin/regiond-missing ", 1)
	bad = strings.Replace(bad, "RestrictAddressFamilies=AF_UNIX", "RestrictAddressFamilies=AF_BOGUS AF_UNIX", 1)
	if err := os.WriteFile(filepath.Join(unitDir, "regiond-broken.service"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := verify(t, sa, root, filepath.Join(unitDir, "regiond-broken.service"))
	if err == nil || !strings.Contains(out, "regiond-missing") || !strings.Contains(out, "AF_BOGUS") {
		t.Errorf("systemd-analyze verify of a broken unit: %v\n%s\nwant a failure naming the missing binary and the bad address family", err, out)
	}
}

// unitSettings parses a unit file into its settings, by "Section.Key"
// (repeated keys joined by newlines).
func unitSettings(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, section := map[string]string{}, ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, _ := strings.Cut(line, "=")
			k = section + "." + k
			if prev, ok := out[k]; ok {
				v = prev + "\n" + v
			}
			out[k] = v
		}
	}
	return out
}

// The units carry the settings the agent and the operators rely on: the
// service user, the runtime directory the agent accepts for its socket and
// snapshot (its own, 0755: not writable by group or others), the
// hardening, restarts with a growing delay (of every exit status), a
// start limit for the agent and none for the heartbeat, and the settings
// files.
func TestUnitSettings(t *testing.T) {
	hardening := map[string]string{
		"Service.NoNewPrivileges": "yes", "Service.ProtectSystem": "strict", "Service.ProtectHome": "yes",
		"Service.PrivateTmp": "yes", "Service.CapabilityBoundingSet": "",
		"Service.RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
		"Service.Restart":                 "always", "Service.RestartSec": "2s", "Service.User": "regiond",
		"Service.RestartSteps": "5", "Service.RestartMaxDelaySec": "60s",
		"Service.RemoveIPC": "yes", "Service.PrivateIPC": "yes", "Service.PrivateMounts": "yes",
	}
	agent := unitSettings(t, "systemd/regiond.service")
	want := map[string]string{
		"Service.RuntimeDirectory": "regiond", "Service.RuntimeDirectoryMode": "0755",
		"Service.StateDirectory": "regiond", "Service.StateDirectoryMode": "0700",
		"Service.WatchdogSec":     "30s", // the agent pings every third of it
		"Service.EnvironmentFile": "/etc/regiond/regiond.env",
		"Service.ExecStart":       "/usr/bin/regiond --socket=/run/regiond/regiond.sock --snapshot=/run/regiond/table.json --snapshot-copy=/var/lib/regiond/table.json $REGIOND_ARGS",
		// A crash loop fails the unit and RegiondDown fires (the agent
		// retries etcd itself: a restart is a crash or a bad setting).
		"Unit.StartLimitIntervalSec": "300", "Unit.StartLimitBurst": "10",
	}
	hb := unitSettings(t, "systemd/regiond-heartbeat@.service")
	wantHB := map[string]string{
		"Service.ExecStart":       "/usr/bin/regionctl heartbeat ${REGIOND_POOL} --instance=%i $REGIONCTL_ARGS",
		"Service.KillSignal":      "SIGTERM",
		"Service.EnvironmentFile": "/etc/regiond/heartbeat.env\n/etc/regiond/heartbeat/%i.env",
		// No start limit: an exit 1 that lasts (a pool not created yet,
		// the key held under another lease) must not fail the unit for
		// good, leaving the pool without this instance.
		"Unit.StartLimitIntervalSec": "0",
		// The host's /dev/shm, writable to every local user, is closed:
		// PrivateDevices and ProtectSystem=strict leave it writable.
		"Service.InaccessiblePaths": "-/dev/shm",
	}
	// Not the agent's: a node whose REGIOND_ARGS put --snapshot under
	// /dev/shm (the readers' default) would not start after an upgrade
	// (the diff review); operations.md says how to close it by hand.
	if v, ok := agent["Service.InaccessiblePaths"]; ok {
		t.Errorf("regiond.service: InaccessiblePaths=%s: an agent with --snapshot under /dev/shm would not start after the upgrade", v)
	}
	for name, c := range map[string]struct{ got, want map[string]string }{
		"regiond.service": {agent, want}, "regiond-heartbeat@.service": {hb, wantHB}} {
		// A Go panic exits 2, as a usage error does: no exit status may
		// keep a crashed agent or heartbeat down.
		if v, ok := c.got["Service.RestartPreventExitStatus"]; ok {
			t.Errorf("%s: RestartPreventExitStatus=%s: a panic (exit 2) would not be restarted", name, v)
		}
		for _, w := range []map[string]string{hardening, c.want} {
			for k, v := range w {
				if got, ok := c.got[k]; !ok || got != v {
					t.Errorf("%s: %s = %q (set: %v), want %q", name, k, got, ok, v)
				}
			}
		}
	}
}
