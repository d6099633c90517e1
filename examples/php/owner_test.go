package php_test

import (
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// TestReaderRefusesAFileTheAgentDidNotWrite: given the agent's user
// (load()'s owner, by uid or by name), the reader refuses a snapshot owned
// by another user and one writable by group or others, through the index
// and through the full JSON, with an error naming the file and what is
// wrong; the agent's own file loads. Without an owner every file loads, as
// before.
func TestReaderRefusesAFileTheAgentDidNotWrite(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
	me := strconv.Itoa(os.Getuid())
	other := strconv.Itoa(os.Getuid() + 1)
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	for _, withIndex := range []bool{true, false} {
		path := writeSnapshot(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, withIndex)
		file := path
		if withIndex {
			file = filepath.Join(filepath.Dir(path), "table.idx")
		}
		meta := func(owner ...string) phpTimes {
			t.Helper()
			var m phpTimes
			args := append([]string{"meta", path, "180"}, owner...)
			if err := json.Unmarshal(runPHP(t, nil, args...), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
		what := map[bool]string{true: "index", false: "JSON"}[withIndex]
		owners := [][]string{nil, {me}}
		if name != "" {
			owners = append(owners, []string{name})
		}
		for _, owner := range owners {
			if m := meta(owner...); m.Error != "" {
				t.Errorf("%s: owner %v (the file's, or none): %s, want it loaded", what, owner, m.Error)
			}
		}
		if m := meta(other); !strings.Contains(m.Error, file) || !strings.Contains(m.Error, "is owned by uid "+me+", not the agent's uid "+other) {
			t.Errorf("%s: owner %s (not the file's): error %q, want the file named and its owner", what, other, m.Error)
		}
		if m := meta("no-such-user-regiond-test"); !strings.Contains(m.Error, "no such user") {
			t.Errorf("%s: an unknown owner name: error %q, want no such user", what, m.Error)
		}
		if err := os.Chmod(file, 0o664); err != nil {
			t.Fatal(err)
		}
		if m := meta(me); !strings.Contains(m.Error, file) || !strings.Contains(m.Error, "writable by group or others (mode 0664)") {
			t.Errorf("%s: a group-writable file: error %q, want it refused naming the mode", what, m.Error)
		}
		if m := meta(); m.Error != "" {
			t.Errorf("%s: without an owner a group-writable file is refused: %s (want it loaded, as before)", what, m.Error)
		}
	}
}
