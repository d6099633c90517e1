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
		editAtRandom(r, &g, model, 80, goodValue{raw: []byte("v"), val: int64(step), rev: int64(step)}) // some keys never existed
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

// TestGoodValuesForkTree: goodValues against plain maps when any earlier
// version is forked again (a table updated twice; tables made with At or
// WithRevision, then updated): a tree of forks, not a chain. Every version
// is checked against its model after all the writes.
func TestGoodValuesForkTree(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 77))
		type version struct {
			g     goodValues
			model map[string]goodValue
		}
		start := map[string]goodValue{}
		for i := range r.IntN(40) {
			start["k"+strconv.Itoa(i)] = goodValue{val: int64(i)}
		}
		vs := []version{{newGoodValues(maps.Clone(start)), maps.Clone(start)}}
		for range 600 {
			parent := vs[r.IntN(len(vs))]
			if r.IntN(3) == 0 {
				parent = vs[len(vs)-1]
			}
			g := parent.g.fork()
			model := maps.Clone(parent.model)
			for range r.IntN(30) + 1 {
				editAtRandom(r, &g, model, 100, goodValue{val: r.Int64()})
			}
			vs = append(vs, version{g, model})
		}
		for i, v := range vs {
			got := map[string]goodValue{}
			for k, gv := range v.g.all() {
				if _, dup := got[k]; dup {
					t.Fatalf("seed %d version %d: all yields %s twice", seed, i, k)
				}
				got[k] = gv
			}
			if !equalGood(got, v.model) || v.g.len() != len(v.model) {
				t.Fatalf("seed %d version %d: %d keys (len %d), want %d", seed, i, len(got), v.g.len(), len(v.model))
			}
			for j := range 100 {
				k := "k" + strconv.Itoa(j)
				gv, ok := v.g.get(k)
				want, wok := v.model[k]
				if ok != wok || gv.val != want.val {
					t.Fatalf("seed %d version %d: get(%s) = %v %v, want %v %v", seed, i, k, gv, ok, want, wok)
				}
			}
		}
	}
	var zero goodValues
	if _, ok := zero.get("k"); ok || zero.len() != 0 {
		t.Fatal("zero goodValues not empty")
	}
	f := zero.fork()
	f.set("a", goodValue{val: int64(1)})
	f.del("b")
	if zero.len() != 0 || f.len() != 1 || len(zero.over) != 0 {
		t.Fatal("fork of the zero value wrote to it")
	}
}

// editAtRandom deletes one of keys random keys k0…k<keys-1> from l and
// its model, or (two times in three) sets it to v in both.
func editAtRandom[V any](r *rand.Rand, l *layered[V], model map[string]V, keys int, v V) {
	key := "k" + strconv.Itoa(r.IntN(keys))
	if r.IntN(3) == 0 {
		l.del(key)
		delete(model, key)
		return
	}
	l.set(key, v)
	model[key] = v
}
