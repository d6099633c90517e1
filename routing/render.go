package routing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// This file renders the table JSON: the table's encoded sections
// (sections.go, poolenc.go) behind a header of the render's times, joined
// into one buffer (JSON, JSONWith) or handed out as a list of buffers for
// writev (JSONSegments), and the content identity a writer compares to
// skip rewriting an unchanged file (SameContent).

// JSONHeader holds the times in a table JSON's header: when it was
// rendered and when its table was last confirmed current against etcd.
type JSONHeader struct {
	// WrittenAt is the member written_at: when the JSON was rendered. The
	// pools' health is evaluated at it.
	WrittenAt time.Time
	// SyncedAt is the member synced_at: when the table was last confirmed
	// current against etcd (watch.Status.SyncedAt). Zero leaves the member
	// out, as a table JSON without it was written.
	SyncedAt time.Time
}

// JSON returns the table JSON (docs/agent.md) with health evaluated at
// and written_at set to writtenAt, without synced_at. The effective
// entries, the bulk of the document, are encoded once when a table is
// built (and reused from the previous table when unchanged), so rendering
// after a change is cheap.
func (t *Table) JSON(writtenAt time.Time) ([]byte, error) {
	return t.JSONWith(nil, JSONHeader{WrittenAt: writtenAt})
}

// JSONInto is JSON rendered into dst's storage (its contents are
// overwritten), so a caller that renders often can reuse its buffers.
func (t *Table) JSONInto(dst []byte, writtenAt time.Time) ([]byte, error) {
	return t.JSONWith(dst, JSONHeader{WrittenAt: writtenAt})
}

