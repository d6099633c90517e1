package php_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/internal/testprog"
	"github.com/regiond/regiond/routing"
)

// TestReaderRefusesAFileTheAgentDidNotWrite: given the agent's user
// (load()'s owner, by uid or by name), the reader refuses a snapshot owned
// by another user and one writable by group or others, through the index
// and through the full JSON, with an error naming the file and what is
// wrong; the agent's own file loads. With an empty owner (the opt-out) every file
// loads, as every file did before the owner was checked by default.
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
		meta := func(owner string) phpTimes {
			t.Helper()
			var m phpTimes
			if err := json.Unmarshal(runPHP(t, nil, "meta", path, "180", owner), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
		what := map[bool]string{true: "index", false: "JSON"}[withIndex]
		owners := []string{me, ""}
		if name != "" {
			owners = append(owners, name)
		}
		for _, owner := range owners {
			if m := meta(owner); m.Error != "" {
				t.Errorf("%s: owner %q (the file's, or '' for any): %s, want it loaded", what, owner, m.Error)
			}
		}
		// Another owner: root's directory (t.TempDir as root) passes the
		// directory's check and the file is refused; another user's
		// directory is refused first. Either way the error says what to
		// pass.
		if os.Getuid() == 0 {
			if m := meta(other); !strings.Contains(m.Error, file) || !strings.Contains(m.Error, "is owned by uid "+me+", not the agent's uid "+other+": refusing") {
				t.Errorf("%s: owner %s (not the file's): error %q, want the file named and its owner", what, other, m.Error)
			}
		} else if m := meta(other); !strings.Contains(m.Error, "snapshot directory "+filepath.Dir(file)+" is owned by uid "+me+", not the agent's uid "+other+" nor root") {
			t.Errorf("%s: owner %s (not the directory's): error %q, want the directory named and its owner", what, other, m.Error)
		}
		if m := meta(other); !strings.Contains(m.Error, "load($path, owner: 'USER')") || !strings.Contains(m.Error, "owner: '' to read a snapshot of any owner (unsafe") {
			t.Errorf("%s: owner %s (not the file's): error %q, want it to say what to pass", what, other, m.Error)
		}
		if m := meta("no-such-user-regiond-test"); !strings.Contains(m.Error, "owner 'no-such-user-regiond-test': no such user on this host; name the user the agent runs as") {
			t.Errorf("%s: an unknown owner name: error %q, want no such user and what to pass", what, m.Error)
		}
		if err := os.Chmod(file, 0o664); err != nil {
			t.Fatal(err)
		}
		if m := meta(me); !strings.Contains(m.Error, file) || !strings.Contains(m.Error, "writable by group or others (mode 0664)") {
			t.Errorf("%s: a group-writable file: error %q, want it refused naming the mode", what, m.Error)
		}
		if m := meta(""); m.Error != "" {
			t.Errorf("%s: with owner '' a group-writable file is refused: %s (want it loaded: no check)", what, m.Error)
		}
	}
}

// defaultOwnerRefusal is what load() without an owner (the default,
// regiond) says of a table in dir owned by uid fileUID: no such user on a
// host without one (this test machine), else not the agent's uid.
func defaultOwnerRefusal(t *testing.T, dir string, fileUID int) string {
	t.Helper()
	u, err := user.Lookup("regiond")
	if err != nil {
		return "regiond: owner 'regiond' (the default: the package's agent user): no such user on this host; name the user the agent runs as, load($path, owner: 'USER')"
	}
	if u.Uid == strconv.Itoa(fileUID) {
		t.Skip("the test's files are owned by user regiond: the default owner would read them")
	}
	if fileUID == 0 {
		return ", not the agent's uid " + u.Uid + " (owner 'regiond'): refusing a table the agent may not have written"
	}
	return "snapshot directory " + dir + " is owned by uid " + strconv.Itoa(fileUID) + ", not the agent's uid " + u.Uid + " (owner 'regiond') nor root"
}

