package snapindex

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// WithoutBlock returns index file b as agents wrote it before the header
// block existed: the entries right after the slot table, every offset 40
// bytes lower. Readers' tests use it to check that such files still read
// the same, through the header JSON.
func WithoutBlock(b []byte) ([]byte, error) {
	hb, err := headerBytes("index", b)
	if err != nil {
		return nil, err
	}
	slots := PrefixSize + len(hb)
	at := slots + Slots*SlotSize
	if _, ok := ReadBlock(b, at); !ok {
		return nil, fmt.Errorf("snapindex: no header block at %d", at)
	}
	old := append(bytes.Clone(b[:at]), b[at+BlockSize:]...)
	for i := range Slots {
		p := old[slots+i*SlotSize:]
		binary.LittleEndian.PutUint32(p, binary.LittleEndian.Uint32(p)-BlockSize)
	}
	return old, nil
}
