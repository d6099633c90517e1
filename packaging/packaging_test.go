package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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
		"v1.2.0":                  "1.2.0",
		"1.2.0":                   "1.2.0",
		"v1.2.0-rc1":              "1.2.0~rc1",
		"v1.2.0-RC1":              "1.2.0~rc1",
		"v1.2.0-Beta.2":           "1.2.0~beta.2",
		"v1.2.0-dev":              "1.2.0~dev",
		"v1.2.0-3-gabc1234":       "1.2.0+3.gabc1234",
		"v1.2.0-3-gabc1234-dirty": "1.2.0+3.gabc1234.dirty",
		"v1.2.0-rc1-3-gabc1234":   "1.2.0~rc1+3.gabc1234",
		"v1.2.0-dirty":            "1.2.0+0.dirty",
		"v1.2.0-rc1-dirty":        "1.2.0~rc1+0.dirty",
		"308b6cd":                 "0.0.0+20261205071500.g308b6cd",
		"308b6cd-dirty":           "0.0.0+20261205071500.g308b6cd.dirty",
	} {
		if got, err := debianVersion(in, ct, true); err != nil || got != want {
			t.Errorf("debianVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// What would sort wrongly is refused, not put under 0.0.0+ (below
	// every 1.x): a Debian-style revision, a made-up or foreign version, a
	// letter in the release number, a commit whose time is unknown.
	for _, in := range []string{"1.2.0-1", "dev", "", "v0.0.0-20260101120000-abcdef123456", "release-1.2",
		"1.2.0rc1", "v1.2.0-foo", "v1.2.0-rc-1", "v1.2.0-3-gabc1234-dirty-x"} {
		if got, err := debianVersion(in, ct, true); err == nil {
			t.Errorf("debianVersion(%q) = %q, want an error", in, got)
		} else if !strings.Contains(err.Error(), "v1.2.0-rc1") {
			t.Errorf("debianVersion(%q): %v; want the error to name the forms accepted", in, err)
		}
	}
	if got, err := debianVersion("308b6cd", time.Time{}, false); err == nil {
		t.Errorf("debianVersion of a commit without its commit time = %q, want an error", got)
	}
}

// TestVersionMismatch: -version on a tree git describes otherwise is
// warned about, a dirty tree stamped clean by name (the packaging review).
func TestVersionMismatch(t *testing.T) {
	for _, tc := range []struct{ given, described, want string }{
		{"v1.2.0", "v1.2.0", ""},
		{"1.2.0", "v1.2.0", ""},
		{"v1.2.0-dirty", "v1.2.0-dirty", ""},
		{"v1.2.0", "v1.2.0-dirty", "uncommitted changes"},
		{"v0.1.0", "4f2b67f-dirty", "uncommitted changes"},
		{"v1.3.0", "v1.2.0-3-gabc1234", "differs from what git describes"},
	} {
		if got := versionMismatch(tc.given, tc.described); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("versionMismatch(%q, %q) = %q, want %q", tc.given, tc.described, got, tc.want)
		}
	}
}

// Releases sort as Debian sorts them: a pre-release (any case, dev too)
// before the release and after the releases before it, a dirty tree at a
// tag after the tag and before the commits after it, commits after a tag
// after it. Checked by dpkg itself.
func TestDebianVersionsSort(t *testing.T) {
	dpkg := testprog.Need(t, "dpkg", "apt-get install -y dpkg")
	// Untagged commits sort by their commit time, not their hashes
	// (fff… before 000…, committed later).
	t0 := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)
	type build struct {
		describe string
		ct       time.Time
	}
	order := []build{{"fff0123", t0}, {"0001234", t0.Add(time.Minute)}, {"v1.1.0", t0}, {"v1.1.0-7-g1234567", t0},
		{"v1.2.0-dev", t0}, {"v1.2.0-RC1", t0}, {"v1.2.0-rc1-3-gabc1234", t0}, {"v1.2.0-RC2", t0},
		{"v1.2.0", t0}, {"v1.2.0-dirty", t0}, {"v1.2.0-3-gabc1234", t0}, {"v1.2.0-3-gabc1234-dirty", t0},
		{"v1.2.0-4-gdef5678", t0}, {"v1.10.0", t0}}
	for i := 1; i < len(order); i++ {
		a, err := debianVersion(order[i-1].describe, order[i-1].ct, true)
		if err != nil {
			t.Fatalf("debianVersion(%q): %v", order[i-1].describe, err)
		}
		b, err := debianVersion(order[i].describe, order[i].ct, true)
		if err != nil {
			t.Fatalf("debianVersion(%q): %v", order[i].describe, err)
		}
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
		t.Skipf("not a git checkout (%v): TestDescribeFails covers it", err)
	}
	if got, err := describe(context.Background(), repo); err != nil || got != strings.TrimSpace(string(want)) {
		t.Fatalf("describe = %q, %v; want git describe's %q", got, err, strings.TrimSpace(string(want)))
	}
}

