package safedir

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// otherUID and otherGroup are ids that are not the test's own: as root (the
// tests' usual user) any id can be given to a file.
const otherUID, otherGID = 4242, 4243

// someGroup returns a group the test can give its directories: any as
// root, else one of its own (a supplementary group if it has one).
func someGroup(t *testing.T) int {
	if os.Geteuid() == 0 {
		return otherGID
	}
	gs, _ := os.Getgroups()
	for _, g := range gs {
		if g != os.Getegid() {
			return g
		}
	}
	return os.Getegid()
}

func stat(t *testing.T, dir string) (os.FileMode, *syscall.Stat_t) {
	t.Helper()
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode(), fi.Sys().(*syscall.Stat_t)
}

// TestEnsureCreates: a missing directory is created with exactly the mode
// asked for whatever the umask, with its missing parents, and with the
// group asked for; an existing good one is accepted as it is.
func TestEnsureCreates(t *testing.T) {
	old := syscall.Umask(0o077) // would make 0700 of a plain Mkdir(0755)
	defer syscall.Umask(old)
	base := t.TempDir()
	for _, tc := range []struct {
		name string
		dir  string
		mode os.FileMode
		gid  int
	}{
		{"default", filepath.Join(base, "regiond"), 0o755, NoGroup},
		{"with parents", filepath.Join(base, "a", "b", "regiond"), 0o755, NoGroup},
		{"snapshot group", filepath.Join(base, "grouped"), 0o750, someGroup(t)},
	} {
		if err := Ensure(tc.dir, "snapshot directory", tc.mode, tc.gid); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		mode, st := stat(t, tc.dir)
		if !mode.IsDir() || mode.Perm() != tc.mode {
			t.Errorf("%s: created %v, want a directory of mode %#o", tc.name, mode, tc.mode)
		}
		if int(st.Uid) != os.Geteuid() {
			t.Errorf("%s: created owned by uid %d, want %d", tc.name, st.Uid, os.Geteuid())
		}
		if tc.gid != NoGroup && int(st.Gid) != tc.gid {
			t.Errorf("%s: created with gid %d, want %d", tc.name, st.Gid, tc.gid)
		}
		// Again: it exists and is good.
		if err := Ensure(tc.dir, "snapshot directory", tc.mode, tc.gid); err != nil {
			t.Errorf("%s: an existing good directory refused: %v", tc.name, err)
		}
	}
	if err := Ensure(filepath.Join(base, "open"), "snapshot directory", 0o775, NoGroup); err == nil {
		t.Error("Ensure with a group-writable mode: no error")
	}
}

