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

// TestOwnerCheckIsOfTheFileRead: on the JSON path, the owner check and the
// read are of one open file. The path is a symlink flipped, as fast as Go
// can, between the agent's file and a forged one (the same owner, but
// writable by others: refused when checked); over thousands of loads with
// the owner given, the reader returns the agent's table or refuses, and
// never returns the forged one. A check of the path followed by a read of
// the path (a stat, then an open) let 100 to 200 through in 20,000.
func TestOwnerCheckIsOfTheFileRead(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	// A one-pool table: 20,000 loads, each parsing it, in a few seconds.
	cfg, err := routing.ParseConfig([]byte("pools:\n  p: {host: edge.example.net:443, residency: global, status: active}\n" +
		"routes:\n  _default:\n    targets: [{pool: p, weight: 100}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := compile(t, cfg, routing.CompileOptions{Now: now}).JSONWith(nil, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good, forged := filepath.Join(dir, "agent.json"), filepath.Join(dir, "forged.json")
	if err := os.WriteFile(good, js, 0o644); err != nil {
		t.Fatal(err)
	}
	// The forged table: revision 666<revision>, mode 0666 (set after the umask).
	fake := strings.Replace(string(js), `"revision":`, `"revision":666`, 1)
	var hdr struct{ Revision int64 }
	if err := json.Unmarshal([]byte(fake), &hdr); err != nil || hdr.Revision < 666 {
		t.Fatalf("forged table: revision %d, %v", hdr.Revision, err)
	}
	if err := os.WriteFile(forged, []byte(fake), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(forged, 0o666); err != nil {
		t.Fatal(err)
	}
	path, tmp := filepath.Join(dir, "table.json"), filepath.Join(dir, "flip")
	if err := os.Symlink(good, path); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			target := good
			if i%2 == 1 {
				target = forged
			}
			os.Remove(tmp)
			if os.Symlink(target, tmp) == nil {
				os.Rename(tmp, path)
			}
		}
	}()
	out := runPHP(t, nil, "ownerloop", path, strconv.Itoa(os.Getuid()), "20000", strconv.FormatInt(hdr.Revision, 10))
	close(stop)
	<-done
	var res struct{ Forged, Refused, Loaded int }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("driver: %v: %s", err, out)
	}
	t.Logf("20,000 loads: %d of the agent's table, %d refused, %d forged", res.Loaded, res.Refused, res.Forged)
	if res.Forged > 0 {
		t.Fatalf("load() with the owner returned the forged table (writable by others) %d times in 20,000", res.Forged)
	}
	if res.Loaded == 0 || res.Refused == 0 {
		t.Fatalf("the flip did not take: %d loaded, %d refused (want both)", res.Loaded, res.Refused)
	}
}
