// Package safedir makes and checks the directories the agent publishes
// into: the snapshot file's and the API socket's. Another local user who
// can write such a directory, or who owns it, or who chose where a
// symbolic link in its place points, can swap in a forged table.json (or
// socket) that every front door then follows. So the agent creates the
// directory itself when it is missing and refuses to start when it is not
// its own.
//
// Only the directory itself is checked, not its parents. A parent that
// others may write must be sticky, as /dev/shm and /tmp are, or they can
// rename the directory away and put their own in its place; /run, where
// systemd's RuntimeDirectory= creates the service's directory, is root's.
package safedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// NoGroup is the gid to give Ensure or Check to ask for no particular group.
const NoGroup = -1

// Ensure makes dir ready to publish into. When it is missing it is
// created with mode (exactly: the umask does not apply) and, unless gid is
// NoGroup, group gid; missing parents are created too, 0755 (less the
// umask). Then, created or not, it must pass Check. what names the
// directory in errors ("snapshot directory").
func Ensure(dir, what string, mode os.FileMode, gid int) error {
	_, err := EnsureMade(dir, what, mode, gid)
	return err
}

// Made is a directory EnsureMade created: its path and what it was just
// after (RemoveMade removes it only while it is still that directory).
type Made struct {
	// Path is the directory's path.
	Path string
	info os.FileInfo
}

// EnsureMade is Ensure, and also returns the directories it created,
// parents first (not those made by others meanwhile), so that a caller
// giving up later can remove them (RemoveMade). When it fails it removes
// them itself.
func EnsureMade(dir, what string, mode os.FileMode, gid int) ([]Made, error) {
	if mode.Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s %s: mode %#o would be writable by group or others", what, dir, mode.Perm())
	}
	var made []Made
	var err error
	if _, lerr := os.Lstat(dir); errors.Is(lerr, fs.ErrNotExist) {
		if made, err = create(dir, mode, gid); err != nil {
			err = fmt.Errorf("create %s %s: %w%s", what, dir, err, createHint(dir, mode, err))
		}
	}
	if err == nil {
		err = Check(dir, what, gid)
	}
	if err != nil {
		RemoveMade(made)
		return nil, err
	}
	return made, nil
}

// RemoveMade removes the directories made, deepest first, each only while
// it is an empty directory, the one that was made (same device and inode);
// what it cannot remove stays.
func RemoveMade(made []Made) {
	for i := len(made) - 1; i >= 0; i-- {
		if fi, err := os.Lstat(made[i].Path); err == nil && fi.IsDir() && os.SameFile(fi, made[i].info) {
			os.Remove(made[i].Path) // fails, harmlessly, if not empty
		}
	}
}

// create makes dir, missing parents first (0755 less the umask), with
// mode and group gid, and returns the directories it made. A directory
// made by someone else meanwhile is not among them, and is left to Check.
func create(dir string, mode os.FileMode, gid int) ([]Made, error) {
	var missing []string // dir's missing parents, deepest first
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	var made []Made
	mkdir := func(p string, perm os.FileMode) (bool, error) {
		if err := os.Mkdir(p, perm); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return false, nil
			}
			return false, err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return false, err
		}
		made = append(made, Made{Path: p, info: fi})
		return true, nil
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if _, err := mkdir(missing[i], 0o755); err != nil {
			return made, err
		}
	}
	mine, err := mkdir(dir, mode.Perm())
	if err != nil || !mine {
		return made, err
	}
	if gid != NoGroup {
		if err := os.Lchown(dir, -1, gid); err != nil {
			return made, fmt.Errorf("give it group %s (the agent's user must be a member of it): %w", groupName(gid), err)
		}
	}
	if err := os.Chmod(dir, mode.Perm()); err != nil {
		return made, err
	}
	return made, nil
}

// Check returns an error naming dir (as what), what is wrong and how to
// fix it, unless dir is a directory (not a symbolic link to one), owned by
// the process's effective user, writable and searchable by it, writable by
// neither its group nor others and, unless gid is NoGroup, of group gid.
func Check(dir, what string, gid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, dir, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		to, _ := os.Readlink(dir)
		return fmt.Errorf("%s %s is a symbolic link (to %q), refused: whoever controls the link chooses where the agent publishes; use a real directory owned by the agent's user (or remove the link and the agent creates one)", what, dir, to)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s %s is not a directory (mode %v)", what, dir, fi.Mode())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s %s: its owner is unknown on this system", what, dir)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return fmt.Errorf("%s %s is owned by %s, not by the agent's user %s: its owner could replace the files in it; remove it (the agent creates it) or chown it to the agent's user",
			what, dir, userName(int(st.Uid)), userName(euid))
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s %s is writable by %s (mode %#o): they could replace the files in it; chmod go-w %s",
			what, dir, writers(perm), perm, dir)
	}
	if perm := fi.Mode().Perm(); perm&0o300 != 0o300 {
		return fmt.Errorf("%s %s is not writable and searchable by its owner (mode %#o): the agent could not publish in it; chmod u+wx %s",
			what, dir, perm, dir)
	}
	if gid != NoGroup && int(st.Gid) != gid {
		return fmt.Errorf("%s %s has group %s, not %s: its readers may not get in; chgrp %s %s (or remove it: the agent creates it)",
			what, dir, groupName(int(st.Gid)), groupName(gid), strconv.Itoa(gid), dir)
	}
	return nil
}

// createHint is what to do when creating dir failed with err because the
// agent's user may not write the parent it was making it in: "" for any
// other failure.
func createHint(dir string, mode os.FileMode, err error) string {
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrPermission) || !errors.As(err, &pe) {
		return ""
	}
	parent := filepath.Dir(pe.Path)
	owner := ""
	if fi, err := os.Stat(parent); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = fmt.Sprintf(" (owned by %s, mode %#o)", userName(int(st.Uid)), fi.Mode().Perm())
		}
	}
	name := strconv.Itoa(os.Geteuid())
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	return fmt.Sprintf(": the agent's user %s may not create directories in %s%s; "+
		"create %s for it (install -d -o %s -m %#o %s; under systemd, RuntimeDirectory= makes one in /run, StateDirectory= one in /var/lib) "+
		"or choose a path in a directory that user owns",
		userName(os.Geteuid()), parent, owner, dir, name, mode.Perm(), dir)
}

// writers names who the write bits of perm (0o022) let in.
func writers(perm os.FileMode) string {
	switch perm & 0o022 {
	case 0o022:
		return "group and others"
	case 0o020:
		return "group"
	default:
		return "others"
	}
}

// userName is "uid N (name)", or "uid N" when the name is unknown.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

// groupName is "gid N (name)", or "gid N" when the name is unknown.
func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return fmt.Sprintf("gid %d (%s)", gid, g.Name)
	}
	return fmt.Sprintf("gid %d", gid)
}
