package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// options are the inputs of Build.
type options struct {
	// out is the directory the package is written to (created if missing).
	out string
	// arch is the GOARCH of the binaries.
	arch string
	// version is stamped into the binaries; "" means from git.
	version string
	// repo is the module's root directory; "" means `go env GOMOD`'s.
	repo string
	log  *slog.Logger
}

// Result describes a built package.
type Result struct {
	// Path is the .deb file.
	Path string
	// Version is what the binaries report; DebVersion the package's
	// Debian version, derived from it.
	Version, DebVersion string
	// Arch is the Debian architecture.
	Arch string
	// Sizes are the packaged binaries' sizes in bytes, by name.
	Sizes map[string]int64
}

// modulePath is this module; the version variable lives in its
// internal/version package.
const modulePath = "github.com/regiond/regiond"

// Build compiles the binaries, generates their docs and writes the package.
func Build(ctx context.Context, o options) (*Result, error) {
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	repo, err := repoRoot(ctx, o.repo)
	if err != nil {
		return nil, err
	}
	debArch, ok := debianArch[o.arch]
	if !ok {
		return nil, fmt.Errorf("-arch %q: no Debian architecture known for it (want one of amd64, arm64, 386, arm, ppc64le, s390x, riscv64)", o.arch)
	}
	ver := o.version
	if ver == "" {
		if ver, err = describe(ctx, repo); err != nil {
			return nil, err
		}
	}
	ct, haveCT := commitTime(ctx, repo)
	debVer, err := debianVersion(ver, ct, haveCT)
	if err != nil && o.version != "" {
		return nil, fmt.Errorf("-version %q: %w", ver, err)
	} else if err != nil {
		return nil, fmt.Errorf("git describe --tags --always --dirty gave %q: %w; pass -version in one of those forms", ver, err)
	}
	if o.version != "" { // a -version refused above is not warned about first
		if d, err := describe(ctx, repo); err == nil {
			if why := versionMismatch(ver, d); why != "" {
				o.log.Warn(why, "version", ver, "git_describe", d)
			}
		}
	}
	res := &Result{Version: ver, DebVersion: debVer, Arch: debArch, Sizes: map[string]int64{}}
	work, err := os.MkdirTemp("", "regiond-packaging-")
	if err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	defer os.RemoveAll(work)
	st := &stage{dir: work, repo: repo, version: ver, arch: o.arch, log: o.log}
	if err := st.binaries(ctx, res); err != nil {
		return nil, err
	}
	mtime := ct
	if !haveCT {
		mtime = time.Unix(0, 0).UTC()
	}
	if err := st.docs(ctx, mtime); err != nil {
		return nil, err
	}
	info, err := st.packageInfo(res, mtime)
	if err != nil {
		return nil, err
	}
	res.Path, err = writeDeb(info, o.out, repo)
	if err != nil {
		return nil, err
	}
	o.log.Info("package written", "path", res.Path, "version", res.DebVersion, "arch", res.Arch,
		"regiond_bytes", res.Sizes["regiond"], "regionctl_bytes", res.Sizes["regionctl"])
	return res, nil
}

// debianArch maps GOARCH to Debian's architecture names.
var debianArch = map[string]string{
	"amd64": "amd64", "arm64": "arm64", "386": "i386", "arm": "armhf",
	"ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64",
}

// repoRoot returns dir, or the main module's root directory.
func repoRoot(ctx context.Context, dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("find the module root (go env GOMOD = %q): %v; run from the regiond checkout", gomod, err)
	}
	return filepath.Dir(gomod), nil
}

// describe returns `git describe --tags --always --dirty` of repo. It
// fails, naming git's reason (no git, no .git in a source tarball, git's
// "dubious ownership" of a checkout owned by another user), when git
// cannot say: a package needs a version that sorts with the others, and a
// made-up one ("dev", 0.0.0) would sort above every real untagged build,
// so the user passes -version instead.
func describe(ctx context.Context, repo string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", "-C", repo, "describe", "--tags", "--always", "--dirty")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	v := strings.TrimSpace(string(out))
	if err == nil && v != "" {
		return v, nil
	}
	why := strings.TrimSpace(stderr.String())
	switch {
	case errors.Is(err, exec.ErrNotFound):
		why = "git is not installed"
	case why == "" && err != nil:
		why = err.Error()
	case why == "":
		why = "it printed nothing"
	}
	return "", fmt.Errorf("no version: git describe --tags --always --dirty in %s failed: %s; "+
		"fix that, or pass the version to stamp with -version (e.g. -version v1.2.0, or -version v1.2.0-3-gabc1234 for a build after a tag)", repo, why)
}

// commitTime is the time of repo's HEAD commit (the files' mtime, so two
// builds of one commit are alike, and the order of untagged builds); ok
// is false without git or a commit.
func commitTime(ctx context.Context, repo string) (t time.Time, ok bool) {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "log", "-1", "--format=%ct").Output()
	if err == nil {
		if s, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil {
			return time.Unix(s, 0).UTC(), true
		}
	}
	return time.Time{}, false
}

// versionMismatch says why stamping given on a tree git describes as
// described misleads, or "": a dirty tree stamped clean (the fleet's
// VERSION column cannot tell the build from the release: the packaging
// review), or another commit than the version's tag.
func versionMismatch(given, described string) string {
	if strings.TrimPrefix(given, "v") == strings.TrimPrefix(described, "v") {
		return ""
	}
	if strings.HasSuffix(described, "-dirty") && !strings.HasSuffix(given, "-dirty") {
		return "-version stamps a tree with uncommitted changes as if it were clean: the agents will report it as that version"
	}
	return "-version differs from what git describes this tree as: the agents will report it as that version"
}