// TestReaderRefusesAForgedTableByDefault: a local user (uid 4242) who made
// the snapshot's directory before the agent (in /dev/shm, which anyone may
// write) and put a table there sending German viewers to a US edge: load()
// without an owner (the default: the package's user, regiond) refuses it,
// saying what to pass, through the index and through the JSON, and so does
// load() naming the agent's user (here root); the agent's own table (a
// directory and files of the user named) loads. Only an empty owner (the
// opt-out) reads the forged table. Run as root (to chown).
func TestReaderRefusesAForgedTableByDefault(t *testing.T) {
	bin := php(t)
	t.Parallel()
	testprog.NeedRoot(t, "the forged table is chowned to another uid")
	now := time.Now()
	agentCfg, err := routing.ParseConfig([]byte(fleettest.OwnerFleet))
	if err != nil {
		t.Fatal(err)
	}
	forgedCfg, err := routing.ParseConfig([]byte(fleettest.ForgedOwnerFleet))
	if err != nil {
		t.Fatal(err)
	}
	const mallory = 4242
	// host loads path with owner ("-": none given) and resolves a German
	// viewer: the host, or the error.
	host := func(path, owner string) string {
		t.Helper()
		script := `require 'RegiondTable.php';
try {
    $t = $argv[2] === '-' ? \Regiond\RegiondTable::load($argv[1]) : \Regiond\RegiondTable::load($argv[1], owner: $argv[2]);
    echo $t->resolve('DE', 'viewer-1')['host'];
} catch (\Regiond\TableException $e) { echo 'error: ', $e->getMessage(); }`
		out, err := exec.Command(bin, "-r", script, "--", path, owner).CombinedOutput()
		if err != nil {
			t.Fatalf("php: %v\n%s", err, out)
		}
		return string(out)
	}
	for _, withIndex := range []bool{true, false} {
		what := map[bool]string{true: "index", false: "JSON"}[withIndex]
		// The directory as the agent would have made it: /dev/shm/regiond.
		dir := filepath.Join(shmTempDir(t), "regiond")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "table.json")
		write := func(cfg *routing.Config) {
			t.Helper()
			tab := compile(t, cfg, routing.CompileOptions{Now: now})
			h := routing.JSONHeader{WrittenAt: now, SyncedAt: now}
			js, err := tab.JSONWith(nil, h)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, js, 0o644); err != nil {
				t.Fatal(err)
			}
			if withIndex {
				idx, err := snapindex.Encode(nil, tab, h)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "table.idx"), idx, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		// The agent's table, owned by the user named: it loads.
		write(agentCfg)
		if got := host(path, "0"); got != "edge-fra-1.example.net:443" {
			t.Fatalf("%s: the agent's own table (owner 0): %q, want the EU edge", what, got)
		}
		if got := host(path, "-"); !strings.Contains(got, defaultOwnerRefusal(t, dir, 0)) {
			t.Errorf("%s: the test's table, owned by uid 0, without an owner: %q, want refused: %q", what, got, defaultOwnerRefusal(t, dir, 0))
		}

		// Mallory's: her directory and files.
		write(forgedCfg)
		for _, f := range []string{dir, path, filepath.Join(dir, "table.idx")} {
			if err := os.Chown(f, mallory, mallory); err != nil && !(os.IsNotExist(err) && !withIndex) {
				t.Fatal(err)
			}
		}
		if got := host(path, "-"); !strings.HasPrefix(got, "error: ") || !strings.Contains(got, defaultOwnerRefusal(t, dir, mallory)) {
			t.Errorf("%s: a forged table in a directory of uid %d, without an owner: %q, want refused: %q", what, mallory, got, defaultOwnerRefusal(t, dir, mallory))
		}
		for _, owner := range []string{"0", "root"} {
			want := fmt.Sprintf("error: regiond: snapshot directory %s is owned by uid %d, not the agent's uid 0", dir, mallory)
			if owner == "root" {
				want += " (owner 'root')"
			}
			want += " nor root: refusing a table the agent may not have written; name the user the agent runs as"
			if got := host(path, owner); !strings.HasPrefix(got, want) {
				t.Errorf("%s: a forged table, owner %s: %q, want %q", what, owner, got, want)
			}
		}
		if got := host(path, ""); got != "edge-iad-9.example.net:443" {
			t.Errorf("%s: the forged table with owner '' (no check): %q, want its US edge (what the opt-out reads)", what, got)
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

// TestReaderRefusesWhatCouldBlockIt: with the owner given, a snapshot
// directory another user could have put a file in (writable by group or
// others, or owned by neither the agent nor root) is refused before any
// open, so a FIFO in the index's place cannot block fopen, and with it a
// php-fpm child, forever (it did, owner or not). A directory in the file's
// place is refused as no regular file.
func TestReaderRefusesWhatCouldBlockIt(t *testing.T) {
	php(t)
	t.Parallel()
	me := os.Getuid()
	meta := func(path string, owner int) phpTimes {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, php(t), filepath.Join("testdata", "driver.php"), "meta", path, "180", strconv.Itoa(owner)).Output()
		if ctx.Err() != nil {
			t.Fatalf("load(%s, owner %d) blocked (killed after 20 s)", path, owner)
		}
		var m phpTimes
		if err != nil || json.Unmarshal(out, &m) != nil {
			t.Fatalf("php meta %s: %v: %s", path, err, out)
		}
		return m
	}
	// A directory that is not there: the cause named (stat's own warning
	// names none; the PHP review).
	gone := filepath.Join(t.TempDir(), "gone")
	if m := meta(filepath.Join(gone, "table.json"), me); !strings.Contains(m.Error, "cannot stat snapshot directory "+gone+": ") ||
		!strings.Contains(m.Error, "No such file or directory") {
		t.Errorf("a snapshot directory that does not exist: %q, want the cause", m.Error)
	}
	open := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(open, "table.idx"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if m := meta(filepath.Join(open, "table.json"), me); m.Error != "regiond: snapshot directory "+open+" is writable by group or others (mode 0777): refusing a table the agent may not have written" {
		t.Errorf("a FIFO in a directory others may write: %q", m.Error)
	}

	// Another user's directory, 0755: as root, made so; else this user's,
	// with another owner asked for.
	theirs, owner := t.TempDir(), me+1
	if err := syscall.Mkfifo(filepath.Join(theirs, "table.idx"), 0o644); err != nil {
		t.Fatal(err)
	}
	dirUID := me
	if me == 0 {
		dirUID, owner = 4242, 4243
		if err := os.Chown(theirs, dirUID, dirUID); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("regiond: snapshot directory %s is owned by uid %d, not the agent's uid %d nor root", theirs, dirUID, owner)
	if m := meta(filepath.Join(theirs, "table.json"), owner); !strings.HasPrefix(m.Error, want) {
		t.Errorf("a FIFO in another user's directory: %q, want %q", m.Error, want)
	}

	mine := t.TempDir()
	if err := os.Mkdir(filepath.Join(mine, "table.idx"), 0o755); err != nil {
		t.Fatal(err)
	}
	if m := meta(filepath.Join(mine, "table.json"), me); !strings.Contains(m.Error, filepath.Join(mine, "table.idx")+" is not a regular file (mode 04") {
		t.Errorf("a directory in the index's place: %q", m.Error)
	}
}

// TestReaderFollowsALinkToTheAgentsDirectory: with the owner given, an
// index reached through a symlink (from a directory of the deployer's)
// has its target's directory checked: the agent's loads, and a link to a
// FIFO in a directory others may write is refused without blocking.
func TestReaderFollowsALinkToTheAgentsDirectory(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	agent := filepath.Dir(writeSnapshot(t, compile(t, fleet(t), routing.CompileOptions{Now: now}), routing.JSONHeader{WrittenAt: now, SyncedAt: now}, true))
	web := t.TempDir()
	if err := os.Chmod(web, 0o775); err != nil { // group-writable: the link's directory is not the agent's
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(agent, "table.idx"), filepath.Join(web, "table.idx")); err != nil {
		t.Fatal(err)
	}
	var m phpTimes
	if err := json.Unmarshal(runPHP(t, nil, "meta", filepath.Join(web, "table.json"), "180", strconv.Itoa(os.Getuid())), &m); err != nil || m.Error != "" {
		t.Fatalf("through a link to the agent's index: %+v %v", m, err)
	}

	open := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(open, "table.idx"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := t.TempDir()
	if err := os.Symlink(filepath.Join(open, "table.idx"), filepath.Join(link, "table.idx")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, php(t), filepath.Join("testdata", "driver.php"), "meta", filepath.Join(link, "table.json"), "180", strconv.Itoa(os.Getuid())).Output()
	if ctx.Err() != nil {
		t.Fatal("a link to a FIFO blocked the reader (killed after 20 s)")
	}
	if err != nil || json.Unmarshal(out, &m) != nil || !strings.Contains(m.Error, "snapshot directory "+open+" is writable by group or others") {
		t.Fatalf("a link to a FIFO in a directory others may write: %s %v", out, err)
	}
}
