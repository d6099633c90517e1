// Package testprog finds the outside programs some tests need (php,
// php-fpm, nginx, node, chromium, …). A missing program skips the test
// with a message naming it and how to install it, unless CI=true: there
// .ci/run installs every program the tests need, so a missing one is a
// failure, never a silent skip.
//
//	php := testprog.Need(t, "php", "apt-get install -y php-cli")
package testprog

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true), where every outside
// program must be present.
func InCI() bool { return os.Getenv("CI") == "true" }

// Need returns the path of program name, looked up in PATH. When it is
// missing the test is skipped with a message naming it and install (how to
// get it), or fails when InCI.
func Need(t testing.TB, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Missing(t, name+" not found in PATH ("+err.Error()+")", install)
	}
	return path
}

// Missing skips the test (fails it in CI) because a program it needs is
// absent or unusable: what says what is wrong, install how to fix it.
func Missing(t testing.TB, what, install string) {
	t.Helper()
	msg := what + ": " + install + "; .ci/run installs it"
	if InCI() {
		t.Fatal(msg + " (CI=true: outside programs must be present)")
	}
	t.Skip(msg + " (skipped: CI is not true)")
}

// NeedRoot skips the test (fails it in CI, where .ci/run runs as root)
// unless it runs as root: why says what it needs root for.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	msg := "needs root: " + why + "; run the tests as root"
	if InCI() {
		t.Fatal(msg + " (CI=true: this test must run)")
	}
	t.Skip(msg + " (skipped: CI is not true)")
}