// TestRefusals: each way a directory is not the agent's own is refused,
// with an error naming the directory and what is wrong, and nothing is
// changed in it.
func TestRefusals(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	good := mk("good", 0o755)
	link := filepath.Join(base, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(base, "dangling")
	if err := os.Symlink(filepath.Join(base, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	foreign := "/" // root's: another user's unless the test runs as root
	if os.Geteuid() == 0 {
		foreign = mk("foreign", 0o755)
		if err := os.Chown(foreign, otherUID, otherGID); err != nil {
			t.Fatal(err)
		}
	}
	grouped := mk("grouped", 0o750)
	for _, tc := range []struct {
		name, dir string
		gid       int
		want      []string
	}{
		{"symlink", link, NoGroup, []string{"is a symbolic link", good}},
		{"dangling symlink", dangling, NoGroup, []string{"is a symbolic link"}},
		{"other owner", foreign, NoGroup, []string{"is owned by uid", "not by the agent's user"}},
		{"group-writable", mk("gw", 0o775), NoGroup, []string{"writable by group (mode 0775)", "chmod go-w"}},
		{"world-writable", mk("ww", 0o757), NoGroup, []string{"writable by others (mode 0757)"}},
		{"both", mk("all", 0o777), NoGroup, []string{"writable by group and others (mode 0777)"}},
		{"not a directory", file, NoGroup, []string{"is not a directory"}},
		{"read-only", mk("ro", 0o555), NoGroup, []string{"is not writable and searchable by its owner (mode 0555)", "chmod u+wx"}},
		{"other group", grouped, otherGID + 1, []string{"has group gid", "chgrp"}},
	} {
		for _, f := range []func() error{
			func() error { return Check(tc.dir, "snapshot directory", tc.gid) },
			func() error { return Ensure(tc.dir, "snapshot directory", 0o755, tc.gid) },
		} {
			err := f()
			if err == nil {
				t.Errorf("%s: %s accepted", tc.name, tc.dir)
				continue
			}
			for _, w := range append(tc.want, "snapshot directory "+tc.dir) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not say %q", tc.name, err, w)
				}
			}
		}
	}
	if target, err := os.Readlink(link); err != nil || target != good {
		t.Errorf("the refused link changed: %q %v", target, err)
	}
	if _, err := os.Lstat(filepath.Join(base, "nowhere")); !os.IsNotExist(err) {
		t.Errorf("Ensure created the target of a dangling link: %v", err)
	}
	if mode, _ := stat(t, filepath.Join(base, "all")); mode.Perm() != 0o777 {
		t.Errorf("a refused directory's mode changed to %#o", mode.Perm())
	}
}

// TestRemoveMadeRemovesOnlyWhatItMade: EnsureMade returns the directory
// and the parents it made, not those that were there; RemoveMade removes
// them deepest first, leaves one that is not empty, and leaves a file put
// in its place meanwhile.
func TestRemoveMadeRemovesOnlyWhatItMade(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "x", "y", "z")
	made, err := EnsureMade(dir, "test directory", 0o755, NoGroup)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range made {
		paths = append(paths, m.Path)
	}
	if want := []string{filepath.Join(base, "x"), filepath.Join(base, "x", "y"), dir}; !slices.Equal(paths, want) {
		t.Fatalf("made %v, want %v", paths, want)
	}
	if again, err := EnsureMade(dir, "test directory", 0o755, NoGroup); err != nil || len(again) != 0 {
		t.Fatalf("EnsureMade of an existing directory: made %v, %v; want nothing made", again, err)
	}
	RemoveMade(made)
	if _, err := os.Lstat(filepath.Join(base, "x")); !os.IsNotExist(err) {
		t.Fatalf("after RemoveMade %s is still there (%v)", filepath.Join(base, "x"), err)
	}

	// Not empty: it stays, and so do its parents.
	made, err = EnsureMade(dir, "test directory", 0o755, NoGroup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	RemoveMade(made)
	if _, err := os.Stat(filepath.Join(dir, "f")); err != nil {
		t.Fatalf("RemoveMade removed a directory that was not empty: %v", err)
	}
	os.RemoveAll(filepath.Join(base, "x"))

	// Replaced meanwhile by a file: it stays.
	made, err = EnsureMade(dir, "test directory", 0o755, NoGroup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	RemoveMade(made)
	if _, err := os.Lstat(dir); err != nil {
		t.Fatalf("RemoveMade removed a file someone put in the place of its directory: %v", err)
	}
}

// TestCreateRefusedNamesFix: a directory the agent's user may not create
// (its parent is not the user's) is refused with what to do: the parent,
// its owner, and the command that makes the directory for the user. As
// root (who may create anything) the test runs itself as another user.
func TestCreateRefusedNamesFix(t *testing.T) {
	if dir := os.Getenv("SAFEDIR_TEST_CREATE"); dir != "" {
		_, err := EnsureMade(dir, "socket directory", 0o750, NoGroup)
		if err == nil {
			os.Stdout.WriteString("created")
			return
		}
		os.Stdout.WriteString(err.Error())
		return
	}
	base := t.TempDir()
	parent := filepath.Join(base, "run")
	if err := os.Mkdir(parent, 0o555); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(parent, "regiond")
	var msg string
	if os.Geteuid() != 0 {
		_, err := EnsureMade(want, "socket directory", 0o750, NoGroup)
		if err == nil {
			t.Fatalf("created %s in a parent of mode 0555", want)
		}
		msg = err.Error()
	} else {
		// Another user needs the test binary and the path to it.
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(base, "safedir.test")
		data, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		for d := base; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bin, "-test.run=^TestCreateRefusedNamesFix$")
		cmd.Env = append(os.Environ(), "SAFEDIR_TEST_CREATE="+want)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherGID}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("running as uid %d: %v: %s", otherUID, err, out)
		}
		msg = strings.TrimSuffix(string(out), "PASS\n")
	}
	for _, w := range []string{
		"create socket directory " + want, "permission denied",
		"may not create directories in " + parent, "mode 0555",
		"install -d -o ", "-m 0750 " + want, "RuntimeDirectory=",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
	if _, err := os.Lstat(want); err == nil {
		t.Errorf("%s was created", want)
	}
}
