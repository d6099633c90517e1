package main

import (
	"compress/gzip"
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

// assets are the package's own files: units, settings, maintainer scripts.
//
//go:embed systemd etc scripts
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
		Maintainer:    "regiond maintainers <regiond@localhost>",
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
// gzip -9n, no name or time in the header) and returns their paths.
func (s *stage) gzipManPages() ([]string, error) {
	pages, err := filepath.Glob(filepath.Join(s.dir, "docs", "man", "*.1"))
	if err != nil || len(pages) == 0 {
		return nil, fmt.Errorf("no man pages generated in %s (%v)", filepath.Join(s.dir, "docs", "man"), err)
	}
	sort.Strings(pages)
	var out []string
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("man page %s: %w", p, err)
		}
		f, err := os.Create(p + ".gz")
		if err != nil {
			return nil, fmt.Errorf("man page %s: %w", p, err)
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
			return nil, fmt.Errorf("compress man page %s: %w", p, werr)
		}
		out = append(out, p+".gz")
	}
	return out, nil
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
