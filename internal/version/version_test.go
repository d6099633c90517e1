package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"module version", debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"devel without vcs", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"vcs revision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "308b6cd0a1b2c3d4e5f60718293a4b5c6d7e8f90"}, {Key: "vcs.modified", Value: "false"}}}, "dev-308b6cd0a1b2"},
		{"dirty checkout", debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "308b6cd"}, {Key: "vcs.modified", Value: "true"}}}, "dev-308b6cd-dirty"},
	}
	for _, c := range cases {
		if got := fromBuildInfo(&c.bi); got != c.want {
			t.Errorf("%s: fromBuildInfo = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestStringPrefersLinkedVersion(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v9.9.9-3-gabcdef0"
	if got := String(); got != Version {
		t.Fatalf("String() = %q, want the -ldflags value %q", got, Version)
	}
}
