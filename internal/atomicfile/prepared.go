package atomicfile

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Options configure a File.
type Options struct {
	// EnsureDir readies the directory for a write without a prepared temp
	// file (the directory was removed, say): it creates the directory, or
	// returns why it must not be written into. Default MkdirAll.
	EnsureDir func(dir string) error
	// Logger gets what the File does on its own (leftover temp files
	// removed). Default slog.Default().
	Logger *slog.Logger
}

// File replaces one path atomically like WriteFile, again and again, but
// keeps the next temp file created, chmodded and preallocated ahead of
// time, so that a write is only: lstat (symlink check), write, fsync,
// rename, close. It also holds the current file open (O_PATH) so that
// freeing the replaced file's blocks happens after the rename, not inside
// it. Not safe for concurrent use.
type File struct {
	path, dir, base string
	perm            os.FileMode
	log             *slog.Logger
	// ensureDir is Options.EnsureDir.
	ensureDir func(dir string) error

	next    *tempFile // the prepared temp file, or nil
	hold    int       // descriptor holding the current file, or -1
	started bool      // leftovers removed

	// pending says Finish has work left by WriteDeferred, for a file of
	// pendingSize.
	pending     bool
	pendingSize int64
}

// New returns a File that replaces path, mode perm. It touches nothing
// until Start or the first write.
func New(path string, perm os.FileMode, opts Options) *File {
	if opts.EnsureDir == nil {
		opts.EnsureDir = MkdirAll
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &File{path: path, dir: filepath.Dir(path), base: filepath.Base(path), perm: perm, log: opts.Logger, hold: -1,
		ensureDir: opts.EnsureDir}
}

// Path returns the path the File replaces.
func (p *File) Path() string { return p.path }

// Start removes temp files left beside the path by an earlier process that
// crashed and prepares the first temp file, sized like the file already
// there. Only the first call does anything; a write calls it.
func (p *File) Start() {
	if p.started {
		return
	}
	p.started = true
	p.removeLeftovers()
	var size int64
	var st syscall.Stat_t
	if err := syscall.Lstat(p.path, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
		size = st.Size
	}
	p.prepare(size)
}

// removeLeftovers removes the regular files .<base>.tmp-* in the directory
// (and nothing else).
func (p *File) removeLeftovers() {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return // no directory yet: nothing left over
	}
	prefix := tempPrefix(p.base)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) || !e.Type().IsRegular() {
			continue
		}
		name := filepath.Join(p.dir, e.Name())
		switch err := os.Remove(name); {
		case err == nil:
			p.log.Info("removed leftover temp file", "file", name)
		case !os.IsNotExist(err):
			p.log.Warn("remove leftover temp file", "file", name, "err", err)
		}
	}
}

// prepare holds the current file and creates the next temp file, its
// blocks preallocated for a bit more than size bytes. Failing is fine:
// the next write creates one.
func (p *File) prepare(size int64) {
	var prealloc int64
	if size > 0 {
		prealloc = size + size/8 + 4096
	}
	p.release()
	p.hold = holdFile(p.path)
	t, err := createTemp(p.dir, p.base, p.perm, prealloc)
	if err != nil {
		p.log.Debug("prepare next temp file", "path", p.path, "err", err)
		return
	}
	p.next = t
}

// release closes the descriptor holding the (now maybe replaced) file,
// freeing its blocks if it was replaced.
func (p *File) release() {
	if p.hold >= 0 {
		syscall.Close(p.hold)
		p.hold = -1
	}
}

// Write atomically replaces the file with the concatenation of segs
// through the prepared temp file, falling back to WriteFile (a fresh temp
// file, the directory readied by Options.EnsureDir) when there is none or
// it fails (removed, directory recreated). Then it fsyncs the directory
// and prepares the next temp file. A failed write leaves no temp file
// behind.
func (p *File) Write(segs ...[]byte) error { return p.write(segs, false) }

// WriteDeferred is Write up to the rename, which makes the new file
// visible: what follows (releasing the replaced file, the directory's
// fsync, preparing the next temp file) is left to Finish, or to the next
// write. When it falls back to a fresh temp file, it does it all.
func (p *File) WriteDeferred(segs ...[]byte) error { return p.write(segs, true) }

// Pending reports whether a WriteDeferred left work to Finish.
func (p *File) Pending() bool { return p.pending }

func (p *File) write(segs [][]byte, deferFinish bool) error {
	p.Start()
	if err := p.Finish(); err != nil { // the last write's, if left pending
		p.log.Warn("fsync of the directory after the last write", "path", p.path, "err", err)
	}
	size := 0
	for _, s := range segs {
		size += len(s)
	}
	if t := p.next; t != nil {
		if err := refuseSymlink(p.path); err != nil {
			return err // the prepared file stays for the next write
		}
		p.next = nil
		err := t.commit(p.path, segs)
		if err == nil && deferFinish {
			p.pending, p.pendingSize = true, int64(size)
			return nil
		}
		if err == nil {
			p.release()
			err = syncDir(p.dir)
			p.prepare(int64(size))
			return err
		}
		p.log.Debug("prepared temp file unusable; writing a fresh one", "path", p.path, "err", err)
	}
	if err := writeFile(p.path, segs, p.perm, p.ensureDir); err != nil {
		return err
	}
	p.prepare(int64(size))
	return nil
}

// Finish does what WriteDeferred left after the rename: release the
// replaced file, fsync the directory, prepare the next temp file. Nothing
// when nothing is pending.
func (p *File) Finish() error {
	if !p.pending {
		return nil
	}
	p.pending = false
	p.release()
	err := syncDir(p.dir)
	p.prepare(p.pendingSize)
	return err
}

// Close removes the prepared temp file and releases the current file. A
// later write still works, through a fresh temp file.
func (p *File) Close() {
	p.pending = false
	p.release()
	if p.next != nil {
		p.next.discard()
		p.next = nil
	}
}
