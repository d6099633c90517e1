package routing

import "encoding/binary"

// SWAR constants: a byte's value repeated in each of a word's 8 bytes.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainRun returns the index of the first byte of b at or after i that
// ends a run of plain string content: a quote, a backslash or a control
// character (below 0x20); len(b) if there is none. It looks at 8 bytes a
// step (the long values of pools, say their attrs, are mostly plain), and
// is tested against a byte loop (TestPlainRunMatchesByteLoop).
func plainRun(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		// A byte of w is below 0x20, or zero after xor with '"' or '\\':
		// the classic "has a byte less than n" test, exact for n <= 128.
		q, bs := w^(ones*'"'), w^(ones*'\\')
		if ((w-ones*0x20)&^w|(q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}
