package watch

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
)

// compactingRun runs a gated mirror (creations answered) whose first
// watch in Run finds its start revision compacted: as its stream is
// opened, two puts in the prefix and a compaction at the second are made
// from a direct client, before the creation is sent. Run's clock (m.now)
// is the test's; it moves on by advance then, as if the watch had lasted
// that long after the list. The backoff Run takes waits an hour at first,
// ten times more each time, without jitter: a wait Run takes is never
// over within the test, and how many it took is read from bo.Next() once
// Run has returned (stop). last is the compacted revision, once made.
func compactingRun(t *testing.T, advance time.Duration) (m *Mirror, bo *backoff.Backoff, logs *logbuf.Buffer, last *atomic.Int64, stop func()) {
	t.Helper()
	g := &gate{}
	bo = backoff.New(time.Hour, 1000*time.Hour)
	bo.Factor, bo.Jitter, bo.ResetAft = 10, 0, 1000*time.Hour
	logs = &logbuf.Buffer{}
	m, direct := gatedMirror(t, g, func(c *Config) {
		c.RequestTimeout = 5 * time.Second // nothing here is to time out: a list that did would wait the hour
		c.NewBackoff = func() *backoff.Backoff { return bo }
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	t.Cleanup(func() { t.Logf("mirror log:\n%s", logs) })
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	m.now = func() time.Time { return time.Unix(0, clock.Load()) }
	last = new(atomic.Int64)
	var once sync.Once
	compact := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, v := range []string{zzA, zzB} {
				resp, err := direct.Put(ctx, faultPrefix+"pools/zz", v)
				if err != nil {
					t.Error(err)
					return
				}
				last.Store(resp.Header.Revision)
			}
			if _, err := direct.Compact(ctx, last.Load()); err != nil {
				t.Error(err)
			}
			clock.Add(int64(advance))
		})
	}
	g.onWatch.Store(&compact)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return m, bo, logs, last, stop
}

// TestCompactionRelistsAtOnce: a watch that finds its history compacted
// more than a second after the list relists at once, without the
// backoff's wait (agent.md, doc.go: a compaction relists at once). Here
// the backoff would wait an hour: the relist must come all the same, and
// no wait be taken. Waiting there (the mutation review's survivor) left
// an agent behind a compacted history for the backoff's delay.
func TestCompactionRelistsAtOnce(t *testing.T) {
	t.Parallel()
	m, bo, _, last, stop := compactingRun(t, 2*time.Second)
	poll.Must(t, 15*time.Second, "the relist after the compaction, and a watch created after it", func() bool {
		tb := m.Table()
		return testutil.ToFloat64(m.metrics.resyncs.WithLabelValues(ReasonCompacted)) == 1 &&
			last.Load() > 0 && tb != nil && tb.Revision() >= last.Load() && m.Status().Connected
	})
	stop()
	if d := bo.Next(); d != time.Hour {
		t.Fatalf("the backoff's next delay is %v; want 1h0m0s, no wait taken", d)
	}
}

// TestRelistsBackOff: a relist that follows its list within a second (a
// compaction found as fast as the history is listed) waits the backoff
// first, rather than list again at once, and again, in a loop (each a
// full list of the prefix). Relisting without the wait (the mutation
// review's survivor) took no wait, and relisted.
func TestRelistsBackOff(t *testing.T) {
	t.Parallel()
	m, bo, logs, _, stop := compactingRun(t, 0)
	poll.Must(t, 15*time.Second, "the compacted watch's relist begun", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "msg=relisting") && strings.Contains(l, "reason=compacted") {
				return true
			}
		}
		return false
	})
	// Run, past the line, draws the backoff's delay before anything else
	// (backoff.WaitConn), ended or not.
	stop()
	if d := bo.Next(); d != 10*time.Hour {
		t.Fatalf("the backoff's next delay is %v; want 10h0m0s, one wait (of an hour) taken before the relist", d)
	}
	if n := testutil.ToFloat64(m.metrics.resyncs.WithLabelValues(ReasonCompacted)); n != 0 {
		t.Fatalf("%v relists for the compaction within the backoff's hour; want none", n)
	}
}
