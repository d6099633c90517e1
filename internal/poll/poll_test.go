package poll

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	asked := 0
	if _, ok := Until(time.Minute, func() bool { asked++; return asked == 3 }); !ok || asked != 3 {
		t.Fatalf("ok %v after %d asks; want true after 3", ok, asked)
	}
}

func TestUntilAsksOnceMoreAfterTheDeadline(t *testing.T) {
	asked := 0
	took, ok := Until(0, func() bool { asked++; return true })
	if !ok || asked != 1 || took < 0 {
		t.Fatalf("ok %v after %d asks; want true after 1 (the last ask past the deadline)", ok, asked)
	}
	if _, ok := Until(0, func() bool { return false }); ok {
		t.Fatal("a condition that never holds reported as held")
	}
}

func TestMustWaitsForTheCondition(t *testing.T) {
	asked := 0
	Must(t, time.Minute, "the third ask", func() bool { asked++; return asked == 3 })
	if asked != 3 {
		t.Fatalf("%d asks; want 3", asked)
	}
}

// fatalTB records Must's failure instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper()      {}
func (f *fatalTB) Failed() bool { return false }
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestMustFailsNamingWhatItWaitedFor(t *testing.T) {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); Must(tb, 0, "a state never reached", func() bool { return false }) }()
	<-done
	if tb.msg != "timed out waiting for a state never reached (0s)" {
		t.Fatalf("Must's failure: %q", tb.msg)
	}
}
