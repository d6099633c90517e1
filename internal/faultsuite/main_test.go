package faultsuite

import (
	"os"
	"testing"

	"github.com/regiond/regiond/internal/testparallel"
)

// TestMain runs the suite's four tests at once unless -test.parallel says
// otherwise: with -parallel's default, GOMAXPROCS (2 on CI), two of the
// lease tests started first and TestFleetFaults, the longest by far,
// waited for one of them (tens of seconds). The lease tests mostly wait
// out TTLs, each on a cluster of its own.
func TestMain(m *testing.M) {
	testparallel.AtLeast(4)
	os.Exit(m.Run())
}
