// Package version is the version of this build of regiond and regionctl.
// Release builds set it at link time (go run ./packaging does, from `git
// describe --tags --always --dirty`):
//
//	go build -ldflags "-X github.com/regiond/regiond/internal/version.Version=v1.2.0" ./cmd/regiond
//
// Other builds fall back to what the Go toolchain recorded: the module's
// version, or its VCS revision, or "dev".
package version

import (
	"runtime/debug"
)

// Version is the release version, set with -ldflags -X; empty in builds
// that do not set it.
var Version string

// String returns the version of this build: Version when set, else the
// main module's version from the build info, else "dev-<revision>" (with
// "-dirty" for a modified checkout) when the build recorded its VCS
// revision, else "dev".
func String() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return fromBuildInfo(bi)
}

// fromBuildInfo derives a version from the toolchain's build info.
func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "dev-" + rev
}
