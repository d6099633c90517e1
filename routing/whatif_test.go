package routing

import (
	"reflect"
	"testing"
	"time"
)

// WithDown answers as a table compiled from the same keys with
// CompileOptions.Down, for every country, and leaves the table unchanged.
func TestWithDownMatchesCompileDown(t *testing.T) {
	kvs := kvsOf(t, exampleConfig(t))
	now := time.Unix(1_700_000_000, 0)
	base := Compile(10, kvs, nil, CompileOptions{Now: now})
	for _, down := range [][]string{{"eu-central"}, {"eu-central", "eu-west"}, {"no-such-pool"}, nil} {
		want := Compile(10, kvs, nil, CompileOptions{Now: now, Down: down})
		got := base.WithDown(down, now)
		for _, cc := range append(Countries(), "XX") {
			wd, werr := want.Resolve(cc, "viewer-1", now)
			gd, gerr := got.Resolve(cc, "viewer-1", now)
			if !reflect.DeepEqual(wd, gd) || (werr == nil) != (gerr == nil) {
				t.Errorf("down %v, %s: WithDown %+v (%v), Compile with Down %+v (%v)", down, cc, gd, gerr, wd, werr)
			}
		}
		if got.Checksum() != want.Checksum() {
			t.Errorf("down %v: checksum %x, Compile with Down %x", down, got.Checksum(), want.Checksum())
		}
	}
	if Update(base.WithDown([]string{"eu-central"}, now), 11, nil, CompileOptions{Now: now}) != nil {
		t.Error("Update followed a what-if table")
	}
	again := Compile(10, kvs, nil, CompileOptions{Now: now})
	if base.Checksum() != again.Checksum() {
		t.Error("WithDown changed the table it was called on")
	}
}
