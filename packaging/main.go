// Command packaging builds the Debian package of regiond:
//
//	go run ./packaging                  # dist/regiond_<version>_<arch>.deb
//	go run ./packaging -arch arm64 -out /tmp/dist
//
// The package holds the production binaries (/usr/bin/regiond built with
// -tags nodev, without the embedded etcd of `regiond dev`, and
// /usr/bin/regionctl), the systemd units of systemd/, the commented
// settings files of etc/ (templates in /usr/share/regiond/, which postinst
// copies to /etc/regiond/ when absent: no conffiles), man pages and bash,
// zsh and fish completions generated from the binaries' own command trees
// (cmddocs), the example alert rules and dashboard, and the maintainer
// scripts of scripts/ (postinst creates the regiond system user and the
// settings files). The version comes from `git describe --tags --always
// --dirty`, or from -version, which a build without git's answer (a source
// tarball, git's "dubious ownership") must give: it fails rather than make
// one up. The binaries report it (`regiond --version`, `regionctl
// version`); the package's Debian version is derived from it
// (v1.2.0-3-gabc1234 → 1.2.0+3.gabc1234, see debianVersion), and a version
// that would not sort with the releases is refused. Debian's own tools are
// not needed: the archive is written with nfpm.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
)

func main() {
	var o options
	flag.StringVar(&o.out, "out", "dist", "directory the .deb is written to")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "GOARCH of the package's binaries (amd64, arm64, …)")
	flag.StringVar(&o.version, "version", "", "version to stamp: v1.2.0, v1.2.0-rc1, v1.2.0-3-gabc1234, a commit, each optionally -dirty (default: git describe --tags --always --dirty; required without git)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "packaging: no arguments expected; flags: -out DIR -arch GOARCH -version V")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o.log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	res, err := Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "packaging:", err)
		os.Exit(1)
	}
	fmt.Println(res.Path)
}
