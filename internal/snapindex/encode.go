// Package snapindex writes and reads the per-country index of the agent's
// snapshot (table.idx beside table.json, format 1; docs/snapshot-index.md is
// the contract). A reader opens the file, reads a small header and one
// fixed-size slot, then only its country's self-contained entry: a front
// door pays for one country, not for the whole table.
//
//	var enc snapindex.Encoder
//	b, err := enc.Encode(buf[:0], table, routing.JSONHeader{WrittenAt: now, SyncedAt: synced})
//
// The Encoder keeps each entry's bytes from its previous call: the table
// reuses unchanged entries (the same *routing.Effective), and so does the
// encoder, so an encode after a change copies bytes and encodes only the
// entries that changed.
package snapindex

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/regiond/regiond/routing"
)

// Format constants (docs/snapshot-index.md).
const (
	// Magic opens every index file.
	Magic = "RGIX"
	// Version is the format version this package writes and reads.
	Version = 1
	// Slots is the number of slots: 26×26 two-letter codes, then _unknown.
	Slots = 677
	// UnknownSlot is the slot of _unknown (and of every header that is not
	// two ASCII letters).
	UnknownSlot = 676
	// SlotSize is the size of one slot: offset, length, kind (uint32 each).
	SlotSize = 12
	// PrefixSize is the size of magic, version and header length.
	PrefixSize = 8
	// BlockMagic opens the header block: the header's fields in fixed
	// binary form, right after the slot table, for readers whose JSON
	// decoding is the dearest part of a lookup (a cold php-fpm request).
	BlockMagic = "RGHB"
	// BlockSize is the size of the header block.
	BlockSize = 40
)

// Header block flags.
const (
	// BlockStale: the header's stale is true.
	BlockStale = 1 << 0
	// BlockSynced: the header has a synced_at.
	BlockSynced = 1 << 1
)

// Slot kinds.
const (
	// KindCountry: the code is a country the table knows; the decision's
	// country is the code.
	KindCountry = 0
	// KindUnknown: not a country code; the slot points at _unknown's entry
	// and the decision's country is _unknown.
	KindUnknown = 1
)

// slotCountry maps a slot (0..675) to its index in routing.Countries(), or
// -1 for a code that is not an assigned country.
var slotCountry = func() (s [UnknownSlot]int) {
	for i := range s {
		s[i] = -1
	}
	for i, cc := range routing.Countries() {
		s[int(cc[0]-'A')*26+int(cc[1]-'A')] = i
	}
	return s
}()

// SlotCode returns the two-letter code of slot i < UnknownSlot, and
// routing.Unknown for UnknownSlot.
func SlotCode(i int) string {
	if i >= UnknownSlot || i < 0 {
		return routing.Unknown
	}
	return string([]byte{byte('A' + i/26), byte('A' + i%26)})
}

// Encoder encodes tables into index files, reusing the bytes of entries
// unchanged since its previous call, and which entries share bytes. The
// zero value is ready; an Encoder is not safe for concurrent use.
type Encoder struct {
	// By entry id (routing.Countries() order, then _unknown): the entry
	// last encoded, its bytes and their digest.
	effs []*routing.Effective
	js   [][]byte
	sums []uint64
	// rep is the entry id whose bytes entry id shares (itself when its
	// bytes are placed in the file); rep[id] <= id. changed marks the
	// entries encoded anew in this call.
	rep     []int
	changed []bool
	// offs holds each entry id's offset relative to the start of the
	// entries, for this call.
	offs []uint32
	// seen maps a digest to the entry id that had it when it was added:
	// checked (id still a rep with that digest, bytes equal) before use.
	seen map[uint64]int
}

// Encode is a new Encoder's Encode.
func Encode(dst []byte, t *routing.Table, h routing.JSONHeader) ([]byte, error) {
	var e Encoder
	return e.Encode(dst, t, h)
}

// Encode appends to dst[:0] the index file of t with health evaluated at
// h.WrittenAt (as routing.Table.JSONWith does), the header carrying
// written_at and, when set, synced_at. The result is the whole file.
func (e *Encoder) Encode(dst []byte, t *routing.Table, h routing.JSONHeader) ([]byte, error) {
	if t == nil {
		return dst[:0], fmt.Errorf("snapindex: encode: no table")
	}
	t = t.At(h.WrittenAt)
	size := e.entries(t)
	b := append(dst[:0], Magic...)
	b = binary.LittleEndian.AppendUint16(b, Version)
	b = append(b, 0, 0) // header length, set below
	b = appendHeader(b, t, h)
	hlen := len(b) - PrefixSize
	if hlen > math.MaxUint16 {
		return dst[:0], fmt.Errorf("snapindex: encode: header of %d bytes exceeds %d", hlen, math.MaxUint16)
	}
	binary.LittleEndian.PutUint16(b[6:8], uint16(hlen))
	base := uint64(len(b)) + Slots*SlotSize + BlockSize
	if base+size > math.MaxUint32 {
		return dst[:0], fmt.Errorf("snapindex: encode: index of %d bytes exceeds 4 GiB", base+size)
	}
	b = slices.Grow(b, int(Slots*SlotSize+BlockSize+size))
	slots := b[len(b) : len(b)+Slots*SlotSize]
	b = b[:len(b)+Slots*SlotSize]
	unknown := len(e.effs) - 1
	for s := range Slots {
		id, kind := unknown, uint32(KindUnknown)
		if s < UnknownSlot && slotCountry[s] >= 0 {
			id, kind = slotCountry[s], KindCountry
		}
		p := slots[s*SlotSize : s*SlotSize+SlotSize]
		binary.LittleEndian.PutUint32(p, uint32(base)+e.offs[id])
		binary.LittleEndian.PutUint32(p[4:], uint32(len(e.js[id])))
		binary.LittleEndian.PutUint32(p[8:], kind)
	}
	b = appendBlock(b, t, h)
	for id, r := range e.rep {
		if r == id {
			b = append(b, e.js[id]...)
		}
	}
	if uint64(len(b)) != base+size {
		return dst[:0], fmt.Errorf("snapindex: encode: internal error: %d bytes written, %d planned", len(b), base+size)
	}
	return b, nil
}

