package snapshot

import (
	"testing"
	"time"
)

// One dear write among cheap ones (a collection, a page fault) is charged
// at most twice the average, so the next is not held back ten times its
// cost; writes that stay dear are charged in full within a few.
func TestPacerSmoothsOneDearWrite(t *testing.T) {
	const ms = time.Millisecond
	p := pacer{budget: 0.2, max: time.Second}
	now := time.Unix(1000, 0)
	for range 8 { // cheap writes, each as soon as allowed
		p.wrote(now, ms)
		now = p.next()
	}
	if gap := p.next().Sub(p.lastStart); gap != 5*ms {
		t.Fatalf("after 1 ms writes the next waits %v, want 5ms (1 ms / 0.2)", gap)
	}
	p.wrote(now, 10*ms) // one dear write
	if gap := p.next().Sub(now); gap != 10*ms {
		t.Fatalf("after one 10 ms write among 1 ms ones the next waits %v, want 10ms (charged 2×avg)", gap)
	}
	var gap time.Duration
	for range 6 { // writes that stay dear
		now = p.next()
		p.wrote(now, 10*ms)
		gap = p.next().Sub(now)
	}
	if gap != 50*ms {
		t.Fatalf("after writes that stay at 10 ms the next waits %v, want 50ms (charged in full)", gap)
	}
}
