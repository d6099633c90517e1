package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/testprog"
)

func TestDebianVersion(t *testing.T) {
	ct := time.Date(2026, 12, 5, 7, 15, 0, 0, time.UTC)
	for in, want := range map[string]string{
		"v1.2.0":                   "1.2.0",
		"1.2.0":                    "1.2.0",
		"v1.2.0-rc1":               "1.2.0~rc1",
		"v1.2.0-3-gabc1234":        "1.2.0+3.gabc1234",
		"v1.2.0-3-gabc1234-dirty":  "1.2.0+3.gabc1234.dirty",
		"v1.2.0-rc1-3-gabc1234":    "1.2.0~rc1+3.gabc1234",
		"v1.2.0-dirty":             "1.2.0+dirty",
		"308b6cd":                  "0.0.0+20261205071500.g308b6cd",
		"308b6cd-dirty":            "0.0.0+20261205071500.g308b6cd.dirty",
		"dev":                      "0.0.0+dev",
		"v0.0.0-20260101-abcdef+x": "0.0.0+v0.0.0.20260101.abcdef.x",
	} {
		if got := debianVersion(in, ct); got != want {
			t.Errorf("debianVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// Releases sort as Debian sorts them: a release candidate before the
// release, commits after a tag after it.
func TestDebianVersionsSort(t *testing.T) {
	dpkg := testprog.Need(t, "dpkg", "apt-get install -y dpkg")
	// Untagged commits sort by their commit time, not their hashes
	// (fff… before 000…, committed later).
	t0 := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)
	type build struct {
		describe string
		ct       time.Time
	}
	order := []build{{"fff0123", t0}, {"0001234", t0.Add(time.Minute)}, {"v1.2.0-rc1", t0}, {"v1.2.0-rc1-3-gabc1234", t0},
		{"v1.2.0", t0}, {"v1.2.0-3-gabc1234", t0}, {"v1.2.0-3-gabc1234-dirty", t0}, {"v1.10.0", t0}}
	for i := 1; i < len(order); i++ {
		a, b := debianVersion(order[i-1].describe, order[i-1].ct), debianVersion(order[i].describe, order[i].ct)
		if err := exec.Command(dpkg, "--compare-versions", a, "lt", b).Run(); err != nil {
			t.Errorf("dpkg --compare-versions %s lt %s (from %s, %s): %v", a, b, order[i-1].describe, order[i].describe, err)
		}
	}
}

// The default version is git describe's, as the binaries will show it.
func TestDescribeIsGits(t *testing.T) {
	git := testprog.Need(t, "git", "apt-get install -y git")
	repo, err := repoRoot(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	want, err := exec.Command(git, "-C", repo, "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): describe falls back to the build info", err)
	}
	if got := describe(context.Background(), repo); got != strings.TrimSpace(string(want)) {
		t.Fatalf("describe = %q, want git describe's %q", got, strings.TrimSpace(string(want)))
	}
}

// built is the package built once per test process, and the root it was
// extracted into.
var built struct {
	once sync.Once
	res  *Result
	root string
	err  error
}

// testVersion is stamped into the test package, so the binaries' output
// can be compared with it.
const testVersion = "v1.4.0-2-gabcdef0"

// installed builds the package (once) and extracts it into a temporary
// root with dpkg-deb, as dpkg would install its files.
func installed(t *testing.T) (*Result, string) {
	t.Helper()
	dpkgDeb := testprog.Need(t, "dpkg-deb", "apt-get install -y dpkg")
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "regiond-package-test-")
		if err == nil {
			err = os.Chmod(dir, 0o755) // the packaged binaries run as another user too
		}
		if err != nil {
			built.err = err
			return
		}
		built.res, built.err = Build(context.Background(), options{out: filepath.Join(dir, "dist"), arch: "amd64", version: testVersion})
		if built.err != nil {
			return
		}
		built.root = filepath.Join(dir, "root")
		out, err := exec.Command(dpkgDeb, "-x", built.res.Path, built.root).CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("dpkg-deb -x %s: %w: %s", built.res.Path, err, out)
		}
	})
	if built.err != nil {
		t.Fatalf("build and extract the package: %v", built.err)
	}
	return built.res, built.root
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.root != "" {
		os.RemoveAll(filepath.Dir(built.root))
	}
	os.Exit(code)
}

func TestPackageName(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	res, _ := installed(t)
	if got, want := filepath.Base(res.Path), "regiond_1.4.0+2.gabcdef0_amd64.deb"; got != want {
		t.Fatalf("package file %s, want %s", got, want)
	}
	out, err := exec.Command("dpkg-deb", "-f", res.Path, "Package", "Version", "Architecture", "Depends").Output()
	if err != nil {
		t.Fatalf("dpkg-deb -f: %v", err)
	}
	for _, want := range []string{"Package: regiond", "Version: 1.4.0+2.gabcdef0", "Architecture: amd64", "Depends: adduser"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("control fields lack %q:\n%s", want, out)
		}
	}
	conf := debMember(t, res.Path, "conffiles")
	if conf != "/etc/regiond/heartbeat.env\n/etc/regiond/regiond.env\n" {
		t.Errorf("conffiles = %q, want both settings files", conf)
	}
}

// debMember returns a file of the package's control archive.
func debMember(t *testing.T, deb, name string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-e", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -e: %v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("control member %s: %v", name, err)
	}
	return string(b)
}

func TestPackageLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	_, root := installed(t)
	for path, mode := range map[string]os.FileMode{
		"usr/bin/regiond":                                                        0o755,
		"usr/bin/regionctl":                                                      0o755,
		"usr/lib/systemd/system/regiond.service":                                 0o644,
		"usr/lib/systemd/system/regiond-heartbeat@.service":                      0o644,
		"etc/regiond":                                                            0o755 | os.ModeDir,
		"etc/regiond/heartbeat":                                                  0o755 | os.ModeDir,
		"etc/regiond/regiond.env":                                                0o600,
		"etc/regiond/heartbeat.env":                                              0o600,
		"usr/share/bash-completion/completions/regiond":                          0o644,
		"usr/share/bash-completion/completions/regionctl":                        0o644,
		"usr/share/zsh/vendor-completions/_regiond":                              0o644,
		"usr/share/zsh/vendor-completions/_regionctl":                            0o644,
		"usr/share/fish/vendor_completions.d/regiond.fish":                       0o644,
		"usr/share/fish/vendor_completions.d/regionctl.fish":                     0o644,
		"usr/share/man/man1/regiond.1.gz":                                        0o644,
		"usr/share/man/man1/regionctl.1.gz":                                      0o644,
		"usr/share/man/man1/regionctl-heartbeat.1.gz":                            0o644,
		"usr/share/man/man1/regionctl-pool-drain.1.gz":                           0o644,
		"usr/share/doc/regiond/examples/monitoring/prometheus/regiond.rules.yml": 0o644,
		"usr/share/doc/regiond/examples/monitoring/grafana/regiond.json":         0o644,
		"usr/share/doc/regiond/README.md":                                        0o644,
		"usr/share/doc/regiond/docs/README.md":                                   0o644,
		"usr/share/doc/regiond/docs/agent.md":                                    0o644,
		"usr/share/doc/regiond/docs/snapshot-index.md":                           0o644,
	} {
		fi, err := os.Lstat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("/%s: %v", path, err)
			continue
		}
		if fi.Mode() != mode {
			t.Errorf("/%s: mode %v, want %v", path, fi.Mode(), mode)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && (st.Uid != 0 || st.Gid != 0) {
			t.Errorf("/%s: owned by %d:%d, want root:root", path, st.Uid, st.Gid)
		}
	}
	env, err := os.ReadFile(filepath.Join(root, "etc/regiond/regiond.env"))
	if err != nil || !strings.Contains(string(env), "\nREGIOND_ARGS=") || !strings.Contains(string(env), "# ") {
		t.Errorf("regiond.env lacks a commented REGIOND_ARGS setting (%v):\n%s", err, env)
	}
}

// The man pages and completions are the binaries' own (cobra), not stale
// copies: each names the program and its verbs.
func TestPackageDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	_, root := installed(t)
	page := gunzip(t, filepath.Join(root, "usr/share/man/man1/regionctl-pool-drain.1.gz"))
	for _, want := range []string{".TH \"REGIONCTL-POOL-DRAIN\" \"1\"", `\fB--wait-converged\fP`, "regionctl " + testVersion} {
		if !strings.Contains(page, want) {
			t.Errorf("regionctl-pool-drain(1) lacks %q", want)
		}
	}
	if page := gunzip(t, filepath.Join(root, "usr/share/man/man1/regiond.1.gz")); !strings.Contains(page, `\fB--max-blocking-queries\fP`) {
		t.Errorf("regiond(1) does not document --max-blocking-queries")
	}
	for path, want := range map[string]string{
		"usr/share/bash-completion/completions/regionctl":    "__start_regionctl",
		"usr/share/zsh/vendor-completions/_regionctl":        "#compdef regionctl",
		"usr/share/fish/vendor_completions.d/regionctl.fish": "complete -c regionctl",
		"usr/share/bash-completion/completions/regiond":      "__start_regiond",
	} {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("/%s lacks %q (%v)", path, want, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "usr/share/man/man1/regionctl-__gendocs.1.gz")); err == nil {
		t.Error("the hidden docs verb has a man page")
	}
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b)
}

// The packaged binaries run and report the stamped version; regiond is the
// production build (no embedded etcd) and has no docs verb.
func TestPackagedBinariesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	res, root := installed(t)
	run := func(bin string, args ...string) (string, error) {
		var out bytes.Buffer
		cmd := exec.Command(filepath.Join(root, "usr/bin", bin), args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	if out, err := run("regiond", "--version"); err != nil || out != "regiond "+testVersion+"\n" {
		t.Errorf("regiond --version = %q, %v; want %q", out, err, "regiond "+testVersion)
	}
	if out, err := run("regionctl", "version"); err != nil || !strings.HasPrefix(out, "regionctl "+testVersion+" (go") {
		t.Errorf("regionctl version = %q, %v; want it to start with %q", out, err, "regionctl "+testVersion)
	}
	out, err := run("regiond", "dev")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(out, "-tags nodev") {
		t.Errorf("regiond dev in the package: %q, %v; want exit 2 naming -tags nodev (production build)", out, err)
	}
	if out, err := run("regionctl", "__gendocs", t.TempDir()); err == nil {
		t.Errorf("regionctl __gendocs ran in the production binary: %q", out)
	}
	t.Logf("packaged binaries: regiond %d bytes, regionctl %d bytes", res.Sizes["regiond"], res.Sizes["regionctl"])
}
