package main

import (
	"compress/gzip"
	"debug/buildinfo"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

// assets are the package's own files: units, settings, maintainer scripts,
// lintian overrides.
//
//go:embed systemd etc scripts lintian
var assets embed.FS

// unitDir is where the units go (merged /usr: /lib is /usr/lib).
const unitDir = "/usr/lib/systemd/system/"

// templateDir holds the settings files' templates. Every node edits its
// /etc/regiond/regiond.env, and the templates' comments change often: as
// conffiles, nearly every upgrade would stop at dpkg's prompt (an
// unattended one fails there, the package unpacked, postinst not run, the
// old agent running a deleted binary). So the package ships no conffile;
// postinst copies a template to /etc/regiond/ (0600 root:root) only when
// the file is absent, and postrm purge removes it. Not under
// /usr/share/doc/, which minimal images leave out (dpkg path-exclude).
const templateDir = "/usr/share/regiond/"

// docsDir is the contract and monitoringDir the example alert rules and
// dashboard, shipped under /usr/share/doc/regiond/ (see addDocs).
const (
	docsDir       = "docs"
	monitoringDir = "examples/monitoring"
	// The front doors' readers, which the docs link to (the packaging
	// review: the shipped docs linked to files the package lacked).
	phpDir = "examples/php"
	jsDir  = "examples/js"
)

// packageInfo describes the package's metadata and every file in it,
// staged under s.dir.
func (s *stage) packageInfo(res *Result, mtime time.Time) (*nfpm.Info, error) {
	if err := s.extractAssets(); err != nil {
		return nil, err
	}
	man, err := s.gzipManPages()
	if err != nil {
		return nil, err
	}
	c := &contents{mtime: mtime}
	c.file(filepath.Join(s.dir, "bin", "regiond"), "/usr/bin/regiond", 0o755)
	c.file(filepath.Join(s.dir, "bin", "regionctl"), "/usr/bin/regionctl", 0o755)
	c.file(filepath.Join(s.dir, "systemd", "regiond.service"), unitDir+"regiond.service", 0o644)
	c.file(filepath.Join(s.dir, "systemd", "regiond-heartbeat@.service"), unitDir+"regiond-heartbeat@.service", 0o644)
	// Not conffiles: templates postinst copies to /etc/regiond/ when absent
	// (templateDir).
	c.file(filepath.Join(s.dir, "etc", "regiond.env"), templateDir+"regiond.env", 0o644)
	c.file(filepath.Join(s.dir, "etc", "heartbeat.env"), templateDir+"heartbeat.env", 0o644)
	c.dir("/etc/regiond", 0o755)
	c.dir("/etc/regiond/heartbeat", 0o755)
	for _, name := range []string{"regiond", "regionctl"} {
		comp := filepath.Join(s.dir, "docs", "completions")
		c.file(filepath.Join(comp, "bash", name), "/usr/share/bash-completion/completions/"+name, 0o644)
		c.file(filepath.Join(comp, "zsh", "_"+name), "/usr/share/zsh/vendor-completions/_"+name, 0o644)
		c.file(filepath.Join(comp, "fish", name+".fish"), "/usr/share/fish/vendor_completions.d/"+name+".fish", 0o644)
	}
	for _, p := range man {
		c.file(p, "/usr/share/man/man1/"+filepath.Base(p), 0o644)
	}
	if err := s.addDocs(c); err != nil {
		return nil, err
	}
	c.file(filepath.Join(s.repo, "README.md"), "/usr/share/doc/regiond/README.md", 0o644)
	// The benchmarks' figures, which README.md and docs/agent.md link to
	// (the README alone: the benchmarks' code stays in the repository).
	c.file(filepath.Join(s.repo, "bench", "README.md"), "/usr/share/doc/regiond/bench/README.md", 0o644)
	// lintian's overrides: what it reports that is meant (the comments say why).
	c.file(filepath.Join(s.dir, "lintian", "regiond"), "/usr/share/lintian/overrides/regiond", 0o644)
	maint := maintainer(os.Getenv("DEBFULLNAME"), os.Getenv("DEBEMAIL"))
	copyright, changelog, err := s.debianDocs(res, maint, mtime)
	if err != nil {
		return nil, err
	}
	c.file(copyright, "/usr/share/doc/regiond/copyright", 0o644)
	c.file(changelog, "/usr/share/doc/regiond/changelog.gz", 0o644)
	if err := c.err; err != nil {
		return nil, err
	}
	info := &nfpm.Info{
		Name:          "regiond",
		Arch:          res.Arch,
		Platform:      "linux",
		Version:       res.DebVersion,
		VersionSchema: "none",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    maint,
		Description: "control plane agent of video region routers\n" +
			"regiond mirrors the routing policy (pools, routes, drains, boosts, health)\n" +
			"from etcd into memory and answers routing decisions locally: HTTP API on a\n" +
			"unix socket and loopback, a snapshot file, a status page and metrics.\n" +
			"regionctl changes the policy with validated, guarded, audited writes.",
		Homepage: "https://github.com/regiond/regiond",
		License:  "Proprietary",
		MTime:    mtime,
		Overridables: nfpm.Overridables{
			Depends:  []string{"adduser"},
			Contents: c.list,
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(s.dir, "scripts", "postinst"),
				PreRemove:   filepath.Join(s.dir, "scripts", "prerm"),
				PostRemove:  filepath.Join(s.dir, "scripts", "postrm"),
			},
			Deb: nfpm.Deb{Compression: "gzip"},
		},
	}
	return info, nil
}