// Without a version from git (a source tarball, no .git) describe fails
// naming git's reason and -version, and so does Build, which builds
// nothing then; -version builds there. A bad -version is refused before
// anything is built.
func TestDescribeFails(t *testing.T) {
	testprog.Need(t, "git", "apt-get install -y git")
	tarball := t.TempDir() // a copy of the sources without .git
	if err := os.WriteFile(filepath.Join(tarball, "go.mod"), []byte("module "+modulePath+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(tarball)) // however the temp directory is placed
	v, err := describe(context.Background(), tarball)
	if err == nil {
		t.Fatalf("describe outside a git checkout = %q, want an error", v)
	}
	for _, want := range []string{"not a git repository", "-version"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("describe outside a git checkout: %v; want it to say %q", err, want)
		}
	}
	if _, err := Build(context.Background(), options{out: t.TempDir(), arch: "amd64", repo: tarball}); err == nil || !strings.Contains(err.Error(), "-version") {
		t.Errorf("Build outside a git checkout without -version: %v; want describe's error", err)
	}
	for _, bad := range []string{"1.2.0-1", "dev"} {
		_, err := Build(context.Background(), options{out: t.TempDir(), arch: "amd64", repo: tarball, version: bad})
		if err == nil || !strings.Contains(err.Error(), `-version "`+bad+`"`) || !strings.Contains(err.Error(), "v1.2.0-rc1") {
			t.Errorf("Build -version %s: %v; want a refusal naming it and the forms accepted", bad, err)
		}
	}
}

// built is the package built once per test process, by the command
// (`go run . -out DIR -arch amd64 -version testVersion`: main calls
// Build), what the command printed, and the root the package was
// extracted into.
var built struct {
	once           sync.Once
	res            *Result
	stdout, stderr string
	out, root      string
	err            error
}

// testVersion is stamped into the test package, so the binaries' output
// can be compared with it.
const testVersion = "v1.4.0-2-gabcdef0"

// testDebVersion is the package's Debian version of testVersion.
const testDebVersion = "1.4.0+2.gabcdef0"

