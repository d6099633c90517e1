package faultsuite

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// TestMain runs the suite's four tests at once unless -test.parallel says
// otherwise: with -parallel's default, GOMAXPROCS (2 on CI), two of the
// lease tests started first and TestFleetFaults, the longest by far,
// waited for one of them (tens of seconds). The lease tests mostly wait
// out TTLs, each on a cluster of its own.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(max(4, runtime.GOMAXPROCS(0)))); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