// contents collects the package's files; the first error sticks.
type contents struct {
	list  files.Contents
	mtime time.Time
	err   error
}

func (c *contents) add(src, dst, typ string, mode os.FileMode) {
	if c.err != nil {
		return
	}
	if src != "" {
		if _, err := os.Stat(src); err != nil {
			c.err = fmt.Errorf("package file %s (from %s): %w", dst, src, err)
			return
		}
	}
	c.list = append(c.list, &files.Content{Source: src, Destination: dst, Type: typ,
		FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: c.mtime}})
}

func (c *contents) file(src, dst string, mode os.FileMode) { c.add(src, dst, files.TypeFile, mode) }

func (c *contents) dir(dst string, mode os.FileMode) { c.add("", dst, files.TypeDir, mode|os.ModeDir) }

// extractAssets writes the embedded assets under s.dir, keeping the
// executable bit of the scripts.
func (s *stage) extractAssets() error {
	return fs.WalkDir(assets, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return fmt.Errorf("embedded %s: %w", p, err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(p, "scripts/") {
			mode = 0o755
		}
		dst := filepath.Join(s.dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("stage %s: %w", p, err)
		}
		if err := os.WriteFile(dst, b, mode); err != nil {
			return fmt.Errorf("stage %s: %w", p, err)
		}
		return nil
	})
}

// gzipManPages compresses the generated man pages (as Debian wants them:
// gzip -9n, no name or time in the header) and returns their paths. The
// pages of commands the package's binaries lack or that are of no use on
// Debian (manPageSkipped) are left out, and so are the other pages'
// references to them (SEE ALSO).
func (s *stage) gzipManPages() ([]string, error) {
	pages, err := filepath.Glob(filepath.Join(s.dir, "docs", "man", "*.1"))
	if err != nil || len(pages) == 0 {
		return nil, fmt.Errorf("no man pages generated in %s (%v)", filepath.Join(s.dir, "docs", "man"), err)
	}
	sort.Strings(pages)
	var kept, skipped []string
	for _, p := range pages {
		if name := strings.TrimSuffix(filepath.Base(p), ".1"); manPageSkipped(name) {
			skipped = append(skipped, name)
		} else {
			kept = append(kept, p)
		}
	}
	var out []string
	for _, p := range kept {
		if err := dropManRefs(p, skipped); err != nil {
			return nil, fmt.Errorf("man page %s: %w", p, err)
		}
		if err := gzipFile(p, p+".gz"); err != nil {
			return nil, fmt.Errorf("man page %s: %w", p, err)
		}
		out = append(out, p+".gz")
	}
	return out, nil
}

