package main

// Gap tests of the packaging's mutation review: each guards a behaviour
// that a plausible edit of the maintainer scripts, the units, the settings
// templates or the build could break with every other test passing. Each
// doc comment names what it guards and the mutant it was written against.

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/testprog"
)

// TestGapPrermKeepsAgentOnUpgrade guards that prerm stops the agent and the
// heartbeats on remove only. On upgrade (and failed-upgrade, deconfigure)
// it must run nothing: postinst's try-restart restarts only a running
// agent, so a prerm that stopped it would leave every upgraded node without
// an agent (mutant: prerm's `[ "$1" = remove ]` dropped).
func TestGapPrermKeepsAgentOnUpgrade(t *testing.T) {
	for _, args := range [][]string{{"upgrade", "1.5.0"}, {"failed-upgrade", "1.3.0"}, {"deconfigure", "in-favour", "other", "1.0"}} {
		root, bin := scriptRoot(t), scriptBin(t, true)
		if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
			t.Fatal(err)
		}
		runScript(t, root, bin, "prerm", args...)
		if ran := calls(t, bin, true); len(ran) != 0 {
			t.Errorf("prerm %v ran %q, want nothing: the agent must stay up for postinst's try-restart", args, ran)
		}
	}
}

// TestGapPostinstFindsUserByExactName guards that postinst, under a
// DPKG_ROOT, looks for user and group regiond by their exact names: a root
// that has only regiond-hb (the heartbeats' own user operations.md
// suggests) still gets user regiond, with a group of its own (mutant: the
// grep of the root's /etc/passwd not anchored to "^regiond:").
func TestGapPostinstFindsUserByExactName(t *testing.T) {
	bin, root := scriptBin(t, false), scriptRoot(t)
	for name, text := range map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/sh\nregiond-hb:x:998:998::/nonexistent:/usr/sbin/nologin\n",
		"group":  "root:x:0:\nregiond-hb:x:998:\n",
	} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runScript(t, root, bin, "postinst", "configure", "")
	want := "useradd --prefix " + root + " --system --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin regiond"
	if got := strings.Join(calls(t, bin, false), "\n"); got != want {
		t.Errorf("with only regiond-hb in the root's accounts, postinst ran:\n%s\nwant:\n%s", got, want)
	}
}

// TestGapPostinstKeepsSettingsSymlink guards that a settings file the
// administrator made a symbolic link (to a file of their configuration
// management, not there yet) is left as it is by configure, not replaced
// by the template (mutant: install_settings' `[ -L "$dst" ]` dropped).
func TestGapPostinstKeepsSettingsSymlink(t *testing.T) {
	root, bin := scriptRoot(t), scriptBin(t, true)
	link := filepath.Join(root, "etc/regiond/regiond.env")
	target := "/srv/config/regiond.env" // dangling
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	runScript(t, root, bin, "postinst", "configure", "1.3.0")
	if got, err := os.Readlink(link); err != nil || got != target {
		t.Errorf("/etc/regiond/regiond.env after configure: link to %q (%v), want the administrator's link to %s kept", got, err, target)
	}
}

