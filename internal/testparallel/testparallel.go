// Package testparallel lets a test package run more of its parallel tests
// at once than go test's default, GOMAXPROCS: for packages whose parallel
// tests mostly wait (on leases, timeouts, etcd restarts) rather than
// compute, where two at a time on a 2-core CI machine leaves the cores
// idle.
package testparallel

import (
	"flag"
	"runtime"
	"strconv"
)

// AtLeast sets -test.parallel to max(n, GOMAXPROCS) unless the command
// line gave it (an explicit -parallel is kept). Call it from TestMain,
// before m.Run; it parses the flags if they are not parsed yet.
func AtLeast(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if explicit {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(max(n, runtime.GOMAXPROCS(0)))); err != nil {
		panic("testparallel: " + err.Error()) // only if go test's flags were not registered
	}
}
