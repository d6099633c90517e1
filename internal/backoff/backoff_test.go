package backoff

import (
	"testing"
	"time"
)

func TestGrowsCapsAndResets(t *testing.T) {
	now := time.Unix(0, 0)
	b := New(100*time.Millisecond, time.Second)
	b.Jitter = 0
	b.now = func() time.Time { return now }
	var got []time.Duration
	for i := 0; i < 6; i++ {
		got = append(got, b.Next())
		now = now.Add(time.Second)
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delay %d = %v, want %v (all: %v)", i, got[i], want[i]*time.Millisecond, got)
		}
	}
	now = now.Add(3 * time.Minute)
	if d := b.Next(); d != 100*time.Millisecond {
		t.Fatalf("after a quiet period delay = %v, want reset to 100ms", d)
	}
	b.Reset()
	if d := b.Next(); d != 100*time.Millisecond {
		t.Fatalf("after Reset delay = %v, want 100ms", d)
	}
}

func TestJitterBounded(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	for i := 0; i < 100; i++ {
		b.Reset()
		if d := b.Next(); d < 100*time.Millisecond || d > 200*time.Millisecond {
			t.Fatalf("jittered delay %v outside [100ms, 200ms]", d)
		}
	}
}

// TestCapHoldsWithJitter: at the cap the jittered delay stays within
// [Max/(1+Jitter), Max]: it went up to twice Max (jitter 1), so an agent
// waited up to a minute to retry an etcd that was back, where the docs say
// 30 s.
func TestCapHoldsWithJitter(t *testing.T) {
	b := New(800*time.Millisecond, 30*time.Second)
	for range 12 { // well past the cap
		b.Next()
	}
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := b.Next()
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi > 30*time.Second || lo < 15*time.Second {
		t.Fatalf("delays at the cap in [%v, %v], want within [15s, 30s]", lo, hi)
	}
	if hi-lo < 10*time.Second {
		t.Fatalf("delays at the cap in [%v, %v]: want them spread (jitter)", lo, hi)
	}
}
