package snapshot

import (
	"strings"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// An Output is one file a publish writes from the table: the table JSON,
// the per-country index. The Writer decides when; an Output only renders
// and replaces its file.
type Output interface {
	// Write replaces the file with t rendered under the header h. With
	// deferred, what follows the rename (the directory's fsync, preparing
	// the next temp file) is left to Finish.
	Write(t *routing.Table, h routing.JSONHeader, deferred bool) error
	// Finish brings the file to rest: the first call removes the temp
	// files a crashed process left, later ones complete a deferred write.
	Finish() error
	// Close removes the output's prepared temp file.
	Close()
}

// TableJSON is the snapshot file's fast path: the table JSON as the
// table's own encodings (routing.Table.JSONSegmentsWith), gathered by the
// kernel into a prepared temp file (atomicfile.File). Its files are
// byte-identical to PlainJSON's.
type TableJSON struct {
	file    *atomicfile.File
	segs    [][]byte
	scratch []byte
}

// NewTableJSON returns the table JSON output writing path.
func NewTableJSON(path string, opts atomicfile.Options) *TableJSON {
	return &TableJSON{file: atomicfile.New(path, 0o644, opts)}
}

// Write implements Output.
func (o *TableJSON) Write(t *routing.Table, h routing.JSONHeader, deferred bool) error {
	segs, scratch, err := t.JSONSegmentsWith(o.segs, o.scratch, h)
	o.segs, o.scratch = segs, scratch
	if err != nil {
		return err
	}
	defer clear(o.segs) // no longer keeps the table's encodings alive
	if deferred {
		return o.file.WriteDeferred(segs...)
	}
	return o.file.Write(segs...)
}

// Finish implements Output.
func (o *TableJSON) Finish() error { o.file.Start(); return o.file.Finish() }

// Close implements Output.
func (o *TableJSON) Close() { o.file.Close() }

// PlainJSON is the reference Output the fast path is tested against: the
// whole table JSON rendered into one buffer (routing.Table.JSONWith) and
// written with atomicfile.WriteFile.
type PlainJSON struct {
	// Path is the file written, replaced atomically.
	Path string
}

// Write implements Output.
func (o PlainJSON) Write(t *routing.Table, h routing.JSONHeader, _ bool) error {
	b, err := t.JSONWith(nil, h)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(o.Path, b, 0o644)
}

// Finish implements Output: nothing is left to do.
func (PlainJSON) Finish() error { return nil }

// Close implements Output: nothing is held.
func (PlainJSON) Close() {}

// Index is the per-country index (docs/snapshot-index.md) written beside
// the table JSON with the same header, reusing unchanged entries' bytes
// between writes (snapindex.Encoder).
type Index struct {
	file *atomicfile.File
	enc  snapindex.Encoder
	buf  []byte
}

// NewIndex returns the index output writing path.
func NewIndex(path string, opts atomicfile.Options) *Index {
	return &Index{file: atomicfile.New(path, 0o644, opts)}
}

// Write implements Output.
func (o *Index) Write(t *routing.Table, h routing.JSONHeader, deferred bool) error {
	b, err := o.enc.Encode(o.buf, t, h)
	if err != nil {
		return err
	}
	o.buf = b
	if deferred {
		return o.file.WriteDeferred(b)
	}
	return o.file.Write(b)
}

// Finish implements Output.
func (o *Index) Finish() error { o.file.Start(); return o.file.Finish() }

// Close implements Output.
func (o *Index) Close() { o.file.Close() }

// IndexPath returns the path of the per-country index written beside the
// snapshot at path: a ".json" suffix replaced by ".idx", else ".idx"
// appended (docs/snapshot-index.md).
func IndexPath(path string) string {
	if base, ok := strings.CutSuffix(path, ".json"); ok {
		return base + ".idx"
	}
	return path + ".idx"
}
