package safedir

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestEnsureMadeRemovesWhatFailsCheck protects EnsureMade's clean-up: a
// directory it created that then fails Check (here: a mode its owner may
// not write in) is removed, with the parents it made, and not left for
// the next start to refuse.
func TestEnsureMadeRemovesWhatFailsCheck(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b", "regiond")
	made, err := EnsureMade(dir, "snapshot directory", 0o500, NoGroup)
	if err == nil || !strings.Contains(err.Error(), "not writable and searchable") {
		t.Fatalf("EnsureMade of mode 0500 = %v, %v; want refused as not writable", made, err)
	}
	if _, err := os.Lstat(filepath.Join(base, "a")); !os.IsNotExist(err) {
		t.Fatalf("after the refusal %s is still there (%v)", filepath.Join(base, "a"), err)
	}
}

// TestRemoveMadeLeavesAnotherDirectory protects RemoveMade's identity
// check: an empty directory someone else put in the place of one it made
// (same path, another inode) stays.
func TestRemoveMadeLeavesAnotherDirectory(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "regiond")
	made, err := EnsureMade(dir, "snapshot directory", 0o755, NoGroup)
	if err != nil {
		t.Fatal(err)
	}
	// Renamed away first, so the new one cannot reuse its inode.
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	RemoveMade(made)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("RemoveMade removed a directory it did not make: %v", err)
	}
}

// TestParentsMadeWithTheirOwnMode protects the parents' mode: missing
// parents are made 0755 (less the umask), not with the directory's own
// mode, so that a snapshot directory of mode 0750 for a group does not
// shut others out of a parent they must pass through.
func TestParentsMadeWithTheirOwnMode(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	base := t.TempDir()
	dir := filepath.Join(base, "p", "q", "regiond")
	if err := Ensure(dir, "snapshot directory", 0o700, NoGroup); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(base, "p"), filepath.Join(base, "p", "q")} {
		if mode, _ := stat(t, p); mode.Perm() != 0o755 {
			t.Errorf("parent %s made with mode %#o, want 0755", p, mode.Perm())
		}
	}
	if mode, _ := stat(t, dir); mode.Perm() != 0o700 {
		t.Errorf("%s made with mode %#o, want 0700", dir, mode.Perm())
	}
}

// TestCheckRequiresSearch protects the owner's search bit: a directory
// its owner may write but not search (0655) is refused, as the agent
// could not publish in it; write and search without read (0300) is
// enough.
func TestCheckRequiresSearch(t *testing.T) {
	base := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o655, false}, {0o300, true}} {
		d := filepath.Join(base, tc.mode.String())
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, tc.mode); err != nil {
			t.Fatal(err)
		}
		err := Check(d, "snapshot directory", NoGroup)
		if tc.ok && err != nil {
			t.Errorf("mode %#o refused: %v", tc.mode, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "not writable and searchable by its owner")) {
			t.Errorf("mode %#o: %v, want refused as not searchable", tc.mode, err)
		}
	}
}

// TestEnsureRefusesAnOpenModeForAnExistingDirectory protects the check of
// the mode asked for: one writable by group or others is refused even
// when the directory already exists (and so would pass Check as it is).
func TestEnsureRefusesAnOpenModeForAnExistingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "regiond")
	if err := Ensure(dir, "snapshot directory", 0o755, NoGroup); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o775, 0o757} {
		if err := Ensure(dir, "snapshot directory", mode, NoGroup); err == nil || !strings.Contains(err.Error(), "would be writable by") {
			t.Errorf("Ensure of an existing directory with mode %#o = %v, want refused", mode, err)
		}
	}
}
