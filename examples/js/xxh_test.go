package js_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/regiond/regiond/routing"
)

// TestXXH64MatchesGo hashes the same inputs in JS and with cespare/xxhash:
// every length 0..130 (each side of the 4-, 8- and 32-byte steps, random
// bytes), longer inputs, UTF-8 text, the contract's key+"\x00"+pool inputs,
// with seed 0 (the contract's) and other seeds.
func TestXXH64MatchesGo(t *testing.T) {
	node(t)
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 2))
	type vec struct {
		Hex  string `json:"hex"`
		Seed string `json:"seed"`
	}
	var ins [][]byte
	for n := 0; n <= 130; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		ins = append(ins, b)
	}
	for _, n := range []int{255, 256, 1000, 4097} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		ins = append(ins, b)
	}
	for _, s := range []string{"", "a", "abc", "żółć", "視聴者", "🎬🎬🎬🎬🎬🎬🎬🎬", "\x00", "\xff\xfe\xfd"} {
		ins = append(ins, []byte(s))
	}
	for range 200 {
		ins = append(ins, []byte(randomKey(r)+"\x00"+routing.Countries()[r.IntN(249)]+"-pool"))
	}
	seeds := []uint64{0, 1, 0x9e3779b97f4a7c15, math.MaxUint64}
	var vs []vec
	var want []string
	for _, b := range ins {
		for _, s := range seeds {
			vs = append(vs, vec{hex.EncodeToString(b), strconv.FormatUint(s, 10)})
			d := xxhash.NewWithSeed(s)
			d.Write(b)
			want = append(want, fmt.Sprintf("%016x", d.Sum64()))
		}
	}
	var got []string
	if err := json.Unmarshal(runNode(t, vs, "xxh"), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("node hashed %d inputs, want %d", len(got), len(want))
	}
	bad := 0
	for i := range want {
		if got[i] != want[i] {
			if bad++; bad <= 10 {
				t.Errorf("xxh64(%s, seed %s): JS %s, Go %s", vs[i].Hex, vs[i].Seed, got[i], want[i])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d hashes differ", bad, len(want))
	}
	t.Logf("%d hashes equal (%d inputs × %d seeds)", len(want), len(ins), len(seeds))
}

// TestStickyScoreMatchesGo compares routing.StickyScore with the JS
// stickyScore on 5,000 keys × pools × weights. The hash is exact; Go's
// math.Log (assembly on amd64) and V8's Math.log (fdlibm) differ by 1–2 ulp
// for ~1.5% of inputs (as glibc's does for PHP), which can flip a pick only
// when two scores are within 2 ulp. The test fails if more than 5% differ
// or any differs by more than 2 ulp.
func TestStickyScoreMatchesGo(t *testing.T) {
	node(t)
	t.Parallel()
	r := rand.New(rand.NewPCG(12, 3))
	type in struct {
		Key    string `json:"key"`
		Pool   string `json:"pool"`
		Weight int    `json:"weight"`
	}
	pools := []string{"eu-central", "eu-west", "us-east", "apac-tokyo", "kr-music", "a", "pool-with-a-long-name-for-the-32-byte-stripes"}
	var ins []in
	var want []float64
	for range 5000 {
		k, p, w := randomKey(r), pools[r.IntN(len(pools))], 1+r.IntN(100)
		ins = append(ins, in{hex.EncodeToString([]byte(k)), p, w})
		want = append(want, routing.StickyScore(k, p, w))
	}
	var got []float64
	if err := json.Unmarshal(runNode(t, ins, "score"), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("node scored %d, want %d", len(got), len(want))
	}
	differ := 0
	for i := range want {
		if got[i] == want[i] {
			continue
		}
		differ++
		if d := ulps(got[i], want[i]); d > 2 {
			t.Errorf("score(%s, %s, %d): JS %v, Go %v: %d ulp apart", ins[i].Key, ins[i].Pool, ins[i].Weight, got[i], want[i], d)
		}
	}
	t.Logf("%d of %d scores differ in the last bits", differ, len(want))
	if differ*20 > len(want) {
		t.Errorf("%d of %d scores differ, want ≤ 5%%", differ, len(want))
	}
}

func ulps(a, b float64) int64 {
	d := int64(math.Float64bits(a)) - int64(math.Float64bits(b))
	if d < 0 {
		d = -d
	}
	return d
}
