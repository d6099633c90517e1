package snapindex

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/regiond/regiond/routing"
)

// ErrVersion is returned (wrapped, naming the file and the version found)
// for an index of a format version this reader does not know.
var ErrVersion = errors.New("snapindex: unknown format version")

// Header is the header of an index file.
type Header struct {
	// Format is the format version, Version (the binary prefix's too).
	Format int `json:"format"`
	// Revision is the etcd revision of the table.
	Revision int64 `json:"revision"`
	// Epoch is the config epoch of the table.
	Epoch int64 `json:"epoch"`
	// WrittenAt is when the agent wrote the file; pool health is evaluated
	// at this instant.
	WrittenAt time.Time `json:"written_at"`
	// SyncedAt is zero when the member is absent or empty (never synced).
	SyncedAt time.Time `json:"-"`
	// Stale says the table is the agent's snapshot, not yet confirmed
	// against etcd.
	Stale bool `json:"stale"`
	// Slots is the number of slots, always Slots (677).
	Slots int `json:"slots"`
}

// Candidate is a candidate of an entry, with its merged attrs.
type Candidate struct {
	// Pool is the pool's id.
	Pool string `json:"pool"`
	// Host is the pool's host, where the viewer is sent.
	Host string `json:"host"`
	// Weight is the target's weight in the route.
	Weight int `json:"weight"`
	// Attrs are the pool's attrs overlaid by the route chain's and live
	// boosts' attrs: a Decision's Attrs.
	Attrs map[string]string `json:"attrs"`
}

// Entry is the entry JSON of a country.
type Entry struct {
	// Route is the winning route's name; empty with no route.
	Route string `json:"route"`
	// FallbackDepth is the winning route's position in the chain (0: the
	// country's own route; 0 too with no route).
	FallbackDepth int `json:"fallback_depth"`
	// Affinity is "sticky" or "random"; empty means sticky.
	Affinity string `json:"affinity"`
	// Candidates are the table entry's candidates, in its order; empty
	// means NoRoute.
	Candidates []Candidate `json:"candidates"`
	// Degraded lists the reason codes of what was passed over: with no
	// candidate, why there is none.
	Degraded []string `json:"degraded"`
	// cands is Candidates for routing.PickSticky.
	cands []routing.Candidate
}

// Slot is one slot of the slot table.
type Slot struct {
	// Offset and Length locate the entry's JSON in the file (bytes from
	// its start); Kind is KindCountry or KindUnknown.
	Offset, Length, Kind uint32
}

// Index is a parsed index file: its header and every slot's entry. The
// reference reader of the format, used by tests and tools; it holds the
// whole file, unlike a front door's reader, which reads one entry.
type Index struct {
	// Header is the file's header JSON, parsed.
	Header Header
	// MaxAge, when positive, makes Resolve add stale-table when the
	// header's synced_at (written_at when absent) is older than MaxAge.
	MaxAge time.Duration
	// HasBlock says the file has a header block (checked against the
	// header JSON).
	HasBlock bool

	name    string
	slots   [Slots]Slot
	entries [Slots]*Entry
}

// Open reads and parses the index file at path through one descriptor,
// without following a symbolic link at its last element.
func Open(path string) (*Index, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("snapindex: open %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("snapindex: read %s: %w", path, err)
	}
	return Parse(path, b)
}

// Parse parses the bytes of an index file; name names it in errors. Every
// slot and entry is checked: an error names the file, the slot and what is
// wrong.
func Parse(name string, b []byte) (*Index, error) {
	x := &Index{name: name}
	hb, err := headerBytes(name, b)
	if err != nil {
		return nil, err
	}
	if x.Header, err = parseHeader(hb); err != nil {
		return nil, fmt.Errorf("snapindex: %s: header: %w", name, err)
	}
	base := PrefixSize + len(hb)
	if len(b) < base+Slots*SlotSize {
		return nil, fmt.Errorf("snapindex: %s: %d bytes, too short for the slot table (%d)", name, len(b), base+Slots*SlotSize)
	}
	entries := base + Slots*SlotSize // where entries may start
	if blk, ok := ReadBlock(b, base+Slots*SlotSize); ok {
		if want := blockOf(x.Header); blk != want {
			return nil, fmt.Errorf("snapindex: %s: the header block %+v disagrees with the header JSON %+v", name, blk, want)
		}
		x.HasBlock = true
		entries += BlockSize
	}
	decoded := map[uint64]*Entry{}
	for i := range Slots {
		s := readSlot(b, base, i)
		x.slots[i] = s
		if s.Kind != KindCountry && s.Kind != KindUnknown {
			return nil, fmt.Errorf("snapindex: %s: slot %d (%s): unknown kind %d", name, i, SlotCode(i), s.Kind)
		}
		if i == UnknownSlot && s.Kind != KindUnknown {
			return nil, fmt.Errorf("snapindex: %s: slot %d (_unknown) has kind %d, want %d", name, i, s.Kind, KindUnknown)
		}
		end := uint64(s.Offset) + uint64(s.Length)
		if uint64(s.Offset) < uint64(entries) || end > uint64(len(b)) {
			return nil, fmt.Errorf("snapindex: %s: slot %d (%s): entry at %d+%d outside the entries (%d..%d)",
				name, i, SlotCode(i), s.Offset, s.Length, entries, len(b))
		}
		key := uint64(s.Offset)<<32 | uint64(s.Length)
		if e, ok := decoded[key]; ok {
			x.entries[i] = e
			continue
		}
		e, err := ParseEntry(b[s.Offset:end])
		if err != nil {
			return nil, fmt.Errorf("snapindex: %s: slot %d (%s): %w", name, i, SlotCode(i), err)
		}
		decoded[key] = e
		x.entries[i] = e
	}
	for i := range UnknownSlot {
		if x.slots[i].Kind == KindUnknown && x.slots[i] != x.slots[UnknownSlot] {
			return nil, fmt.Errorf("snapindex: %s: slot %d (%s) has kind %d but is not _unknown's entry", name, i, SlotCode(i), KindUnknown)
		}
	}
	return x, nil
}

