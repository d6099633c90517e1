package routing

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// parallelMin is the least number of items a compile splits across CPUs
// (decoding values, encoding pools): below it the goroutines cost more
// than they save. A variable so tests run both paths on the same input.
var parallelMin = 2048

// splitCalls counts the inParallel calls that split: what tests read to
// see that a list splits and a single change does not.
var splitCalls atomic.Int64

// splits reports whether inParallel would split n items.
func splits(n int) bool { return n >= parallelMin && runtime.GOMAXPROCS(0) > 1 }

// inParallel calls f over [0, n) in contiguous chunks, one per CPU
// (GOMAXPROCS), when splits(n); else it calls f(0, n) in the caller. f may
// read shared state that nothing writes meanwhile and write only what
// belongs to its own indexes. The sequential call is the reference the
// tests compare the split one with (TestParallelCompileMatchesSequential).
func inParallel(n int, f func(lo, hi int)) {
	if !splits(n) {
		f(0, n)
		return
	}
	splitCalls.Add(1)
	w := min(runtime.GOMAXPROCS(0), n)
	chunk := (n + w - 1) / w
	var wg sync.WaitGroup
	for lo := chunk; lo < n; lo += chunk {
		wg.Go(func() { f(lo, min(lo+chunk, n)) })
	}
	f(0, chunk)
	wg.Wait()
}