// installed builds the package (once) and extracts it into a temporary
// root with dpkg-deb, as dpkg would install its files.
//
// The package is built by the command in a process of its own, not by
// Build in this one: under -race, Build's writing of the package (gzip
// and checksums of ~35 MB of binaries, in this instrumented process) took
// ~50 s of the package's ~85 s, and TestCommandPrintsPackagePath ran the
// command besides, a second build of the same package. A race-built and a
// plain build write byte-identical packages; Build and nfpm start no
// goroutines; Build's refusals still run in this process
// (TestDescribeFails).
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
		built.out, built.root = filepath.Join(dir, "dist"), filepath.Join(dir, "root")
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("go", "run", ".", "-out", built.out, "-arch", "amd64", "-version", testVersion)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
		built.stdout, built.stderr = stdout.String(), stderr.String()
		if err != nil {
			built.err = fmt.Errorf("go run ./packaging: %w\n%s", err, built.stderr)
			return
		}
		path := strings.TrimSuffix(built.stdout, "\n")
		built.res = &Result{Path: path, Version: testVersion, DebVersion: testDebVersion, Arch: "amd64", Sizes: map[string]int64{}}
		out, err := exec.Command(dpkgDeb, "-x", path, built.root).CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("dpkg-deb -x %s (go run ./packaging printed %q): %w: %s", path, built.stdout, err, out)
			return
		}
		for _, name := range []string{"regiond", "regionctl"} {
			if fi, err := os.Stat(filepath.Join(built.root, "usr/bin", name)); err == nil {
				built.res.Sizes[name] = fi.Size()
			}
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
	// No conffiles: the settings files every node edits would stop nearly
	// every unattended upgrade at dpkg's prompt (postinst makes them).
	if conf, ok := debMember(t, res.Path, "conffiles"); ok && strings.TrimSpace(conf) != "" {
		t.Errorf("conffiles = %q, want none", conf)
	}
}

// debMember returns a file of the package's control archive, and whether
// it is there.
func debMember(t *testing.T, deb, name string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-e", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -e: %v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if os.IsNotExist(err) {
		return "", false
	} else if err != nil {
		t.Fatalf("control member %s: %v", name, err)
	}
	return string(b), true
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
		"usr/share/regiond/regiond.env":                                          0o644,
		"usr/share/regiond/heartbeat.env":                                        0o644,
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
		"usr/share/doc/regiond/examples/php/RegiondTable.php":                    0o644,
		"usr/share/doc/regiond/examples/php/nginx-front.conf":                    0o644,
		"usr/share/doc/regiond/examples/js/regiond.mjs":                          0o644,
		"usr/share/doc/regiond/examples/js/worker/worker.mjs":                    0o644,
		"usr/share/doc/regiond/copyright":                                        0o644,
		"usr/share/doc/regiond/changelog.gz":                                     0o644,
		"usr/share/lintian/overrides/regiond":                                    0o644,
		"usr/share/doc/regiond/bench/README.md":                                  0o644,
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
	// The readers' tests and their drivers stay in the repository.
	for _, path := range []string{"usr/share/doc/regiond/examples/php/front_test.go", "usr/share/doc/regiond/examples/js/testdata",
		"usr/share/doc/regiond/examples/js/bench", "usr/share/doc/regiond/bench/main.go"} {
		if _, err := os.Lstat(filepath.Join(root, path)); err == nil {
			t.Errorf("the package ships /%s", path)
		}
	}
	// The settings files are templates postinst copies (scripts_test.go).
	for _, name := range []string{"regiond.env", "heartbeat.env"} {
		if _, err := os.Lstat(filepath.Join(root, "etc/regiond", name)); err == nil {
			t.Errorf("the package ships /etc/regiond/%s: postinst makes it from /usr/share/regiond/", name)
		}
	}
	env, err := os.ReadFile(filepath.Join(root, "usr/share/regiond/regiond.env"))
	if err != nil || !strings.Contains(string(env), "\nREGIOND_ARGS=") || !strings.Contains(string(env), "# ") {
		t.Errorf("the regiond.env template lacks a commented REGIOND_ARGS setting (%v):\n%s", err, env)
	}
}