// manPageSkipped says whether the man page of the command name (cobra's
// "regiond-dev", "regionctl-completion-powershell") stays out of the
// package: `regiond dev` and its verbs, which the production binary
// (-tags nodev) lacks, and the PowerShell completion scripts' verbs.
func manPageSkipped(name string) bool {
	return name == "regiond-dev" || strings.HasPrefix(name, "regiond-dev-") ||
		strings.HasSuffix(name, "-completion-powershell")
}

// dropManRefs removes from the man page p the references (SEE ALSO) to the
// pages of names.
func dropManRefs(p string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	text := string(b)
	for _, n := range names {
		ref := `\fB` + n + `(1)\fP`
		text = strings.ReplaceAll(text, ", "+ref, "")
		text = strings.ReplaceAll(text, ref+", ", "")
		text = strings.ReplaceAll(text, ref, "")
	}
	if text == string(b) {
		return nil
	}
	return os.WriteFile(p, []byte(text), 0o644)
}

// gzipFile writes src compressed to dst as Debian wants its documentation
// (gzip -9n: no name or time in the header; the file's time in the
// package is the commit's, like every file's).
func gzipFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	_, werr := zw.Write(b)
	if cerr := zw.Close(); werr == nil {
		werr = cerr
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("compress into %s: %w", dst, werr)
	}
	return nil
}

// addDocs ships the contract (docs/, which the README links to) and the
// example alert rules, their tests and the dashboard as documentation, under
// /usr/share/doc/regiond/ at their paths in the repository.
func (s *stage) addDocs(c *contents) error {
	for _, dir := range []string{docsDir, monitoringDir, phpDir, jsDir} {
		root := filepath.Join(s.repo, dir)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return fmt.Errorf("documentation %s: %w", dir, err)
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "bench") {
				return filepath.SkipDir // the tests' own drivers and benchmarks
			}
			if d.IsDir() || strings.HasSuffix(p, ".go") {
				return nil
			}
			rel, _ := filepath.Rel(s.repo, p)
			c.file(p, "/usr/share/doc/regiond/"+filepath.ToSlash(rel), 0o644)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// writeDeb writes the package to out/<conventional name>, through a
// temporary file renamed into place, and returns its path.
func writeDeb(info *nfpm.Info, out, repo string) (string, error) {
	if !filepath.IsAbs(out) {
		out = filepath.Join(repo, out)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("output directory %s: %w", out, err)
	}
	packager := deb.Default
	name := fmt.Sprintf("%s_%s_%s.deb", info.Name, info.Version, info.Arch)
	path := filepath.Join(out, name)
	tmp, err := os.CreateTemp(out, "."+name+".*")
	if err != nil {
		return "", fmt.Errorf("create %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := packager.Package(info, tmp); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write the package %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("write the package %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("rename into %s: %w", path, err)
	}
	return path, nil
}

// Without DEBFULLNAME and DEBEMAIL, the package's Maintainer field (and
// its changelog's signature) is defaultName <defaultEmail>: an address in
// the reserved .invalid domain (RFC 2606), never delivered, but a mail
// address lintian accepts (localhost is bogus-mail-host).
const (
	defaultName  = "regiond maintainers"
	defaultEmail = "regiond@regiond.invalid"
)

// maintainer is the Maintainer field, as Debian's tools (dch) make it from
// the environment: DEBEMAIL either "Name <address>" or an address that
// DEBFULLNAME names; each missing part is the default's.
func maintainer(fullName, email string) string {
	fullName, email = strings.TrimSpace(fullName), strings.TrimSpace(email)
	if name, addr, ok := strings.Cut(email, "<"); ok && strings.HasSuffix(addr, ">") {
		email = strings.TrimSuffix(addr, ">")
		if n := strings.TrimSpace(name); n != "" && fullName == "" {
			fullName = n
		}
	}
	if fullName == "" {
		fullName = defaultName
	}
	if email == "" {
		email = defaultEmail
	}
	return fullName + " <" + email + ">"
}

// debianDocs writes the files Debian policy wants in every package's
// /usr/share/doc/<package>/ (lintian: no-copyright-file, no-changelog)
// under s.dir and returns their paths: the copyright file, in the
// machine-readable format (DEP-5), and the changelog of this native
// package, compressed (changelog.gz, not changelog.Debian.gz: the version
// has no Debian revision), one entry for this build, signed by maint and
// dated at mtime (the commit's).
func (s *stage) debianDocs(res *Result, maint string, mtime time.Time) (copyright, changelog string, err error) {
	dir := filepath.Join(s.dir, "debian-docs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("stage the copyright and changelog: %w", err)
	}
	mods, err := s.linkedModules()
	if err != nil {
		return "", "", err
	}
	copyright = filepath.Join(dir, "copyright")
	if err := os.WriteFile(copyright, []byte(copyrightText(mods, mtime.Year())), 0o644); err != nil {
		return "", "", fmt.Errorf("write the copyright file: %w", err)
	}
	plain := filepath.Join(dir, "changelog")
	if err := os.WriteFile(plain, []byte(changelogText(res, maint, mtime)), 0o644); err != nil {
		return "", "", fmt.Errorf("write the changelog: %w", err)
	}
	changelog = plain + ".gz"
	if err := gzipFile(plain, changelog); err != nil {
		return "", "", fmt.Errorf("changelog: %w", err)
	}
	return copyright, changelog, nil
}

// changelogText is a one-entry Debian changelog (deb-changelog(5)) for the
// build res.
func changelogText(res *Result, maint string, mtime time.Time) string {
	return fmt.Sprintf("regiond (%s) unstable; urgency=medium\n\n"+
		"  * Built from %s\n"+
		"    (git describe --tags --always --dirty); the changes are in the\n"+
		"    source repository's history (git log).\n\n"+
		" -- %s  %s\n",
		res.DebVersion, res.Version, maint, mtime.UTC().Format(time.RFC1123Z))
}

// linkedModules lists the Go modules statically linked into the packaged
// binaries (what `go version -m` prints), sorted, each once: path and
// version.
func (s *stage) linkedModules() ([]string, error) {
	seen := map[string]bool{}
	var mods []string
	for _, name := range []string{"regiond", "regionctl"} {
		bin := filepath.Join(s.dir, "bin", name)
		bi, err := buildinfo.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("read the Go modules linked into %s: %w", bin, err)
		}
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			m := d.Path + " " + d.Version
			if !seen[m] {
				seen[m] = true
				mods = append(mods, m)
			}
		}
	}
	sort.Strings(mods)
	return mods, nil
}

