package agent_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/routing"
)

// otherUID, otherGID are ids that are not the test's (it runs as root, which
// may give any id to a file).
const otherUID, otherGID = 4242, 4243

// forgedTable plants a table.json in dir that sends PL viewers to a pool
// nobody configured, as a local attacker would.
func forgedTable(t *testing.T, dir string) {
	t.Helper()
	kvs := []routing.KV{
		{Key: "pools/evil", Value: []byte(`{"host":"evil.example.net","residency":"eu"}`)},
		{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"evil","weight":100}]}`)},
	}
	b, err := routing.Compile(999, kvs, nil, routing.CompileOptions{Now: time.Now()}).JSON(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "table.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// offlineConfig is an agent config whose files are in dir, for tests that
// never get as far as etcd.
func offlineConfig(dir string) agent.Config {
	cfg := agent.DefaultConfig()
	cfg.Endpoints = []string{"http://127.0.0.1:1"}
	cfg.Node, cfg.Logger = "node-1", quietLogger()
	cfg.Socket = filepath.Join(dir, "run", "regiond.sock")
	cfg.Listen = "127.0.0.1:0"
	cfg.Snapshot = filepath.Join(dir, "shm", "table.json")
	return cfg
}

// tcpConfig is an agent of node on endpoints with its API on loopback TCP
// alone (a free port), its snapshot under dir/shm and a quiet logger.
func tcpConfig(dir string, endpoints []string, node string) agent.Config {
	cfg := agent.DefaultConfig()
	cfg.Endpoints, cfg.Node, cfg.Logger = endpoints, node, quietLogger()
	cfg.Socket, cfg.Listen, cfg.Snapshot = "", "127.0.0.1:0", filepath.Join(dir, "shm", "table.json")
	return cfg
}

// TestRefusesADirectoryNotItsOwn: the agent does not start when the
// snapshot directory (or the socket's) is a symbolic link, is another
// user's, or is writable by group or others; the error names the
// directory and what is wrong, and the table planted there is not read.
func TestRefusesADirectoryNotItsOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test gives a directory to another user: run it as root (as CI does)")
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) // dir: the directory, still missing
		want  string
	}{
		{"symlink", func(t *testing.T, dir string) {
			target := dir + ".real"
			mkdir(t, target, 0o755)
			forgedTable(t, target)
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link"},
		{"other owner", func(t *testing.T, dir string) {
			mkdir(t, dir, 0o755)
			forgedTable(t, dir)
			if err := os.Chown(dir, otherUID, otherGID); err != nil {
				t.Fatal(err)
			}
		}, "is owned by uid " + strconv.Itoa(otherUID)},
		{"group-writable", func(t *testing.T, dir string) { mkdir(t, dir, 0o775); forgedTable(t, dir) },
			"is writable by group (mode 0775)"},
		{"world-writable", func(t *testing.T, dir string) { mkdir(t, dir, 0o777); forgedTable(t, dir) },
			"is writable by group and others (mode 0777)"},
		{"world-writable sticky", func(t *testing.T, dir string) { mkdir(t, dir, 0o777|os.ModeSticky); forgedTable(t, dir) },
			"is writable by group and others (mode 0777)"},
	} {
		for _, which := range []string{"snapshot", "socket"} {
			t.Run(tc.name+"/"+which, func(t *testing.T) {
				base := t.TempDir()
				cfg := offlineConfig(base)
				dir := filepath.Join(base, "shm")
				if which == "socket" {
					dir = filepath.Join(base, "run")
				}
				tc.setup(t, dir)
				a, err := agent.New(cfg)
				if err == nil {
					stopOffline(t, a)
					t.Fatalf("the agent started with a %s directory that %s", which, tc.want)
				}
				for _, w := range []string{which + " directory " + dir, tc.want} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
			})
		}
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// stopOffline runs a with a context already done: it closes the listeners.
func stopOffline(t *testing.T, a *agent.Agent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Errorf("Run: %v", err)
	}
}

func dirMode(t *testing.T, dir string) (os.FileMode, uint32) {
	t.Helper()
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid
}

// TestCreatesTheSnapshotDirectory: a missing snapshot directory (and its
// missing parents) is created 0755, whatever the umask; with
// --snapshot-group, 0750 of that group. The socket's is created 0750.
// An unknown group is refused before anything is created.
func TestCreatesTheSnapshotDirectory(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	cfg := offlineConfig(base)
	cfg.Snapshot = filepath.Join(base, "a", "b", "regiond", "table.json")
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopOffline(t, a)
	if mode, _ := dirMode(t, filepath.Dir(cfg.Snapshot)); mode != os.ModeDir|0o755 {
		t.Errorf("snapshot directory created %v, want drwxr-xr-x", mode)
	}
	if mode, _ := dirMode(t, filepath.Dir(cfg.Socket)); mode != os.ModeDir|0o750 {
		t.Errorf("socket directory created %v, want drwxr-x---", mode)
	}

	cfg = offlineConfig(t.TempDir())
	cfg.SnapshotGroup = strconv.Itoa(otherGID)
	if a, err = agent.New(cfg); err != nil {
		t.Fatal(err)
	}
	stopOffline(t, a)
	if mode, gid := dirMode(t, filepath.Dir(cfg.Snapshot)); mode != os.ModeDir|0o750 || gid != otherGID {
		t.Errorf("snapshot directory created %v of gid %d, want drwxr-x--- of gid %d", mode, gid, otherGID)
	}
	// Restarted with another group: refused, the directory as it was.
	cfg.SnapshotGroup = strconv.Itoa(otherGID + 1)
	if a, err := agent.New(cfg); err == nil {
		stopOffline(t, a)
		t.Error("started with a snapshot directory of another group than --snapshot-group")
	} else if !strings.Contains(err.Error(), "has group gid 4243") {
		t.Errorf("error %q does not name the directory's group", err)
	}

	cfg = offlineConfig(t.TempDir())
	cfg.SnapshotGroup = "no-such-group-regiond"
	if _, err := agent.New(cfg); err == nil || !strings.Contains(err.Error(), "--snapshot-group") {
		t.Errorf("an unknown --snapshot-group: err %v, want one naming the flag", err)
	}
	if _, err := os.Lstat(filepath.Dir(cfg.Snapshot)); !os.IsNotExist(err) {
		t.Errorf("the snapshot directory was created for an unknown group: %v", err)
	}
}

// TestWriterRecreatesTheDirectoryAsAtStart: a snapshot directory removed
// while the agent runs is created again as at start (0750 of
// --snapshot-group) by the next write; one put back by someone else is
// not written into.
func TestWriterRecreatesTheDirectoryAsAtStart(t *testing.T) {
	srv, cli := exampleEtcd(t)
	dir := t.TempDir()
	cfg := offlineConfig(dir)
	cfg.Endpoints, cfg.DialTimeout, cfg.StatusTTL = srv.Endpoints, time.Second, 2*time.Second
	cfg.SnapshotGroup = strconv.Itoa(otherGID)
	h := runAgent(t, dir, cfg)
	shm := filepath.Dir(cfg.Snapshot)
	// The index goes after the JSON, and its next temp file is prepared
	// last: once that is there, the write is over (a removal racing with
	// it would find the directory not empty: it failed so in CI).
	written := func(rev int64) func() bool {
		return func() bool {
			s := h.snapshot()
			_, err := os.Stat(filepath.Join(shm, "table.idx"))
			prepared, _ := filepath.Glob(filepath.Join(shm, ".table.idx.tmp-*"))
			return s != nil && s.Revision() >= rev && err == nil && len(prepared) > 0
		}
	}
	waitFor(t, "snapshot written", written(0))
	if err := os.RemoveAll(shm); err != nil {
		t.Fatal(err)
	}
	p, err := cli.Put(context.Background(), prefix+"routes/DE", `{"targets":[{"pool":"eu-north","weight":100}]}`)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "snapshot rewritten", written(p.Header.Revision))
	if mode, gid := dirMode(t, shm); mode != os.ModeDir|0o750 || gid != otherGID {
		t.Fatalf("snapshot directory recreated %v of gid %d, want drwxr-x--- of gid %d", mode, gid, otherGID)
	}

	// Someone else's directory in its place: not written into.
	if err := os.RemoveAll(shm); err != nil {
		t.Fatal(err)
	}
	mkdir(t, shm, 0o777)
	before := counter(t, h, "regiond_snapshot_errors_total")
	if _, err := cli.Put(context.Background(), prefix+"routes/DE", `{"targets":[{"pool":"eu-west","weight":100}]}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refused write counted", func() bool { return counter(t, h, "regiond_snapshot_errors_total") > before })
	if ents, _ := os.ReadDir(shm); len(ents) != 0 {
		t.Fatalf("the writer wrote into a world-writable directory: %v", ents)
	}
}

