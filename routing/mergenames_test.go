package routing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// mergeNames gives the sorted keys of the new map (from the old keys, those
// gained and those lost), and from[i] the index
// in old of each kept key, for random gains and losses (none, some, all).
func TestMergeNames(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 500 {
		oldSet := map[string]int{}
		for range rng.IntN(40) {
			oldSet[fmt.Sprintf("p%03d", rng.IntN(100))] = 0
		}
		m := map[string]int{}
		for k := range oldSet {
			if rng.IntN(4) != 0 || round%5 == 0 {
				m[k] = 0
			}
		}
		if round%5 != 0 {
			for range rng.IntN(10) {
				m[fmt.Sprintf("p%03d", rng.IntN(100))] = 0
			}
		}
		old := sortedKeys(oldSet)
		var gained []string
		lost := map[string]bool{}
		for k := range m {
			if _, ok := oldSet[k]; !ok {
				gained = append(gained, k)
			}
		}
		for k := range oldSet {
			if _, ok := m[k]; !ok {
				lost[k] = true
			}
		}
		slices.Sort(gained)
		names, from := mergeNames(old, gained, lost)
		if want := sortedKeys(m); !slices.Equal(names, want) {
			t.Fatalf("round %d: names %v, want %v", round, names, want)
		}
		if len(from) != len(names) {
			t.Fatalf("round %d: %d from for %d names", round, len(from), len(names))
		}
		for i, j := range from {
			_, wasOld := oldSet[names[i]]
			if (j >= 0) != wasOld || (j >= 0 && old[j] != names[i]) {
				t.Fatalf("round %d: from[%d] = %d for %q (old %v)", round, i, j, names[i], old)
			}
		}
	}
}
