package routing

import (
	"math/rand/v2"
	"testing"
)

// plainRunByByte is plainRun's reference: one byte at a time.
func plainRunByByte(b []byte, i int) int {
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}

// TestPlainRunMatchesByteLoop holds the 8-bytes-a-step scan equal to the
// byte loop on random buffers mixing plain bytes with every kind of byte
// that ends a run, and bytes next to them in value (0x1f/0x20, 0x21/0x23,
// 0x5b/0x5d, 0x7f/0x80, 0xff), at every offset.
func TestPlainRunMatchesByteLoop(t *testing.T) {
	special := []byte{'"', '\\', 0, 0x1f, '\n', '\t'}
	near := []byte{0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff, 'x', 'a'}
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 20000; round++ {
		b := make([]byte, r.IntN(40))
		for j := range b {
			switch p := r.IntN(20); {
			case p == 0:
				b[j] = special[r.IntN(len(special))]
			case p < 6:
				b[j] = near[r.IntN(len(near))]
			default:
				b[j] = byte(r.IntN(256))
				if b[j] < 0x20 || b[j] == '"' || b[j] == '\\' {
					b[j] = 'y'
				}
			}
		}
		for i := 0; i <= len(b); i++ {
			if got, want := plainRun(b, i), plainRunByByte(b, i); got != want {
				t.Fatalf("plainRun(%q, %d) = %d, want %d", b, i, got, want)
			}
		}
	}
	// Every single byte value in every position of a 16-byte plain run.
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 16; pos++ {
			b := []byte("abcdefghijklmnop")
			b[pos] = byte(c)
			if got, want := plainRun(b, 0), plainRunByByte(b, 0); got != want {
				t.Fatalf("byte %#x at %d: plainRun = %d, want %d", c, pos, got, want)
			}
		}
	}
}