// entries brings the encoded entries up to date with t, decides which
// share bytes and where each goes, and returns the size of the entries.
func (e *Encoder) entries(t *routing.Table) (size uint64) {
	n := len(routing.Countries()) + 1
	if len(e.effs) != n {
		e.effs, e.js, e.sums = make([]*routing.Effective, n), make([][]byte, n), make([]uint64, n)
		e.rep, e.changed, e.offs = make([]int, n), make([]bool, n), make([]uint32, n)
	}
	if e.seen == nil || len(e.seen) > 4*n {
		e.seen = make(map[uint64]int, n) // stale digests pile up: start over
		for id := range e.effs {
			e.effs[id] = nil
		}
	}
	for id := range n {
		eff := entryOf(t, id)
		e.changed[id] = eff != e.effs[id] || e.js[id] == nil
		if e.changed[id] {
			e.js[id] = appendEntry(e.js[id][:0], eff)
			e.sums[id] = xxhash.Sum64(e.js[id])
			e.effs[id] = eff
		}
	}
	for id := range n {
		if r := e.rep[id]; !e.changed[id] && !e.changed[r] && e.rep[r] == r {
			continue // same bytes as in the last call, shared as then
		}
		e.rep[id] = id
		if j, ok := e.seen[e.sums[id]]; ok && j < id && e.rep[j] == j && e.sums[j] == e.sums[id] && bytes.Equal(e.js[j], e.js[id]) {
			e.rep[id] = j
			continue
		}
		e.seen[e.sums[id]] = id
	}
	for id, r := range e.rep {
		if r == id {
			e.offs[id] = uint32(size)
			size += uint64(len(e.js[id]))
		} else {
			e.offs[id] = e.offs[r]
		}
	}
	return size
}

// entryOf returns the effective entry of entry id (routing.Countries()
// order, then _unknown).
func entryOf(t *routing.Table, id int) *routing.Effective {
	if cs := routing.Countries(); id < len(cs) {
		return t.Effective(cs[id])
	}
	return t.Effective(routing.Unknown)
}

// appendBlock appends the header block: the header JSON's revision,
// epoch, written_at, synced_at and stale in fixed binary form.
func appendBlock(b []byte, t *routing.Table, h routing.JSONHeader) []byte {
	var flags uint32
	if t.Stale() {
		flags |= BlockStale
	}
	var synced int64
	if !h.SyncedAt.IsZero() {
		flags |= BlockSynced
		synced = h.SyncedAt.UnixNano()
	}
	b = append(b, BlockMagic...)
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(t.Revision()))
	b = binary.LittleEndian.AppendUint64(b, uint64(t.Epoch()))
	b = binary.LittleEndian.AppendUint64(b, uint64(h.WrittenAt.UnixNano()))
	return binary.LittleEndian.AppendUint64(b, uint64(synced))
}

// appendHeader appends the header JSON: the members a KV value carries
// too (appendKVHeader) but valid_until (the agent rewrites its file when
// the clock changes the table), and the slot count.
func appendHeader(b []byte, t *routing.Table, h routing.JSONHeader) []byte {
	b = appendKVHeader(b, t, h, time.Time{})
	b = append(b, `,"slots":`...)
	b = strconv.AppendInt(b, Slots, 10)
	return append(b, '}')
}

// appendEntry appends the entry JSON of eff: its route, fallback_depth,
// affinity, candidates (each with its merged attrs) and degraded. A field
// added to routing.Effective or routing.Candidate is added here and to
// Entry: TestAppendEntryCarriesEveryField fails until it is.
func appendEntry(b []byte, eff *routing.Effective) []byte {
	b = append(b, `{"route":`...)
	b = appendString(b, eff.Route)
	b = append(b, `,"fallback_depth":`...)
	b = strconv.AppendInt(b, int64(eff.FallbackDepth), 10)
	b = append(b, `,"affinity":`...)
	b = appendString(b, eff.Affinity)
	b = append(b, `,"candidates":[`...)
	for i := range eff.Candidates {
		c := &eff.Candidates[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"pool":`...)
		b = appendString(b, c.Pool)
		b = append(b, `,"host":`...)
		b = appendString(b, c.Host)
		b = append(b, `,"weight":`...)
		b = strconv.AppendInt(b, int64(c.Weight), 10)
		b = append(b, `,"attrs":`...)
		b = appendStringMap(b, c.MergedAttrs())
		b = append(b, '}')
	}
	b = append(b, `],"degraded":[`...)
	for i, r := range eff.Degraded {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, r)
	}
	return append(b, "]}"...)
}

// appendStringMap appends m as a JSON object with its keys in byte order.
func appendStringMap(b []byte, m map[string]string) []byte {
	var keysBuf [16]string
	keys := keysBuf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

// sortStrings sorts a short list in place (insertion sort: attrs are few).
func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// appendString appends s as a JSON string. Printable ASCII without quotes
// or backslashes is copied as is; anything else goes through
// encoding/json (valid UTF-8 out, invalid bytes as U+FFFD).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			js, _ := json.Marshal(s)
			return append(b, js...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
