package routing

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestLayeredChangedSinceCoversEveryDifference: between any two versions
// of a layered map along fork chains (the encoder compares a table with
// an older one when a paced writer skipped some), changedSince names
// every key whose value differs whenever it reports the versions share a
// base, and same holds only for a fork not written since.
func TestLayeredChangedSinceCoversEveryDifference(t *testing.T) {
	for seed := range uint64(10) {
		r := rand.New(rand.NewPCG(seed, 5))
		start := map[string]int{}
		for i := range 200 {
			start["k"+strconv.Itoa(i)] = i
		}
		type version struct {
			l     layered[int]
			model map[string]int
		}
		vs := []version{{newLayered(maps.Clone(start)), maps.Clone(start)}}
		shared := 0
		for step := range 400 {
			parent := vs[len(vs)-1]
			l := parent.l.fork()
			if !l.same(&parent.l) {
				t.Fatalf("seed %d step %d: a fork not written is not the same map", seed, step)
			}
			model := maps.Clone(parent.model)
			for range r.IntN(3) + 1 {
				editAtRandom(r, &l, model, 260, step)
			}
			vs = append(vs, version{l, model})
			// Compare with a random older version, as the encoder does.
			o := vs[max(0, len(vs)-1-r.IntN(12))]
			keys, ok := l.changedSince(&o.l)
			if !ok {
				continue
			}
			shared++
			for k := range 260 {
				key := "k" + strconv.Itoa(k)
				a, aok := model[key]
				b, bok := o.model[key]
				if (aok != bok || a != b) && !slices.Contains(keys, key) {
					t.Fatalf("seed %d step %d: %s differs (%d %v / %d %v) but changedSince leaves it out", seed, step, key, a, aok, b, bok)
				}
			}
		}
		if shared < 200 {
			t.Fatalf("seed %d: only %d comparisons shared a base: the folds come too often to test", seed, shared)
		}
	}
}