// TestGapFirstInstallMessageOnlyWhenSettingsMade guards that the first
// install's "installed, not started: set … in /etc/regiond/regiond.env"
// is printed only when postinst made that file: a node whose regiond.env
// was put there before the install (configuration management) is not told
// to set what it has (mutant: `first` set whatever the file).
func TestGapFirstInstallMessageOnlyWhenSettingsMade(t *testing.T) {
	root, bin := scriptRoot(t), scriptBin(t, true)
	seeded := "REGIOND_ARGS=\"--endpoints=https://etcd-1:2379\"\n"
	if err := os.WriteFile(filepath.Join(root, "etc/regiond/regiond.env"), []byte(seeded), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := runScript(t, root, bin, "postinst", "configure", ""); strings.Contains(out, "installed, not started") {
		t.Errorf("a first install over a regiond.env put there before printed %q", out)
	}
	checkSettingsFile(t, root, "regiond.env", seeded)
}

// TestGapPurgeRemovesEveryLeftover guards that postrm purge removes every
// leftover of the two settings files it names (postinst's interrupted
// temp file, each of dpkg's backups of a former conffile), so that
// /etc/regiond goes too when nothing of the administrator's is in it
// (mutants: ".dpkg-dist" or ".regiond-new" dropped from the list).
func TestGapPurgeRemovesEveryLeftover(t *testing.T) {
	root, bin := scriptRoot(t), scriptBin(t, true)
	etc := filepath.Join(root, "etc/regiond")
	for _, name := range []string{"regiond.env", "heartbeat.env"} {
		for _, suffix := range []string{"", ".regiond-new", ".dpkg-old", ".dpkg-new", ".dpkg-dist", ".dpkg-bak", ".dpkg-tmp"} {
			if err := os.WriteFile(filepath.Join(etc, name+suffix), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	runScript(t, root, bin, "postrm", "purge")
	if _, err := os.Lstat(etc); err == nil {
		left, _ := filepath.Glob(filepath.Join(etc, "*"))
		t.Errorf("postrm purge kept /etc/regiond, holding %v", left)
	}
}

// TestGapPostinstWaitsBeforeChecking guards the 2 s postinst waits after
// restarting a running agent before it checks that the new one runs: an
// agent that says READY=1 and then exits on a setting it refuses is active
// right after the restart and gone a moment later (mutant: `sleep 0`).
func TestGapPostinstWaitsBeforeChecking(t *testing.T) {
	// Waits out postinst's 2 s in a root and bin of its own, beside the
	// other parallel tests (the 2 s is a lower bound: load only adds).
	t.Parallel()
	root, bin := scriptRoot(t), scriptBin(t, true)
	if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	fakeSystemctl(t, bin, 0, "active", "active")
	start := time.Now()
	runScript(t, root, bin, "postinst", "configure", "1.3.0")
	if took := time.Since(start); took < 1900*time.Millisecond {
		t.Errorf("postinst checked the restarted agent %v after its start, want 2 s after", took)
	}
	if ran := strings.Join(calls(t, bin, true), "\n"); !strings.HasSuffix(ran, "try-restart regiond.service\nsystemctl is-active --quiet regiond.service") {
		t.Errorf("postinst ran:\n%s\nwant the check after the restart", ran)
	}
}

// TestGapUnitSettingsComplete guards the unit settings TestUnitSettings
// leaves out: the group (the socket's and /run/regiond's, which the front
// doors join), the [Install] section (without it `systemctl enable --now
// regiond`, the install's step, fails), the runtime directory kept across
// restarts (a restarted agent serves its snapshot), the stop timeout the
// agent's shutdown is sized for (agent.go's shutdownGrace: within 15 s),
// and the whole sandbox of both units (mutants: Group=nogroup,
// RuntimeDirectoryPreserve=no, TimeoutStopSec=1s, WantedBy= dropped,
// SystemCallFilter dropped, MemoryDenyWriteExecute=no,
// RestrictNamespaces=no).
func TestGapUnitSettingsComplete(t *testing.T) {
	sandbox := map[string]string{
		"Service.Group": "regiond", "Install.WantedBy": "multi-user.target",
		"Service.NoNewPrivileges": "yes", "Service.CapabilityBoundingSet": "", "Service.AmbientCapabilities": "",
		"Service.ProtectSystem": "strict", "Service.ProtectHome": "yes", "Service.PrivateTmp": "yes",
		"Service.PrivateDevices": "yes", "Service.ProtectKernelTunables": "yes", "Service.ProtectKernelModules": "yes",
		"Service.ProtectKernelLogs": "yes", "Service.ProtectControlGroups": "yes", "Service.ProtectClock": "yes",
		"Service.ProtectHostname": "yes", "Service.ProtectProc": "invisible",
		"Service.RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6", "Service.RestrictNamespaces": "yes",
		"Service.RestrictRealtime": "yes", "Service.RestrictSUIDSGID": "yes", "Service.LockPersonality": "yes",
		"Service.MemoryDenyWriteExecute": "yes", "Service.SystemCallArchitectures": "native",
		"Service.SystemCallFilter": "@system-service", "Service.SystemCallErrorNumber": "EPERM",
	}
	agentOnly := map[string]string{"Service.RuntimeDirectoryPreserve": "yes", "Service.TimeoutStopSec": "15s"}
	for unit, extra := range map[string]map[string]string{"regiond.service": agentOnly, "regiond-heartbeat@.service": nil} {
		got := unitSettings(t, filepath.Join("systemd", unit))
		for _, want := range []map[string]string{sandbox, extra} {
			for k, v := range want {
				if g, ok := got[k]; !ok || g != v {
					t.Errorf("%s: %s = %q (set: %v), want %q", unit, k, g, ok, v)
				}
			}
		}
	}
}

// TestGapUnitsEnableAndPurgeForgets guards, with the real systemctl on a
// root of its own, that both units can be enabled as operations.md says
// (`systemctl enable --now regiond`, `systemctl enable
// regiond-heartbeat@fra-1a`, and an instance tied to the origin by a
// drop-in's WantedBy=nginx.service), and that postrm purge removes exactly
// the links systemctl made (mutants: the [Install] WantedBy of either unit
// dropped).
func TestGapUnitsEnableAndPurgeForgets(t *testing.T) {
	systemctl := testprog.Need(t, "systemctl", "apt-get install -y systemd")
	root := scriptRoot(t)
	units := filepath.Join(root, "usr/lib/systemd/system")
	dropIn := filepath.Join(root, "etc/systemd/system/regiond-heartbeat@fra-1b.service.d")
	for _, d := range []string{units, dropIn} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"regiond.service", "regiond-heartbeat@.service"} {
		b, err := os.ReadFile(filepath.Join("systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(units, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for path, text := range map[string]string{
		filepath.Join(units, "nginx.service"):     "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
		filepath.Join(dropIn, "override.conf"):    "[Unit]\nBindsTo=nginx.service\nAfter=nginx.service\n[Install]\nWantedBy=nginx.service\n",
		filepath.Join(units, "multi-user.target"): "[Unit]\nDescription=stand-in\n",
	} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(systemctl, "--root="+root, "enable", "nginx.service", "regiond.service",
		"regiond-heartbeat@fra-1a.service", "regiond-heartbeat@fra-1b.service").CombinedOutput(); err != nil {
		t.Fatalf("systemctl --root enable: %v\n%s", err, out)
	}
	wants := filepath.Join(root, "etc/systemd/system")
	ours := []string{"multi-user.target.wants/regiond.service", "multi-user.target.wants/regiond-heartbeat@fra-1a.service",
		"nginx.service.wants/regiond-heartbeat@fra-1b.service"}
	for _, l := range ours {
		if _, err := os.Lstat(filepath.Join(wants, l)); err != nil {
			t.Errorf("systemctl enable made no %s: %v", l, err)
		}
	}
	runScript(t, root, scriptBin(t, true), "postrm", "purge")
	for _, l := range ours {
		if _, err := os.Lstat(filepath.Join(wants, l)); err == nil {
			t.Errorf("postrm purge kept %s", l)
		}
	}
	if _, err := os.Lstat(filepath.Join(wants, "multi-user.target.wants/nginx.service")); err != nil {
		t.Errorf("postrm purge removed nginx's enablement: %v", err)
	}
}

// helpFlags returns the long flags a --help output lists.
func helpFlags(help string) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(help, -1) {
		out[m[1]] = true
	}
	return out
}

// TestGapSettingsTemplatesMatchBinaries guards the settings templates
// against drift from the packaged binaries and the docs: every flag
// regiond.env sets or documents (its REGIOND_ARGS, active and commented,
// and its "# --flag" list) is one of regiond's, it names no variable but
// REGIOND_ARGS (the unit's) and REGIOND_PASSWORD (the binary's); every
// variable heartbeat.env sets or shows is a flag's REGIONCTL_<FLAG> of
// regionctl heartbeat, REGIONCTL_PASSWORD or one of the heartbeat unit's
// command line; REGIONCTL_TTL is regionctl's default; the --listen of
// REGIOND_ARGS is what operations.md's install step curls (mutants: a
// flag typo in REGIOND_ARGS, --tls-key in the TLS example,
// #REGIONCTL_PASSWORD= in regiond.env, REGIONCTL_LEASE_TTL,
// REGIONCTL_TTL=90s).
func TestGapSettingsTemplatesMatchBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	_, root := installed(t)
	help := func(bin string, args ...string) string {
		out, err := exec.Command(filepath.Join(root, "usr/bin", bin), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
		}
		return string(out)
	}
	regiondHelp := help("regiond", "--help")
	regiondFlags := helpFlags(regiondHelp)
	hbHelp := help("regionctl", "heartbeat", "--help")
	hbFlags := helpFlags(hbHelp)
	agentUnit := unitSettings(t, "systemd/regiond.service")["Service.ExecStart"]
	hbUnit := unitSettings(t, "systemd/regiond-heartbeat@.service")["Service.ExecStart"]

	env, err := os.ReadFile("etc/regiond.env")
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	args := regexp.MustCompile(`(?m)^#?REGIOND_ARGS="([^"]*)"$`).FindAllStringSubmatch(string(env), -1)
	if len(args) < 2 {
		t.Fatalf("regiond.env: %d REGIOND_ARGS lines, want the setting and its TLS example", len(args))
	}
	for _, m := range args {
		for _, a := range strings.Fields(m[1]) {
			if !strings.HasPrefix(a, "--") {
				t.Errorf("regiond.env: REGIOND_ARGS word %q is not a --flag", a)
				continue
			}
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			flags = append(flags, name)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^# (--[a-z][a-z0-9/-]*)\s`).FindAllStringSubmatch(string(env), -1) {
		for _, f := range strings.Split(m[1], "/") {
			flags = append(flags, strings.TrimPrefix(f, "--"))
		}
	}
	for _, f := range flags {
		if !regiondFlags[f] {
			t.Errorf("regiond.env names --%s, which regiond --help does not list", f)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^#?\s*([A-Z][A-Z0-9_]*)=`).FindAllStringSubmatch(string(env), -1) {
		switch v := m[1]; {
		case v == "REGIOND_ARGS" && strings.Contains(agentUnit, "$"+v):
		case v == "REGIOND_PASSWORD" && strings.Contains(regiondHelp, "$"+v):
		default:
			t.Errorf("regiond.env sets %s, which neither regiond.service's command line nor regiond reads", v)
		}
	}
	listen := regexp.MustCompile(`(?m)^REGIOND_ARGS=".*--listen=(\S+?)["\s]`).FindStringSubmatch(string(env))
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if listen == nil || !regexp.MustCompile(`[ ']`+regexp.QuoteMeta(listen[1])+`/readyz`).Match(ops) {
		t.Errorf("regiond.env's --listen %v is not the address operations.md's install step curls", listen)
	}

	hb, err := os.ReadFile("etc/heartbeat.env")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, m := range regexp.MustCompile(`(?m)^#?\s*([A-Z][A-Z0-9_]*)=`).FindAllStringSubmatch(string(hb), -1) {
		seen++
		v := m[1]
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(v, "REGIONCTL_"), "_", "-"))
		switch {
		case strings.HasPrefix(v, "REGIONCTL_") && hbFlags[flag]:
		case v == "REGIONCTL_PASSWORD" && strings.Contains(hbHelp, v):
		case strings.Contains(hbUnit, "$"+v) || strings.Contains(hbUnit, "${"+v+"}"):
		default:
			t.Errorf("heartbeat.env names %s: no flag of regionctl heartbeat, and not in the unit's command line", v)
		}
	}
	if seen < 5 {
		t.Errorf("heartbeat.env: %d variables found, want its settings", seen)
	}
	ttl := regexp.MustCompile(`(?m)^REGIONCTL_TTL=(\S+)$`).FindStringSubmatch(string(hb))
	def := regexp.MustCompile(`(?m)^\s+--ttl duration .*\(default (\S+)\)$`).FindStringSubmatch(hbHelp)
	if ttl == nil || def == nil {
		t.Fatalf("no REGIONCTL_TTL in heartbeat.env (%v), or no --ttl default in regionctl heartbeat --help (%v)", ttl, def)
	}
	if ttl[1] != def[1] {
		t.Errorf("heartbeat.env's REGIONCTL_TTL=%s, regionctl heartbeat's --ttl default %s: want them equal (operations.md: default 10 s)", ttl[1], def[1])
	}
}

// TestGapPackageFiles guards what the other tests of the built package
// leave out: its control archive holds the three maintainer scripts as in
// scripts/, executable (a package without prerm would leave the agent
// running a deleted binary on removal); the binaries are static, as the
// lintian overrides say and the package's lack of a libc dependency needs
// (with a C compiler, a build without CGO_ENABLED=0 links libc
// dynamically); the .deb is readable by all (apt's download user _apt)
// (mutants: PreRemove dropped, CGO_ENABLED=0 dropped, the .deb 0600).
func TestGapPackageFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	res, root := installed(t)
	ctl := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-e", res.Path, ctl).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -e: %v: %s", err, out)
	}
	for _, name := range []string{"postinst", "prerm", "postrm"} {
		want, err := os.ReadFile(filepath.Join("scripts", name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(ctl, name)
		got, err := os.ReadFile(p)
		if err != nil || string(got) != string(want) {
			t.Errorf("control archive's %s: %v; want scripts/%s as it is", name, err, name)
			continue
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o111 != 0o111 {
			t.Errorf("control archive's %s is not executable: %v %v", name, fi.Mode(), err)
		}
	}
	for _, bin := range []string{"regiond", "regionctl"} {
		f, err := elf.Open(filepath.Join(root, "usr/bin", bin))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("/usr/bin/%s has a program interpreter: linked dynamically", bin)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) != 0 {
			t.Errorf("/usr/bin/%s needs %v", bin, libs)
		}
		f.Close()
	}
	if fi, err := os.Stat(res.Path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode %v (%v), want 0644", res.Path, fi.Mode(), err)
	}
}

// TestGapDebianArchAndPreReleases guards the names of the Debian
// architectures (armhf, as GOARM=7 builds it, not armel) and the
// pre-release forms operations.md's table lists that TestDebianVersion
// does not try (mutants: "arm" mapped to "armel", "pre" dropped from the
// pre-release forms).
func TestGapDebianArchAndPreReleases(t *testing.T) {
	for goarch, want := range map[string]string{"amd64": "amd64", "arm64": "arm64", "386": "i386", "arm": "armhf", "ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64"} {
		if got := debianArch[goarch]; got != want {
			t.Errorf("debianArch[%s] = %q, want %q", goarch, got, want)
		}
	}
	for in, want := range map[string]string{"v1.2.0-pre1": "1.2.0~pre1", "v1.2.0-ALPHA.1": "1.2.0~alpha.1", "v1.2.0-beta": "1.2.0~beta"} {
		if got, err := debianVersion(in, time.Time{}, false); err != nil || got != want {
			t.Errorf("debianVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
