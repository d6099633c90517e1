package poll

import (
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
