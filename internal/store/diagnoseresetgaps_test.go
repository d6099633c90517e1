package store

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/internal/tcpproxy"
)

// TestHeartbeatDiagnosesEachOutage proves that the diagnosis throttle
// (diagnoseEvery) starts again once the heartbeat is up: a second outage
// within 30 s of the first one's diagnosis has its first retry diagnosed
// too (diagnosedAt reset when the heartbeat comes up), not the bare error.
func TestHeartbeatDiagnosesEachOutage(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	px, err := tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	eps := []string{"http://" + px.Addr()}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	logs := &logbuf.Buffer{}
	s := newStore(t, cli, Options{RequestTimeout: 300 * time.Millisecond, Endpoints: eps,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	up, stop := startHeartbeat(s, time.Second)
	defer stop()
	diagnosed := func() int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "heartbeat: cannot write marker, retrying") && strings.Contains(l, ": dial: connect: connection refused)") {
				n++
			}
		}
		return n
	}
	for outage := 1; outage <= 2; outage++ {
		select {
		case <-up:
		case <-time.After(10 * time.Second):
			t.Fatalf("the heartbeat did not come up (outage %d):\n%s", outage, logs)
		}
		px.Sever()
		if _, ok := poll.Until(10*time.Second, func() bool { return diagnosed() >= outage }); !ok {
			t.Fatalf("outage %d: %d retry warnings diagnosed, want %d:\n%s", outage, diagnosed(), outage, logs)
		}
		if err := px.Restore(); err != nil {
			t.Fatal(err)
		}
	}
}
