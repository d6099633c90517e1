package routing

import (
	"encoding/binary"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// xxh64 constants (seed 0).
const (
	xxPrime1 uint64 = 11400714785074694791
	xxPrime2 uint64 = 14029467366897019727
	xxPrime3 uint64 = 1609587929392839161
	xxPrime4 uint64 = 9650029242287828579
	xxPrime5 uint64 = 2870177450012600261
)

// maxKeyWords bounds the sticky keys stickyKey hashes itself: longer keys
// (over 63 bytes) are streamed through xxhash.Digest.
const maxKeyWords = 8

// stickyKey computes h = xxh64(key + "\x00" + pool, seed 0) for one key and
// many pools without allocating or copying: what depends on the key alone
// (its 8-byte words, its full 32-byte stripes) is mixed once by init, and
// sum only mixes the words that hold pool bytes. The words are read straight
// from the two strings, not copied into one buffer first (a copy per pool
// would cost more than the hash).
type stickyKey struct {
	key string
	l   int                 // len(key) + 1: the key and the "\x00" separator
	kw  [maxKeyWords]uint64 // round(0, w) of each aligned word inside key+"\x00"
	nk  int                 // how many such words
	tl  uint64              // the bytes of key+"\x00" after them (little-endian)
	v   [4]uint64           // the lanes after the stripes inside key+"\x00"
	sk  int                 // how many such stripes
}

func (s *stickyKey) init(key string) {
	s.key, s.l = key, len(key)+1
	if s.l/8 > maxKeyWords {
		return
	}
	s.nk = s.l / 8
	for i := 0; i < s.nk; i++ {
		s.kw[i] = xxRound(0, load64(key[8*i:]))
	}
	s.tl = load64(key[min(8*s.nk, len(key)):])
	if s.l < 32 {
		return
	}
	s.v = xxLanes
	for s.sk = 0; 32*s.sk+32 <= s.l; s.sk++ {
		for j := range s.v {
			s.v[j] = xxRound(s.v[j], s.at("", 32*s.sk+8*j))
		}
	}
}

// at returns the (up to) 8 bytes of key + "\x00" + pool at offset off as a
// little-endian word, padded with zero bytes past the end.
func (s *stickyKey) at(pool string, off int) uint64 {
	if off >= s.l {
		return load64(pool[off-s.l:])
	}
	w := load64(s.key[off:]) // the separator is the zero padding
	if k := s.l - off; k < 8 {
		w |= load64(pool) << (8 * k)
	}
	return w
}

// sum returns xxh64(key + "\x00" + pool); it is xxhash.Sum64 unrolled over
// the two strings.
func (s *stickyKey) sum(pool string) uint64 {
	if s.l/8 > maxKeyWords {
		var d xxhash.Digest
		d.Reset()
		d.WriteString(s.key)
		d.Write(zeroByte)
		d.WriteString(pool)
		return d.Sum64()
	}
	n := s.l + len(pool)
	if n < 32 {
		return s.sumShort(pool, n)
	}
	off := 0
	h := xxPrime5
	{
		v := &xxLanes
		if s.sk > 0 {
			v = &s.v
		}
		v1, v2, v3, v4 := v[0], v[1], v[2], v[3]
		for off = 32 * s.sk; off+32 <= n; off += 32 {
			v1 = xxRound(v1, s.at(pool, off))
			v2 = xxRound(v2, s.at(pool, off+8))
			v3 = xxRound(v3, s.at(pool, off+16))
			v4 = xxRound(v4, s.at(pool, off+24))
		}
		h = bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
		h = xxMerge(h, v1)
		h = xxMerge(h, v2)
		h = xxMerge(h, v3)
		h = xxMerge(h, v4)
	}
	h += uint64(n)
	for ; off+8 <= n; off += 8 {
		k := s.kw[min(off/8, maxKeyWords-1)]
		if off+8 > s.l {
			k = xxRound(0, s.at(pool, off))
		}
		h ^= k
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	}
	return xxTail(h, s.at(pool, off), n-off)
}

// sumShort is sum for inputs under 32 bytes: no stripes, and the words
// made only of key bytes were mixed by init.
func (s *stickyKey) sumShort(pool string, n int) uint64 {
	h := xxPrime5 + uint64(n)
	for i := 0; i < s.nk; i++ {
		h ^= s.kw[i]
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	}
	acc, nacc, p := s.tl, s.l%8, pool
	for nacc+len(p) >= 8 {
		need := 8 - nacc
		h ^= xxRound(0, acc|load64(p[:need])<<(8*nacc))
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
		acc, nacc, p = 0, 0, p[need:]
	}
	return xxTail(h, acc|load64(p)<<(8*nacc), nacc+len(p))
}

// xxTail mixes the last r < 8 bytes (little-endian in rest) and finishes
// the hash.
func xxTail(h, rest uint64, r int) uint64 {
	if r >= 4 {
		h ^= (rest & 0xffffffff) * xxPrime1
		h = bits.RotateLeft64(h, 23)*xxPrime2 + xxPrime3
		rest >>= 32
		r -= 4
	}
	for ; r > 0; r-- {
		h ^= (rest & 0xff) * xxPrime5
		h = bits.RotateLeft64(h, 11) * xxPrime1
		rest >>= 8
	}
	h ^= h >> 33
	h *= xxPrime2
	h ^= h >> 29
	h *= xxPrime3
	h ^= h >> 32
	return h
}

var zeroByte = []byte{0}

// xxLanes are the initial accumulators of xxh64 with seed 0
// (prime1+prime2, prime2, 0, -prime1, wrapping).
var xxLanes = func() [4]uint64 {
	p1, p2 := xxPrime1, xxPrime2
	return [4]uint64{p1 + p2, p2, 0, -p1}
}()

func xxRound(acc, w uint64) uint64 {
	return bits.RotateLeft64(acc+w*xxPrime2, 31) * xxPrime1
}

func xxMerge(acc, v uint64) uint64 {
	return (acc^xxRound(0, v))*xxPrime1 + xxPrime4
}

// load64 returns the first (up to) 8 bytes of s as a little-endian word,
// padded with zero bytes. Short strings are read with overlapping loads,
// without a loop.
func load64(s string) uint64 {
	switch n := len(s); {
	case n >= 8:
		return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	case n >= 4:
		return uint64(load32(s)) | uint64(load32(s[n-4:]))<<(8*(n-4))
	case n > 0:
		return uint64(s[0]) | uint64(s[n/2])<<(8*(n/2)) | uint64(s[n-1])<<(8*(n-1))
	}
	return 0
}

func load32(s string) uint32 {
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// poolPad holds a pool id followed by zero bytes, so that the sticky hash
// reads any 8 bytes of it with one load and no length checks. Pool ids are
// at most 63 bytes.
type poolPad [80]byte

// newPoolPad returns the padded bytes of pool, or nil when it is too long.
func newPoolPad(pool string) *poolPad {
	if len(pool) > len(poolPad{})-16 {
		return nil
	}
	p := new(poolPad)
	copy(p[:], pool)
	return p
}

// sumPadded is sum(pool) for a pool given with its padded bytes.
func (s *stickyKey) sumPadded(pool string, p *poolPad) uint64 {
	n := s.l + len(pool)
	if n >= 32 || s.l/8 > maxKeyWords {
		return s.sum(pool)
	}
	h := xxPrime5 + uint64(n)
	for i := 0; i < s.nk; i++ {
		h ^= s.kw[i]
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	}
	// The bytes after the key's words: the key's tail (a bytes) then the
	// pool; the padding supplies the zero bytes past the end.
	a := s.l % 8
	rem := a + len(pool)
	w := s.tl | binary.LittleEndian.Uint64(p[:8])<<(8*a)
	for off := 8 - a; rem >= 8; off += 8 {
		h ^= xxRound(0, w)
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
		rem -= 8
		w = binary.LittleEndian.Uint64(p[off : off+8])
	}
	return xxTail(h, w, rem)
}
