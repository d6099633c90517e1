// Package atomicfile replaces a file atomically and durably: a temp file in
// the same directory, the buffers written (gathered by writev), fsync,
// rename, close, fsync of the directory. A reader in any language sees
// either the old file or the new one, never a torn or empty one, and after
// a crash the rename is not lost. It knows nothing of what the bytes are.
//
// WriteFile replaces a file once; a File keeps the next temp file prepared
// for a path written again and again.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// ErrSymlink is returned when the path to replace is a symbolic link.
var ErrSymlink = errors.New("atomicfile: path is a symbolic link; refusing to write through it")

// fileCalls are the system calls that replace the file: a seam through
// which tests record their order and the directory of the temp file.
type fileCalls struct {
	open   func(path string, mode int, perm uint32) (fd int, err error)
	writev func(fd int, iovs [][]byte) (n int, err error)
	fsync  func(fd int) error
	rename func(from, to string) error
}

// sys is the seam; the default is the system calls themselves.
var sys = fileCalls{open: syscall.Open, writev: writev, fsync: syscall.Fsync, rename: syscall.Rename}

// WriteFile atomically replaces path with data, mode perm. The directory
// is created (0755) if missing. A symlink at path is refused.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return writeFile(path, [][]byte{data}, perm, MkdirAll)
}

// MkdirAll creates dir and its parents, 0755, if missing: the default
// Options.EnsureDir.
func MkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("atomicfile: create directory %s: %w", dir, err)
	}
	return nil
}

// writeFile is WriteFile of the concatenation of segs, the directory
// readied by ensureDir.
func writeFile(path string, segs [][]byte, perm os.FileMode, ensureDir func(dir string) error) error {
	dir := filepath.Dir(path)
	if err := ensureDir(dir); err != nil {
		return err
	}
	if err := refuseSymlink(path); err != nil {
		return err
	}
	tmp, err := createTemp(dir, filepath.Base(path), perm, 0)
	if err != nil {
		return err
	}
	if err := tmp.commit(path, segs); err != nil {
		return err
	}
	return syncDir(dir)
}

// tempPrefix is the name prefix of the temp files for the file base:
// they match .<base>.tmp-*.
func tempPrefix(base string) string { return "." + base + ".tmp-" }

// refuseSymlink returns ErrSymlink when path is a symbolic link.
func refuseSymlink(path string) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return fmt.Errorf("write %s: %w", path, ErrSymlink)
	}
	return nil
}

// tempFile is an open, empty temp file beside the target, held as a raw
// descriptor (no os.File: no poller registration, no finalizer).
type tempFile struct {
	fd   int
	name string
}

// createTemp creates a new temp file .<base>.tmp-<random> in dir with mode
// perm (regardless of the umask) and, when prealloc > 0, that many bytes
// of blocks allocated without changing its size (if the file system can).
func createTemp(dir, base string, perm os.FileMode, prealloc int64) (*tempFile, error) {
	prefix := filepath.Join(dir, tempPrefix(base))
	for try := 0; ; try++ {
		name := prefix + strconv.FormatUint(rand.Uint64(), 36)
		fd, err := ignoringEINTR(func() (int, error) {
			return sys.open(name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
		})
		if errors.Is(err, syscall.EEXIST) && try < 100 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("atomicfile: create temp file in %s: %w", dir, err)
		}
		t := &tempFile{fd: fd, name: name}
		if err := syscall.Fchmod(fd, uint32(perm.Perm())); err != nil {
			t.discard()
			return nil, fmt.Errorf("atomicfile: chmod %s: %w", name, err)
		}
		if prealloc > 0 {
			preallocate(fd, prealloc) // an optimisation only: errors do not matter
		}
		return t, nil
	}
}

// commit writes the concatenation of segs into the temp file (the kernel
// gathers them: writev), fsyncs it, renames it to path and closes it. On
// error the temp file is closed and removed.
func (t *tempFile) commit(path string, segs [][]byte) (err error) {
	defer func() {
		if err != nil {
			t.discard()
		}
	}()
	if err := writevAll(segs, func(iovs [][]byte) (int, error) { return sys.writev(t.fd, iovs) }); err != nil {
		return fmt.Errorf("atomicfile: write %s: %w", t.name, err)
	}
	if err := sys.fsync(t.fd); err != nil {
		return fmt.Errorf("atomicfile: fsync %s: %w", t.name, err)
	}
	// The data is durable: publish it first, close after (one system call
	// less between the change and readers seeing it).
	if err := sys.rename(t.name, path); err != nil {
		return fmt.Errorf("atomicfile: rename into %s: %w", path, &os.LinkError{Op: "rename", Old: t.name, New: path, Err: err})
	}
	syscall.Close(t.fd) // after a successful fsync, close has nothing left to report
	t.fd = -1
	return nil
}

// discard closes the temp file if open and removes it.
func (t *tempFile) discard() {
	if t.fd >= 0 {
		syscall.Close(t.fd)
		t.fd = -1
	}
	syscall.Unlink(t.name)
}

// iovMax is the most buffers one writev takes (IOV_MAX on Linux and the
// BSDs).
const iovMax = 1024

// writevAll writes all of segs, in order, through writev, which may write
// fewer bytes than given (then it is called again for the rest) and is
// given at most iovMax buffers at a time. EINTR is retried. segs itself is
// left as it is.
func writevAll(segs [][]byte, writev func(iovs [][]byte) (int, error)) error {
	for i, off := 0, 0; ; { // next byte: segs[i][off]
		for i < len(segs) && off == len(segs[i]) {
			i, off = i+1, 0
		}
		if i == len(segs) {
			return nil
		}
		iovs := segs[i:min(len(segs), i+iovMax)]
		if off > 0 { // after a short write: the rest of this segment alone
			iovs = [][]byte{segs[i][off:]}
		}
		n, err := writev(iovs)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return io.ErrShortWrite
		}
		for n > 0 {
			if i == len(segs) {
				return fmt.Errorf("writev reported more bytes than given")
			}
			rest := len(segs[i]) - off
			if n < rest {
				off += n
				break
			}
			i, off, n = i+1, 0, n-rest
		}
	}
}

// syncDir fsyncs the directory dir, so a rename in it survives a crash.
func syncDir(dir string) error {
	fd, err := ignoringEINTR(func() (int, error) {
		return sys.open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	})
	if err != nil {
		return fmt.Errorf("atomicfile: open directory %s: %w", dir, err)
	}
	defer syscall.Close(fd)
	if err := sys.fsync(fd); err != nil && err != syscall.EINVAL {
		return fmt.Errorf("atomicfile: fsync directory %s: %w", dir, err)
	}
	return nil
}

// ignoringEINTR calls open until it does not fail with EINTR.
func ignoringEINTR(open func() (int, error)) (int, error) {
	for {
		fd, err := open()
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// ReadFile reads path without following a symlink at its last element,
// and refuses anything there but a regular file: opened without blocking,
// a FIFO put at the path does not hang the reader until a writer comes.
func ReadFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("read %s: %w", path, ErrSymlink)
		}
		return nil, fmt.Errorf("atomicfile: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("atomicfile: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("atomicfile: read %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("atomicfile: read %s: %w", path, err)
	}
	return b, nil
}