// TestRefusesASnapshotPathThatIsNoFile: a --snapshot (or its index) that
// is a directory, a symbolic link or a FIFO stops the agent at start,
// naming the path and what it is; a path ending in '/' is refused before
// anything is created. The agent started and failed every write for ever,
// /readyz saying ready.
func TestRefusesASnapshotPathThatIsNoFile(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
		make             func(path string) error
	}{
		{"directory", "table.json", "is a directory, not a file", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"symlink", "table.json", "is a symbolic link, not a file", func(p string) error { return os.Symlink("/dev/null", p) }},
		{"index FIFO", "table.idx", "is a FIFO, not a file", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			cfg := offlineConfig(base)
			mkdir(t, filepath.Dir(cfg.Snapshot), 0o755)
			path := filepath.Join(filepath.Dir(cfg.Snapshot), tc.file)
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			a, err := agent.New(cfg)
			if err == nil {
				stopOffline(t, a)
				t.Fatalf("the agent started with %s a %s", path, tc.name)
			}
			if !strings.Contains(err.Error(), "--snapshot "+cfg.Snapshot+": "+path+" "+tc.want) {
				t.Errorf("error %q, want it to name --snapshot, %s and %q", err, path, tc.want)
			}
		})
	}
	// A FIFO at --snapshot-copy, read at start while the snapshot is
	// missing, blocked the start (the open waits for a writer) with
	// nothing logged.
	t.Run("copy FIFO", func(t *testing.T) {
		base := t.TempDir()
		cfg := offlineConfig(base)
		cfg.SnapshotCopy = filepath.Join(base, "state", "table.json")
		mkdir(t, filepath.Dir(cfg.SnapshotCopy), 0o755)
		if err := syscall.Mkfifo(cfg.SnapshotCopy, 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			a, err := agent.New(cfg)
			if err == nil {
				stopOffline(t, a)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if want := "--snapshot-copy " + cfg.SnapshotCopy + ": " + cfg.SnapshotCopy + " is a FIFO, not a file"; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want %q", err, want)
			}
		case <-time.After(30 * time.Second): // a hang guard
			// Unblock the open, so the goroutine ends.
			if f, err := os.OpenFile(cfg.SnapshotCopy, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
			t.Fatal("agent.New blocked on a FIFO at --snapshot-copy")
		}
	})
	base := t.TempDir()
	cfg := offlineConfig(base)
	cfg.Snapshot = filepath.Join(base, "shm") + "/"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "names a directory: give the file's path") {
		t.Errorf("--snapshot %s: %v, want it refused as a directory", cfg.Snapshot, err)
	}
	if _, err := os.Stat(cfg.Snapshot); !os.IsNotExist(err) {
		t.Errorf("--snapshot %s: created before being refused (%v)", cfg.Snapshot, err)
	}
}