// JSONWith is JSONInto with the header's times h: written_at and, when
// h.SyncedAt is set, synced_at.
func (t *Table) JSONWith(dst []byte, h JSONHeader) ([]byte, error) {
	t = t.At(h.WrittenAt)
	enc := t.encodings()
	var runsBuf [40][]byte
	runs := appendEffRuns(runsBuf[:0], enc.eff)
	pools := enc.pools()
	size := 512 + len(pools) + len(enc.routes) + len(enc.policy)
	for _, r := range runs {
		size += len(r)
	}
	b := slices.Grow(dst[:0], size)
	b = t.appendHeader(b, h)
	b = append(b, pools...)
	b = append(b, enc.routes...)
	b = append(b, enc.policy...)
	b = append(b, effectiveOpen...)
	for _, r := range runs {
		b = append(b, r...)
	}
	b, err := t.appendTail(b)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// JSONSegments returns JSON(writtenAt) as segments: JSONSegmentsWith with
// written_at alone in the header.
func (t *Table) JSONSegments(dst [][]byte, scratch []byte, writtenAt time.Time) (segs [][]byte, scratchOut []byte, err error) {
	return t.JSONSegmentsWith(dst, scratch, JSONHeader{WrittenAt: writtenAt})
}

// JSONSegmentsWith returns JSONWith(nil, h) as segments whose
// concatenation is that document, without copying its bulk (for writev):
// the sections and the runs of effective members are the table's own
// encodings, and only the small parts (the header, the opening of the
// effective section, skipped, overrides, the closing brace) are made, in
// scratch. The segments and the small parts are appended to dst[:0] and
// scratch[:0], so a caller that renders often can reuse both.
//
// The first segment is the header: the opening brace and the members
// revision, epoch, written_at, synced_at (when h.SyncedAt is set), stale
// and cluster_id, in this order. No segment is empty; there is one per
// pool and a few dozen more at most.
//
// The returned slices alias the table's encodings and scratch: callers
// must not modify them. The table's encodings never change, so segments
// stay valid while held (they keep the arrays alive), however long; the
// small parts stay valid until scratch is reused.
func (t *Table) JSONSegmentsWith(dst [][]byte, scratch []byte, h JSONHeader) (segs [][]byte, scratchOut []byte, err error) {
	t = t.At(h.WrittenAt)
	enc := t.encodings()
	// All the small parts first, then the segments into scratch, each
	// capped at its end.
	s := t.appendHeader(scratch[:0], h)
	header := len(s)
	s = append(s, effectiveOpen...)
	open := len(s)
	if s, err = t.appendTail(s); err != nil {
		return dst[:0], s, err
	}
	segs = append(dst[:0], s[:header:header])
	segs = enc.appendPoolSegments(segs)
	for _, sec := range [][]byte{enc.routes, enc.policy} {
		if len(sec) > 0 {
			segs = append(segs, sec)
		}
	}
	segs = append(segs, s[header:open:open])
	segs = appendEffRuns(segs, enc.eff)
	segs = append(segs, s[open:len(s):len(s)])
	return segs, s, nil
}

// SameContent reports whether t and u render the same table JSON but for
// the members revision, written_at and synced_at: their content identity,
// what a writer compares to skip rewriting an unchanged file (a progress
// notification moves only the revision). Both are taken as they are: a
// caller comparing at a time passes t.At(now), as rendered. Encodings
// shared between the tables compare without being read.
func (t *Table) SameContent(u *Table) bool {
	if t == u {
		return true
	}
	if t == nil || u == nil || t.epoch != u.epoch || t.stale != u.stale || t.clusterID != u.clusterID ||
		len(t.skipped) != len(u.skipped) || len(t.overrides) != len(u.overrides) {
		return false
	}
	a, b := t.encodings(), u.encodings()
	if !samePools(a, b) || !bytes.Equal(a.routes, b.routes) || !bytes.Equal(a.policy, b.policy) {
		return false
	}
	var ra, rb [40][]byte
	if !equalConcat(appendEffRuns(ra[:0], a.eff), appendEffRuns(rb[:0], b.eff)) {
		return false
	}
	ta, errA := t.appendTail(nil)
	tb, errB := u.appendTail(nil)
	return errA == nil && errB == nil && bytes.Equal(ta, tb)
}

// equalConcat reports whether the concatenations of a and b are equal.
// Pieces that are the same memory compare without being read.
func equalConcat(a, b [][]byte) bool {
	n := 0
	for _, s := range a {
		n += len(s)
	}
	for _, s := range b {
		n -= len(s)
	}
	if n != 0 {
		return false
	}
	var x, y []byte
	for i, j := 0, 0; ; {
		for len(x) == 0 && i < len(a) {
			x, i = a[i], i+1
		}
		for len(y) == 0 && j < len(b) {
			y, j = b[j], j+1
		}
		if len(x) == 0 || len(y) == 0 {
			return len(x) == len(y)
		}
		k := min(len(x), len(y))
		if &x[0] != &y[0] && !bytes.Equal(x[:k], y[:k]) {
			return false
		}
		x, y = x[k:], y[k:]
	}
}

// effectiveOpen opens the effective section.
const effectiveOpen = `,"effective":{`

// appendHeader appends the table JSON up to the pools: the opening brace
// and the members revision, epoch, written_at, synced_at (when set),
// stale and cluster_id.
func (t *Table) appendHeader(b []byte, h JSONHeader) []byte {
	b = append(b, `{"revision":`...)
	b = strconv.AppendInt(b, t.revision, 10)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendInt(b, t.epoch, 10)
	b = append(b, `,"written_at":"`...)
	b = h.WrittenAt.UTC().AppendFormat(b, time.RFC3339Nano)
	if !h.SyncedAt.IsZero() {
		b = append(b, `","synced_at":"`...)
		b = h.SyncedAt.UTC().AppendFormat(b, time.RFC3339Nano)
	}
	b = append(b, `","stale":`...)
	b = strconv.AppendBool(b, t.stale)
	if t.clusterID != 0 {
		b = append(b, `,"cluster_id":"`...)
		b = strconv.AppendUint(b, t.clusterID, 16)
		b = append(b, '"')
	}
	return b
}

// appendTail appends the table JSON after the effective members: the end
// of the effective section, skipped, overrides and the closing brace. On
// error it returns b as far as written.
func (t *Table) appendTail(b []byte) ([]byte, error) {
	b = append(b, '}')
	var err error
	if len(t.skipped) == 0 {
		b = append(b, `,"skipped":[]`...)
	} else if b, err = appendField(b, "skipped", t.skipped); err != nil {
		return b, err
	}
	if len(t.overrides) > 0 {
		if b, err = appendField(b, "overrides", t.overrides); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// appendField appends ,"name":<json of v>.
func appendField(b []byte, name string, v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return b, fmt.Errorf("encode table %s: %w", name, err)
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return append(b, js...), nil
}
