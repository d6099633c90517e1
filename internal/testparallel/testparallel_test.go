package testparallel

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// want is the -test.parallel AtLeast set, or the one given.
var want int

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	AtLeast(4)
	want = max(4, runtime.GOMAXPROCS(0))
	if given {
		want, _ = strconv.Atoi(flag.Lookup("test.parallel").Value.String())
	}
	os.Exit(m.Run())
}

// TestAtLeastRunsThatManyAtOnce: with AtLeast(4) (and no -parallel given),
// four parallel tests run at once, where go test's default would run
// GOMAXPROCS of them: each waits until all four have started, so a lower
// -test.parallel leaves the last ones unstarted and the first fail at
// their bound.
func TestAtLeastRunsThatManyAtOnce(t *testing.T) {
	if got := flag.Lookup("test.parallel").Value.String(); got != strconv.Itoa(want) {
		t.Fatalf("-test.parallel = %s; want %d", got, want)
	}
	if want < 4 {
		t.Skipf("-parallel %d given on the command line: kept, as AtLeast promises", want)
	}
	var started sync.WaitGroup
	started.Add(4)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	t.Run("group", func(t *testing.T) {
		for i := range 4 {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				started.Done()
				select {
				case <-all:
				case <-time.After(10 * time.Second):
					t.Fatal("the four parallel tests were not all running after 10 s; want 4 at once")
				}
			})
		}
	})
}