// headerBytes checks the magic and version and returns the header JSON.
func headerBytes(name string, b []byte) ([]byte, error) {
	if len(b) < PrefixSize {
		return nil, fmt.Errorf("snapindex: %s: %d bytes, too short for an index", name, len(b))
	}
	if string(b[:4]) != Magic {
		return nil, fmt.Errorf("snapindex: %s: not a regiond index (magic %q, want %q)", name, b[:4], Magic)
	}
	if v := binary.LittleEndian.Uint16(b[4:6]); v != Version {
		return nil, fmt.Errorf("%w: %s has format version %d; this reader knows version %d", ErrVersion, name, v, Version)
	}
	h := int(binary.LittleEndian.Uint16(b[6:8]))
	if len(b) < PrefixSize+h {
		return nil, fmt.Errorf("snapindex: %s: header of %d bytes runs past the end (%d bytes)", name, h, len(b))
	}
	return b[PrefixSize : PrefixSize+h], nil
}

// parseHeader decodes and checks the header JSON.
func parseHeader(b []byte) (Header, error) {
	var raw struct {
		Format    *int    `json:"format"`
		Revision  *int64  `json:"revision"`
		Epoch     *int64  `json:"epoch"`
		WrittenAt string  `json:"written_at"`
		SyncedAt  *string `json:"synced_at"`
		Stale     bool    `json:"stale"`
		Slots     *int    `json:"slots"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Header{}, err
	}
	switch {
	case raw.Format == nil || *raw.Format != Version:
		return Header{}, fmt.Errorf("format member is not %d", Version)
	case raw.Revision == nil || raw.Epoch == nil:
		return Header{}, errors.New("revision or epoch missing")
	case raw.Slots == nil || *raw.Slots != Slots:
		return Header{}, fmt.Errorf("slots member is not %d", Slots)
	}
	h := Header{Format: *raw.Format, Revision: *raw.Revision, Epoch: *raw.Epoch, Stale: raw.Stale, Slots: *raw.Slots}
	var err error
	if h.WrittenAt, err = time.Parse(time.RFC3339Nano, raw.WrittenAt); err != nil {
		return Header{}, fmt.Errorf("written_at: %w", err)
	}
	if raw.SyncedAt != nil && *raw.SyncedAt != "" {
		if h.SyncedAt, err = time.Parse(time.RFC3339Nano, *raw.SyncedAt); err != nil {
			return Header{}, fmt.Errorf("synced_at: %w", err)
		}
	}
	return h, nil
}

// Block is the header block: the header's fields in fixed binary form
// (docs/snapshot-index.md). Times are Unix nanoseconds; SyncedAt is 0
// unless Flags has BlockSynced.
type Block struct {
	// Flags holds BlockStale and BlockSynced.
	Flags uint32
	// Revision and Epoch are the header's.
	Revision, Epoch int64
	// WrittenAt and SyncedAt are the header's times, in Unix nanoseconds.
	WrittenAt, SyncedAt int64
}

// ReadBlock reads the header block at off (right after the slot table),
// reporting false when there is none: files written before the block
// existed have their first entry there.
func ReadBlock(b []byte, off int) (Block, bool) {
	if off < 0 || len(b) < off+BlockSize || string(b[off:off+4]) != BlockMagic {
		return Block{}, false
	}
	p := b[off:]
	return Block{
		Flags:     binary.LittleEndian.Uint32(p[4:]),
		Revision:  int64(binary.LittleEndian.Uint64(p[8:])),
		Epoch:     int64(binary.LittleEndian.Uint64(p[16:])),
		WrittenAt: int64(binary.LittleEndian.Uint64(p[24:])),
		SyncedAt:  int64(binary.LittleEndian.Uint64(p[32:])),
	}, true
}

// blockOf is the header block that header h's JSON implies.
func blockOf(h Header) Block {
	blk := Block{Revision: h.Revision, Epoch: h.Epoch, WrittenAt: h.WrittenAt.UnixNano()}
	if h.Stale {
		blk.Flags |= BlockStale
	}
	if !h.SyncedAt.IsZero() {
		blk.Flags |= BlockSynced
		blk.SyncedAt = h.SyncedAt.UnixNano()
	}
	return blk
}

// readSlot reads slot i of the slot table at base.
func readSlot(b []byte, base, i int) Slot {
	p := b[base+i*SlotSize:]
	return Slot{binary.LittleEndian.Uint32(p), binary.LittleEndian.Uint32(p[4:]), binary.LittleEndian.Uint32(p[8:])}
}

// ParseEntry decodes and checks one entry JSON.
func ParseEntry(b []byte) (*Entry, error) {
	var e Entry
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("entry: %w", err)
	}
	if dec.More() {
		return nil, errors.New("entry: data after the JSON object")
	}
	if e.Candidates == nil || e.Degraded == nil {
		return nil, errors.New("entry: candidates or degraded missing")
	}
	for i, c := range e.Candidates {
		if c.Pool == "" || c.Attrs == nil {
			return nil, fmt.Errorf("entry: candidate %d: pool or attrs missing", i)
		}
		e.cands = append(e.cands, routing.Candidate{Pool: c.Pool, Host: c.Host, Weight: c.Weight})
	}
	return &e, nil
}

// SlotOf returns the slot of a raw country header, normalized as
// routing.NormalizeCountry does before the lookup: ASCII spaces (' ',
// \t, \r, \n) trimmed, letters upper-cased; anything that is not then two
// ASCII letters is UnknownSlot.
func SlotOf(raw string) int {
	for len(raw) > 0 && isSpace(raw[0]) {
		raw = raw[1:]
	}
	for len(raw) > 0 && isSpace(raw[len(raw)-1]) {
		raw = raw[:len(raw)-1]
	}
	if len(raw) != 2 {
		return UnknownSlot
	}
	a, c := raw[0]|0x20, raw[1]|0x20 // lower case; non-letters stay out of range
	if a < 'a' || a > 'z' || c < 'a' || c > 'z' {
		return UnknownSlot
	}
	return int(a-'a')*26 + int(c-'a')
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// Slot returns slot i of the slot table.
func (x *Index) Slot(i int) Slot { return x.slots[i] }

// Entry returns the entry of slot i.
func (x *Index) Entry(i int) *Entry { return x.entries[i] }

// Stale reports whether a decision made at now carries stale-table because
// of the header: the table is marked stale, or MaxAge is set and synced_at
// (written_at when absent) is older than it.
func (x *Index) Stale(now time.Time) bool {
	if x.Header.Stale {
		return true
	}
	synced := x.Header.SyncedAt
	if synced.IsZero() {
		synced = x.Header.WrittenAt
	}
	return x.MaxAge > 0 && now.Sub(synced) > x.MaxAge
}

// Resolve decides for a raw country header and sticky key as
// routing.Table.Resolve does on the table the index was made from, at its
// written_at: the same Decision (a random pick aside), and
// routing.ErrNoRoute with the country, revision, epoch and reasons when the
// entry has no candidate.
func (x *Index) Resolve(country, key string, now time.Time) (routing.Decision, error) {
	i := SlotOf(country)
	s, e := x.slots[i], x.entries[i]
	cc := routing.Unknown
	if s.Kind == KindCountry {
		cc = SlotCode(i)
	}
	degraded := e.Degraded
	if stale := string(routing.ReasonStaleTable); x.Stale(now) && !slices.Contains(degraded, stale) {
		degraded = append(slices.Clip(degraded), stale)
	}
	d := routing.Decision{Country: cc, Route: e.Route, Revision: x.Header.Revision, Epoch: x.Header.Epoch,
		FallbackDepth: e.FallbackDepth, Degraded: degraded}
	if len(e.Candidates) == 0 {
		return d, routing.ErrNoRoute
	}
	c := &e.Candidates[e.pick(key)]
	d.Pool, d.Host, d.Attrs = c.Pool, c.Host, c.Attrs
	return d, nil
}

// pick chooses a candidate: weighted rendezvous hashing for a sticky key
// (routing.PickSticky) unless the affinity is random, weighted random
// otherwise.
func (e *Entry) pick(key string) int {
	if len(e.cands) == 1 {
		return 0
	}
	if key != "" && e.Affinity != routing.AffinityRandom {
		return routing.PickSticky(e.cands, key)
	}
	total := 0
	for _, c := range e.cands {
		total += max(c.Weight, 0)
	}
	if total <= 0 {
		return 0
	}
	r := rand.IntN(total)
	for i, c := range e.cands {
		r -= max(c.Weight, 0)
		if r < 0 {
			return i
		}
	}
	return len(e.cands) - 1
}