// copyrightText is the package's copyright file (DEP-5): regiond's own
// licence and copyright notice (year: the commit's), and the Go modules
// the binaries link statically, each under its own licence.
func copyrightText(mods []string, year int) string {
	var b strings.Builder
	b.WriteString(`Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: regiond
Upstream-Contact: regiond maintainers
Source: https://github.com/regiond/regiond
Comment: /usr/bin/regiond and /usr/bin/regionctl are Go programs, linked
 statically: besides regiond's own code they hold the Go standard library
 (BSD-3-clause) and the Go modules listed below, each under its own licence,
 found in that module's source at the version listed (go mod download -json
 MODULE@VERSION names the directory). Among them, etcd's
 (go.etcd.io/etcd/...) and gRPC (google.golang.org/grpc) are under the
 Apache License 2.0, in /usr/share/common-licenses/Apache-2.0 on Debian
 systems. The same list, as each binary records it:
 go version -m /usr/bin/regiond /usr/bin/regionctl
 .
 Modules linked:
`)
	for _, m := range mods {
		b.WriteString(" " + m + "\n")
	}
	fmt.Fprintf(&b, "\nFiles: *\nCopyright: %d regiond maintainers\n", year)
	b.WriteString(`License: Proprietary
 All rights reserved. This package may be used, copied and distributed only
 as its owners allow. The Go modules linked into its binaries are under their
 own licences (see the Comment above); those licences apply to their code.
`)
	return b.String()
}
