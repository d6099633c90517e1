package routing

import (
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestGoodValuesMatchAMap: sets, deletes and forks of goodValues behave as
// copies of a plain map, through many forks (overlays copied, then folded
// into new bases), and writing to a fork never changes what it was forked
// from.
func TestGoodValuesMatchAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	model := map[string]goodValue{}
	for i := range 60 {
		model["k"+strconv.Itoa(i)] = goodValue{raw: []byte("v"), val: int64(i), rev: 1}
	}
	g := newGoodValues(maps.Clone(model))
	type snapshot struct {
		g     goodValues
		model map[string]goodValue
	}
	var olds []snapshot
	for step := range 2000 {
		if step%5 == 0 {
			olds = append(olds, snapshot{g, maps.Clone(model)})
			g = g.fork()
		}
		key := "k" + strconv.Itoa(r.IntN(80)) // some never existed
		if r.IntN(3) == 0 {
			g.del(key)
			delete(model, key)
		} else {
			v := goodValue{raw: []byte("v"), val: int64(step), rev: int64(step)}
			g.set(key, v)
			model[key] = v
		}
		check := func(what string, g *goodValues, model map[string]goodValue) {
			t.Helper()
			if got := maps.Collect(g.all()); !equalGood(got, model) || g.len() != len(model) {
				t.Fatalf("step %d, %s: %d keys (len %d), want %d", step, what, len(got), g.len(), len(model))
			}
			for i := range 80 {
				k := "k" + strconv.Itoa(i)
				got, ok := g.get(k)
				want, wok := model[k]
				if ok != wok || got.val != want.val || got.rev != want.rev {
					t.Fatalf("step %d, %s: get(%s) = %v %v, want %v %v", step, what, k, got, ok, want, wok)
				}
			}
		}
		check("current", &g, model)
		if len(olds) > 0 {
			o := olds[r.IntN(len(olds))]
			check("an earlier fork", &o.g, o.model)
		}
	}
	var nilGood *goodValues
	if _, ok := nilGood.get("k1"); ok {
		t.Fatal("get on nil found a value")
	}
}

func equalGood(a, b map[string]goodValue) bool {
	return maps.EqualFunc(a, b, func(x, y goodValue) bool { return x.val == y.val && x.rev == y.rev })
}