// The command prints the path of the package it wrote, alone on stdout
// (its log on stderr), so that `deb=$(go run ./packaging) && sudo apt
// install "$deb"` installs that build (docs/operations.md), not the highest
// version among dist/regiond_*.deb.
func TestCommandPrintsPackagePath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	installed(t) // the command's run that built the package every test checks
	path := strings.TrimSuffix(built.stdout, "\n")
	if strings.Contains(path, "\n") || !filepath.IsAbs(path) || filepath.Dir(path) != built.out {
		t.Fatalf("go run ./packaging printed %q on stdout, want the package's path alone, in %s\nstderr: %s", built.stdout, built.out, built.stderr)
	}
	if v, err := exec.Command("dpkg-deb", "-f", path, "Version").Output(); err != nil || strings.TrimSpace(string(v)) != testDebVersion {
		t.Errorf("%s: version %q (%v), want this build's", path, v, err)
	}
}

// Every relative link of the shipped Markdown documentation leads to a
// file the package ships (the packaging review: README.md and
// docs/agent.md linked to bench/README.md, which it lacked).
func TestShippedDocsLinksResolve(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	_, root := installed(t)
	doc := filepath.Join(root, "usr/share/doc/regiond")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	err := filepath.WalkDir(doc, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), target)); err != nil {
				rel, _ := filepath.Rel(doc, p)
				t.Errorf("/usr/share/doc/regiond/%s links to %s, which the package does not ship", rel, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no relative link found in the shipped documentation")
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
	// No page for what the packaged binaries lack (regiond dev, without
	// its embedded etcd under -tags nodev) or what Debian has no use for
	// (PowerShell completions), and no page refers to one (SEE ALSO).
	for _, name := range []string{"regiond-dev", "regiond-completion-powershell", "regionctl-completion-powershell"} {
		if _, err := os.Stat(filepath.Join(root, "usr/share/man/man1", name+".1.gz")); err == nil {
			t.Errorf("the package ships the man page %s(1)", name)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(root, "usr/share/man/man1/*.1.gz"))
	for _, p := range pages {
		if page := gunzip(t, p); strings.Contains(page, "regiond-dev(1)") || strings.Contains(page, "powershell(1)") {
			t.Errorf("%s refers to a man page the package leaves out", filepath.Base(p))
		}
	}
	for _, name := range []string{"regiond-completion-bash", "regionctl-completion-zsh"} {
		if _, err := os.Stat(filepath.Join(root, "usr/share/man/man1", name+".1.gz")); err != nil {
			t.Errorf("the man page %s(1): %v", name, err)
		}
	}
	if page := gunzip(t, filepath.Join(root, "usr/share/man/man1/regionctl-completion.1.gz")); !strings.Contains(page, `\fBregionctl-completion-bash(1)\fP, \fBregionctl-completion-fish(1)\fP, \fBregionctl-completion-zsh(1)\fP`) {
		t.Errorf("regionctl-completion(1)'s SEE ALSO lost the pages it keeps:\n%s", page)
	}
}

// The Maintainer field comes from DEBFULLNAME and DEBEMAIL, as Debian's
// tools take it, else a default whose mail host lintian accepts (not
// localhost: E bogus-mail-host).
func TestMaintainer(t *testing.T) {
	for _, tc := range []struct{ name, email, want string }{
		{"", "", "regiond maintainers <regiond@regiond.invalid>"},
		{"Ann Ops", "ann@example.com", "Ann Ops <ann@example.com>"},
		{"", "Ann Ops <ann@example.com>", "Ann Ops <ann@example.com>"},
		{"Bob", "Ann Ops <ann@example.com>", "Bob <ann@example.com>"},
		{"", "ann@example.com", "regiond maintainers <ann@example.com>"},
		{"Ann Ops", "", "Ann Ops <regiond@regiond.invalid>"},
	} {
		if got := maintainer(tc.name, tc.email); got != tc.want {
			t.Errorf("maintainer(DEBFULLNAME=%q, DEBEMAIL=%q) = %q, want %q", tc.name, tc.email, got, tc.want)
		}
	}
}

// The package's Maintainer field, and its changelog's signature, are
// maintainer's of the environment, and lintian's overrides file ships,
// overriding the static binaries by name and nothing unexplained: each
// group of overrides follows a comment saying why.
func TestPackageMaintainerAndOverrides(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	res, root := installed(t)
	want := maintainer(os.Getenv("DEBFULLNAME"), os.Getenv("DEBEMAIL"))
	out, err := exec.Command("dpkg-deb", "-f", res.Path, "Maintainer").Output()
	if err != nil || strings.TrimSpace(string(out)) != want || strings.Contains(string(out), "@localhost") {
		t.Errorf("Maintainer field %q (%v), want %q", out, err, want)
	}
	if cl := gunzip(t, filepath.Join(root, "usr/share/doc/regiond/changelog.gz")); !strings.Contains(cl, "\n -- "+want+"  ") {
		t.Errorf("the changelog is not signed by %q:\n%s", want, cl)
	}
	b, err := os.ReadFile(filepath.Join(root, "usr/share/lintian/overrides/regiond"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, want := range []string{"regiond: statically-linked-binary [usr/bin/regiond]", "regiond: statically-linked-binary [usr/bin/regionctl]"} {
		if !strings.Contains("\n"+string(b), "\n"+want+"\n") {
			t.Errorf("the lintian overrides lack %q:\n%s", want, b)
		}
	}
	for i, l := range lines {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if !strings.HasPrefix(l, "regiond: ") {
			t.Errorf("lintian override %q is not the package's", l)
		}
		if i == 0 || (!strings.HasPrefix(lines[i-1], "#") && !strings.HasPrefix(lines[i-1], "regiond: ")) {
			t.Errorf("lintian override %q has no comment saying why", l)
		}
	}
}

// Each lintian override pointing at a maintainer script's line names a
// line of that script that does what the override says (a systemctl call,
// a look into /etc/passwd or /etc/group), so an edit of the scripts that
// moves the line fails here rather than in a lintian run (which CI does
// not do).
func TestLintianOverridesPointAtTheirLines(t *testing.T) {
	b, err := os.ReadFile("lintian/regiond")
	if err != nil {
		t.Fatal(err)
	}
	lineFor := map[string]*regexp.Regexp{
		"maintainer-script-calls-systemctl":                      regexp.MustCompile(`^\s*systemctl\b`),
		"maintainer-script-should-not-parse-etc-passwd-or-group": regexp.MustCompile(`/etc/(passwd|group)\b`),
	}
	re := regexp.MustCompile(`(?m)^regiond: ([a-z0-9-]+) (?:\* )?\[(\w+):(\d+)\]$`)
	ms := re.FindAllStringSubmatch(string(b), -1)
	if len(ms) == 0 {
		t.Fatal("no override of a maintainer script's line")
	}
	for _, m := range ms {
		want, ok := lineFor[m[1]]
		if !ok {
			t.Errorf("override %s: no check of its line here", m[0])
			continue
		}
		script, err := os.ReadFile(filepath.Join("scripts", m[2]))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(m[3])
		lines := strings.Split(string(script), "\n")
		if n < 1 || n > len(lines) || !want.MatchString(lines[n-1]) {
			t.Errorf("override %s: line %d of scripts/%s does not match %s", m[0], n, m[2], want)
		}
	}
	// And every systemctl call lintian would report is overridden.
	for _, name := range []string{"postinst", "prerm", "postrm"} {
		script, _ := os.ReadFile(filepath.Join("scripts", name))
		for i, l := range strings.Split(string(script), "\n") {
			// lintian's test (Check/MaintainerScripts/Systemctl.pm).
			if !strings.HasPrefix(l, "#") && regexp.MustCompile(`^(?:.+;)?\s*systemctl\b`).MatchString(l) && !strings.Contains(l, "daemon-reload") &&
				!strings.Contains(string(b), fmt.Sprintf("[%s:%d]", name, i+1)) {
				t.Errorf("scripts/%s:%d calls systemctl without an override saying why: %s", name, i+1, l)
			}
		}
	}
}

// The package has what Debian policy wants in /usr/share/doc/regiond/
// (lintian: no-copyright-file, no-changelog): a machine-readable copyright
// file naming regiond's licence and the Go modules linked into the
// binaries, and the changelog of a native package (changelog.gz, not
// changelog.Debian.gz) whose entry is this build's version, in
// deb-changelog(5)'s format, dated at the commit.
func TestPackageCopyrightAndChangelog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	res, root := installed(t)
	cr, err := os.ReadFile(filepath.Join(root, "usr/share/doc/regiond/copyright"))
	if err != nil {
		t.Fatalf("copyright: %v", err)
	}
	// A copyright notice, of the commit's year (lintian:
	// copyright-without-copyright-notice).
	ct, _ := commitTime(context.Background(), ".")
	for _, want := range []string{"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n",
		"\nFiles: *\nCopyright: " + strconv.Itoa(ct.Year()) + " regiond maintainers\n", "\nLicense: Proprietary\n", " go.etcd.io/etcd/client/v3 v3.", "go version -m /usr/bin/regiond",
		"/usr/share/common-licenses/Apache-2.0"} {
		if !strings.Contains(string(cr), want) {
			t.Errorf("copyright lacks %q:\n%s", want, cr)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "usr/share/doc/regiond/changelog.Debian.gz")); err == nil {
		t.Error("the package ships changelog.Debian.gz: a native version has changelog.gz")
	}
	raw, err := os.ReadFile(filepath.Join(root, "usr/share/doc/regiond/changelog.gz"))
	if err != nil {
		t.Fatal(err)
	}
	// gzip -9n: no name, no time in the header (reproducible).
	if zr, err := gzip.NewReader(bytes.NewReader(raw)); err != nil || zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("changelog.gz header: name %q, time %v (%v); want neither", zr.Name, zr.ModTime, err)
	}
	cl := strings.Split(gunzip(t, filepath.Join(root, "usr/share/doc/regiond/changelog.gz")), "\n")
	if len(cl) < 4 || cl[0] != "regiond ("+res.DebVersion+") unstable; urgency=medium" {
		t.Fatalf("changelog's first line %q, want this build's version %s", cl[0], res.DebVersion)
	}
	var trailer string
	for _, l := range cl {
		if strings.HasPrefix(l, " -- ") {
			trailer = l
		}
	}
	name, date, ok := strings.Cut(strings.TrimPrefix(trailer, " -- "), ">  ")
	if !ok || !strings.Contains(name, " <") {
		t.Fatalf("changelog trailer %q, want \" -- NAME <EMAIL>  DATE\"", trailer)
	}
	when, err := time.Parse(time.RFC1123Z, date)
	if err != nil {
		t.Fatalf("changelog date %q: %v; want RFC 2822's", date, err)
	}
	if ct, ok := commitTime(context.Background(), "."); ok && !when.Equal(ct) {
		t.Errorf("changelog dated %v, want the commit's %v", when, ct)
	}
	if !strings.Contains(strings.Join(cl, "\n"), testVersion) {
		t.Errorf("the changelog entry does not name the version built from (%s):\n%s", testVersion, strings.Join(cl, "\n"))
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

// TestRefusedVersionIsNotWarnedAbout: a -version that is refused (no
// Debian version can be made of it) is refused without first warning
// that the agents will report it (the runbook walk: `-version dev` logged
// that WARN, then refused the version).
func TestRefusedVersionIsNotWarnedAbout(t *testing.T) {
	testprog.Need(t, "git", "apt-get install -y git")
	repo, err := repoRoot(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	_, err = Build(context.Background(), options{out: t.TempDir(), arch: "amd64", repo: repo, version: "dev",
		log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil || !strings.Contains(err.Error(), `-version "dev"`) || logs.Len() != 0 {
		t.Fatalf("Build -version dev: %v, logs %q; want refused, nothing logged", err, logs.String())
	}
}
