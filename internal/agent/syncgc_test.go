package agent

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
)

// gcPercent reads the current GOGC setting.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestSyncGCLowersUntilReadyAndRestores(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(150)) // a setting of the process's own, restored after
	ready1, ready2 := make(chan struct{}), make(chan struct{})
	done1, done2 := make(chan struct{}), make(chan struct{})
	wait := func(ch chan struct{}) func(context.Context) error {
		return func(context.Context) error { <-ch; return nil }
	}
	syncing := func(n int) { // waits until n agents are syncing
		for {
			syncGC.Lock()
			k := syncGC.n
			syncGC.Unlock()
			if k == n {
				return
			}
			runtime.Gosched()
		}
	}
	go func() { lowerGCUntil(context.Background(), wait(ready1)); close(done1) }()
	syncing(1)
	if got := gcPercent(); got != syncGCPercent {
		t.Fatalf("while syncing: GOGC %d, want %d", got, syncGCPercent)
	}
	go func() { lowerGCUntil(context.Background(), wait(ready2)); close(done2) }()
	syncing(2)
	close(ready1)
	<-done1
	if got := gcPercent(); got != syncGCPercent {
		t.Fatalf("one of two agents synced: GOGC %d, want %d until the other is", got, syncGCPercent)
	}
	close(ready2)
	<-done2
	if got := gcPercent(); got != 150 {
		t.Fatalf("after the sync: GOGC %d, want the process's own 150 back", got)
	}
}

func TestSyncGCLeavesAnOperatorsGOGC(t *testing.T) {
	t.Setenv("GOGC", "200")
	defer debug.SetGCPercent(debug.SetGCPercent(200))
	lowerGCUntil(context.Background(), func(context.Context) error {
		if got := gcPercent(); got != 200 {
			t.Errorf("GOGC=200 in the environment: %d while syncing", got)
		}
		return nil
	})
}
