package watch

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
)

// streamGoroutines counts clientv3's watch gRPC stream loops alive now.
func streamGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "(*watchGRPCStream).run(")
}

// TestProgressRequestOnEndedWatchLeaksNoStream: serve's tick and the
// watch's channel closing can be ready together (the select picks either).
// When the tick wins, requestProgress asks clientv3 for progress on a
// stream that clientv3 already dropped (etcd ended the watch, here after a
// compaction). clientv3's RequestProgress then makes a new gRPC watch
// stream for that context, detached from its cancellation, with no watch
// on it: with the client's shared Watcher, one stream (its goroutines, and
// a watch stream on etcd's side) leaked per such race for the life of the
// agent. Each watch's own Watcher, closed with it, ends that stream too.
func TestProgressRequestOnEndedWatchLeaksNoStream(t *testing.T) {
	m, cli, r0 := listedMirror(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := cli.Put(ctx, faultPrefix+"pools/zz", zzA); err != nil {
			t.Fatal(err)
		}
	}
	last, err := cli.Put(ctx, faultPrefix+"pools/zz", zzB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, last.Header.Revision); err != nil {
		t.Fatal(err)
	}
	base := streamGoroutines()
	// A watch from r0+1, now compacted: etcd answers the creation, then
	// ends the watch (as it does to any watch the compaction overtakes).
	m.applied = r0
	s, why := m.open(ctx, nil, false)
	if s == nil {
		t.Fatalf("open: %s", why)
	}
	ended := false
	for deadline := time.After(10 * time.Second); !ended; {
		select {
		case _, ok := <-s.ch:
			ended = !ok
		case <-deadline:
			t.Fatal("the compacted watch did not end")
		}
	}
	time.Sleep(200 * time.Millisecond) // clientv3 drops the stream
	if n := streamGoroutines(); n != base {
		t.Logf("streams after the watch ended: %d (base %d)", n, base)
	}
	// The tick won the select: a progress request on the ended watch.
	m.requestProgress(s)
	s.cancel() // what serve/follow do next
	time.Sleep(time.Second)
	if n := streamGoroutines(); n > base {
		t.Fatalf("%d watch gRPC stream(s) alive after the ended watch was cancelled (%d before): RequestProgress made a stream that never ends", n-base, base)
	}
}
