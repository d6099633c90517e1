package snapfile

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// preparedFile replaces one path atomically like WriteFile, but keeps the
// next temp file created, chmodded and preallocated ahead of time, so that
// a write is only: lstat (symlink check), write, fsync, close, rename.
// It also holds the current file open (O_PATH) so that freeing the
// replaced file's blocks happens after the rename, not inside it. Not safe for concurrent use.
type preparedFile struct {
	path, dir, base string
	perm            os.FileMode
	log             *slog.Logger
	// ensureDir readies the directory for a write without a prepared
	// temp file (WriterConfig.EnsureDir).
	ensureDir func(dir string) error

	next    *tempFile // the prepared temp file, or nil
	hold    int       // descriptor holding the current file, or -1
	started bool      // leftovers removed

	// deferFinish: write leaves what follows the rename (releasing the
	// replaced file, fsyncing the directory, preparing the next temp file)
	// to finish; pending says finish has work, of a file of pendingSize.
	deferFinish bool
	pending     bool
	pendingSize int64
}

func newPreparedFile(path string, perm os.FileMode, log *slog.Logger) *preparedFile {
	return &preparedFile{path: path, dir: filepath.Dir(path), base: filepath.Base(path), perm: perm, log: log, hold: -1,
		ensureDir: mkdirAll}
}

// start removes temp files left by an earlier run that crashed and
// prepares the first temp file, sized like the file already there.
func (p *preparedFile) start() {
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
func (p *preparedFile) removeLeftovers() {
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
func (p *preparedFile) prepare(size int64) {
	var prealloc int64
	if size > 0 {
		prealloc = size + size/8 + 4096
	}
	p.release()
	p.hold = holdFile(p.path)
	t, err := createTemp(p.dir, p.base, p.perm, prealloc)
	if err != nil {
		p.log.Debug("prepare next snapshot temp file", "err", err)
		return
	}
	p.next = t
}

// release closes the descriptor holding the (now maybe replaced) file,
// freeing its blocks if it was replaced.
func (p *preparedFile) release() {
	if p.hold >= 0 {
		syscall.Close(p.hold)
		p.hold = -1
	}
}

// write atomically replaces the file with the concatenation of segs
// through the prepared temp file, falling back to WriteFile (a fresh temp
// file, the directory readied by ensureDir) when there is none or it fails
// (removed, directory recreated). Then it fsyncs the directory and
// prepares the next temp file. A failed write leaves no temp file behind.
func (p *preparedFile) write(segs ...[]byte) error {
	p.start()
	if err := p.finish(); err != nil { // the last write's, if left pending
		p.log.Warn("fsync of the snapshot directory after the last write", "err", err)
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
		if err == nil && p.deferFinish {
			p.pending, p.pendingSize = true, int64(size)
			return nil
		}
		if err == nil {
			p.release()
			err = syncDir(p.dir)
			p.prepare(int64(size))
			return err
		}
		p.log.Debug("prepared snapshot temp file unusable; writing a fresh one", "err", err)
	}
	if err := writeFile(p.path, segs, p.perm, p.ensureDir); err != nil {
		return err
	}
	p.prepare(int64(size))
	return nil
}

// finish does what a write with deferFinish left after the rename:
// release the replaced file, fsync the directory, prepare the next temp
// file.
func (p *preparedFile) finish() error {
	if !p.pending {
		return nil
	}
	p.pending = false
	p.release()
	err := syncDir(p.dir)
	p.prepare(p.pendingSize)
	return err
}

// close removes the prepared temp file and releases the current file.
func (p *preparedFile) close() {
	p.pending = false
	p.release()
	if p.next != nil {
		p.next.discard()
		p.next = nil
	}
}