// describeRE splits a git describe: the tag's numeric version (without
// "v"), an optional pre-release part (any case), commits since the tag and
// the commit, dirty.
var describeRE = regexp.MustCompile(`^v?([0-9]+(?:\.[0-9]+)*)(?:-((?i:rc|alpha|beta|pre|dev)[0-9A-Za-z.]*))?(?:-([0-9]+)-g([0-9a-f]{4,40}))?(-dirty)?$`)

// hashRE is a bare commit (git describe --always without a tag).
var hashRE = regexp.MustCompile(`^([0-9a-f]{7,40})(-dirty)?$`)

// versionForms is what debianVersion accepts, for its errors.
const versionForms = "want a tag v1.2.0, a pre-release v1.2.0-rc1 (rc, alpha, beta, pre, dev; any case), " +
	"a build after a tag v1.2.0-3-gabc1234, or a commit abc1234, each optionally -dirty"

// debianVersion turns a git describe into a Debian version that sorts
// the way releases do: v1.2.0 → 1.2.0, v1.2.0-rc1 or -RC1 → 1.2.0~rc1
// and v1.2.0-dev → 1.2.0~dev (before 1.2.0), v1.2.0-3-gabc1234 →
// 1.2.0+3.gabc1234 (after it), a dirty tree at the tag v1.2.0-dirty →
// 1.2.0+0.dirty (after 1.2.0, before the commits after it), a later
// dirty tree → 1.2.0+3.gabc1234.dirty, and a commit without a tag →
// 0.0.0+20261205071500.gabc1234 (its commit time ct first, so untagged
// builds upgrade in the order they were committed, not by their hashes;
// haveCT false: no commit time known, an error). Anything else is an
// error: no Debian version made of it would sort with the releases
// ("1.2.0-1" or "dev" under 0.0.0+ would sort below every 1.x).
func debianVersion(v string, ct time.Time, haveCT bool) (string, error) {
	var base string
	var plus []string
	if m := hashRE.FindStringSubmatch(v); m != nil {
		if !haveCT {
			return "", fmt.Errorf("a bare commit sorts by its commit time, and git gave none here (pass a version based on a tag)")
		}
		base, plus = "0.0.0", []string{ct.UTC().Format("20060102150405"), "g" + m[1]}
		if m[2] != "" {
			plus = append(plus, "dirty")
		}
	} else if m := describeRE.FindStringSubmatch(v); m != nil {
		base = m[1]
		if m[2] != "" {
			base += "~" + strings.ToLower(m[2])
		}
		if m[3] != "" {
			plus = append(plus, m[3], "g"+m[4])
		}
		if m[5] != "" {
			if m[3] == "" {
				plus = append(plus, "0") // at the tag: before its first commit
			}
			plus = append(plus, "dirty")
		}
	} else {
		return "", errors.New("not a version that can be turned into a Debian version sorting with the releases: " + versionForms)
	}
	if len(plus) == 0 {
		return base, nil
	}
	return base + "+" + strings.Join(plus, "."), nil
}

// stage is the work directory of one package build.
type stage struct {
	dir, repo, version, arch string
	log                      *slog.Logger
}

// binaries builds the production binaries into dir/bin.
func (s *stage) binaries(ctx context.Context, res *Result) error {
	for _, name := range []string{"regiond", "regionctl"} {
		out := filepath.Join(s.dir, "bin", name)
		if err := s.goBuild(ctx, name, out, s.arch, "nodev"); err != nil {
			return err
		}
		fi, err := os.Stat(out)
		if err != nil {
			return fmt.Errorf("built %s: %w", name, err)
		}
		res.Sizes[name] = fi.Size()
	}
	return nil
}

// docs builds each binary for this machine with -tags gendocs and runs
// its hidden verb, which writes its man pages and completions.
func (s *stage) docs(ctx context.Context, mtime time.Time) error {
	for _, name := range []string{"regiond", "regionctl"} {
		bin := filepath.Join(s.dir, "gendocs", name)
		if err := s.goBuild(ctx, name, bin, runtime.GOARCH, "nodev,gendocs"); err != nil {
			return err
		}
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, "__gendocs", filepath.Join(s.dir, "docs"))
		cmd.Stderr = &stderr
		// Nothing of the user's leaks into the pages; their date is the commit's.
		cmd.Env = append(os.Environ(), "HOME="+s.dir, "SOURCE_DATE_EPOCH="+strconv.FormatInt(mtime.Unix(), 10))
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("generate the docs of %s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
		}
	}
	return nil
}

// goBuild builds ./cmd/<name> for linux/arch with tags, the version
// stamped in, stripped of symbol tables and paths of this machine.
func (s *stage) goBuild(ctx context.Context, name, out, arch, tags string) error {
	ldflags := "-s -w -X " + modulePath + "/internal/version.Version=" + s.version
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", tags, "-ldflags", ldflags, "-o", out, "./cmd/"+name)
	cmd.Dir = s.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if arch == "arm" {
		cmd.Env = append(cmd.Env, "GOARM=7") // Debian's armhf
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("go build %s (GOARCH=%s, -tags %s): %s", name, arch, tags, strings.TrimSpace(stderr.String()))
		}
		return fmt.Errorf("go build %s: %w", name, err)
	}
	s.log.Debug("built", "binary", name, "arch", arch, "tags", tags, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