// TestListenErrorsNameTheFlag: a --listen port in use and a --socket path
// that is no socket are refused naming the flag (they said "listen on
// …" and "socket path …"), and the failed start removes the directories
// it made, and only those.
func TestListenErrorsNameTheFlag(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := offlineConfig(t.TempDir())
	cfg.Listen = taken.Addr().String()
	if a, err := agent.New(cfg); err == nil {
		stopOffline(t, a)
		t.Fatal("started on a port in use")
	} else if !strings.Contains(err.Error(), "--listen "+cfg.Listen+": ") || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("port in use: %v, want it to name --listen", err)
	}
	// The failed start left neither directory it made behind (one made
	// by the wrong user would refuse the right one's next start).
	for _, dir := range []string{filepath.Dir(cfg.Snapshot), filepath.Dir(cfg.Socket)} {
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("the failed start left %s behind (%v), which it made", dir, err)
		}
	}
	// Nor the parents it made, nor one holding the other.
	for _, tc := range []struct{ snapshot, socket, top string }{
		{"a/b/c/table.json", "a/b/sock/regiond.sock", "a"},
		{"r/table.json", "r/sock/regiond.sock", "r"},
		{"s/sock/table.json", "s/regiond.sock", "s"},
	} {
		base := t.TempDir()
		cfg := offlineConfig(base)
		cfg.Listen = taken.Addr().String()
		cfg.Snapshot, cfg.Socket = filepath.Join(base, tc.snapshot), filepath.Join(base, tc.socket)
		if a, err := agent.New(cfg); err == nil {
			stopOffline(t, a)
			t.Fatal("started on a port in use")
		}
		if _, err := os.Lstat(filepath.Join(base, tc.top)); !os.IsNotExist(err) {
			t.Errorf("--snapshot %s --socket %s: the failed start left %s behind (%v), which it made", tc.snapshot, tc.socket, tc.top, err)
		}
	}
	cfg = offlineConfig(t.TempDir())
	mkdir(t, filepath.Dir(cfg.Socket), 0o755)
	if err := os.WriteFile(cfg.Socket, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if a, err := agent.New(cfg); err == nil {
		stopOffline(t, a)
		t.Fatal("started over a file at --socket")
	} else if !strings.Contains(err.Error(), "--socket "+cfg.Socket+" exists and is not a socket") {
		t.Errorf("a file at --socket: %v, want it to name --socket", err)
	}
	// It removed the snapshot directory it made, not the socket's, which
	// it found.
	if _, err := os.Lstat(filepath.Dir(cfg.Snapshot)); !os.IsNotExist(err) {
		t.Errorf("the failed start left %s behind (%v), which it made", filepath.Dir(cfg.Snapshot), err)
	}
	if _, err := os.Stat(cfg.Socket); err != nil {
		t.Errorf("the failed start removed what was at --socket: %v", err)
	}
}
