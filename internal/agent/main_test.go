package agent_test

import (
	"os"
	"testing"

	"github.com/regiond/regiond/internal/testparallel"
)

// parallelTests is how many of the package's parallel tests run at once
// unless -test.parallel says otherwise.
const parallelTests = 6

// TestMain lets more parallel tests run at once than -parallel's default,
// GOMAXPROCS (2 on CI): they are the ones marked "mostly idle, waiting out
// etcd's and the agent's timeouts" (keepalives, leases, backoffs, etcd
// restarts), each with an etcd and an agent of its own, and two at a time
// they made two thirds of the package's -race run (223 s of tests in
// 125 s) while using a fraction of a core. The tests that a loaded machine
// starved (the ones saying "Not t.Parallel") stay serial: they run before
// any parallel test starts. An explicit -test.parallel is kept.
func TestMain(m *testing.M) {
	testparallel.AtLeast(parallelTests)
	os.Exit(m.Run())
}
