package watch

import (
	"context"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestOneUnansweredSilenceSendsProgressRequestsStill: a silence in which
// etcd was past the watch's start revision, and the probe found the table
// current, shows that progress requests went unanswered; once alone it is
// also a member lost under the watch (the heartbeat review: the etcd
// leader killed, and the agent stopped asking for progress for good,
// naming a grpc-proxy that was not there). Two in a row stop the
// requests; a progress notification counts them from zero again.
func TestOneUnansweredSilenceSendsProgressRequestsStill(t *testing.T) {
	m, cli, _ := listedMirror(t)
	ctx := context.Background()
	s, why := m.open(ctx, nil, false)
	if s == nil {
		t.Fatalf("open: %s", why)
	}
	defer s.cancel()
	resp, err := cli.Put(ctx, "/elsewhere/key", "x") // etcd moves past the watch's start
	if err != nil {
		t.Fatal(err)
	}
	silence := func(n int, ignored bool) {
		t.Helper()
		if next, why := m.silent(ctx, s); next != s {
			t.Fatalf("silence %d: the watch was not kept (%s)", n, why)
		}
		if m.progressIgnored != ignored {
			t.Fatalf("after silence %d: progress requests ignored %v, want %v", n, m.progressIgnored, ignored)
		}
	}
	silence(1, false) // the probe finds etcd past the start: the requests sent before it could not be answered
	silence(2, false) // once: a lost stream may explain it
	silence(3, true)  // twice in a row: the path drops them

	progress := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: m.clusterID, Revision: resp.Header.Revision}}
	if !progress.IsProgressNotify() {
		t.Fatal("the test's response is no progress notification")
	}
	if why, _ := m.handle(progress); why != "" {
		t.Fatalf("progress notification: %s", why)
	}
	if m.progressIgnored {
		t.Fatal("a progress notification did not send progress requests again")
	}
	silence(4, false)
	silence(5, true)
}
