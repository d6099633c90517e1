package watch

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func deleteEvent(rev int64, rel string) *clientv3.Event {
	return &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(faultPrefix + rel), ModRevision: rev}}
}

// TestProbe: with nothing in the prefix changed since the applied revision
// (writes outside it, a key created and deleted again), the probe confirms
// the table current at etcd's revision; the events of the created and
// deleted key, delivered after that, are dropped instead of being taken
// for an out-of-order stream. A put or a delete in the prefix makes the
// probe report the watch behind.
func TestProbe(t *testing.T) {
	m, cli, r0 := listedMirror(t)
	ctx := context.Background()
	s := &stream{ctx: ctx, start: r0 + 1}
	if _, err := cli.Put(ctx, "/regiond/v1/agents/node-1", `{}`); err != nil {
		t.Fatal(err)
	}
	p, err := cli.Put(ctx, faultPrefix+"pools/tmp", zzA)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cli.Delete(ctx, faultPrefix+"pools/tmp")
	if err != nil {
		t.Fatal(err)
	}
	if res, rev := m.probe(s.ctx, true); res != probeCurrent || rev != d.Header.Revision {
		t.Fatalf("probe = %s at %d, want current at etcd's %d", res, rev, d.Header.Revision)
	}
	if got := m.Status().Revision; got != d.Header.Revision {
		t.Fatalf("table revision %d after the probe, want %d", got, d.Header.Revision)
	}
	before := m.Table()
	late := clientv3.WatchResponse{Events: []*clientv3.Event{putEvent(p.Header.Revision, "pools/tmp", zzA), deleteEvent(d.Header.Revision, "pools/tmp")}}
	if why := m.drain(make(chan clientv3.WatchResponse), late, true); why != "" {
		t.Fatalf("late events of a key created and deleted before the probe: %q, want them dropped", why)
	}
	if m.Table() != before {
		t.Fatal("late events already covered by the probe produced a new table")
	}

	if _, err := cli.Put(ctx, faultPrefix+"pools/zz", zzA); err != nil {
		t.Fatal(err)
	}
	if res, _ := m.probe(s.ctx, true); res != probeBehind {
		t.Fatalf("probe after a put in the prefix = %s, want %s", res, probeBehind)
	}
	if _, err := m.relist(ctx, ReasonInitial); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, faultPrefix+"pools/zz"); err != nil {
		t.Fatal(err)
	}
	if res, _ := m.probe(s.ctx, true); res != probeBehind {
		t.Fatalf("probe after a delete in the prefix = %s, want %s", res, probeBehind)
	}
}

// TestSilentReopenMakesBeforeBreak: a watch that fell silent while the
// prefix changed (it delivered the put, but the mirror, as far as it can
// tell, heard nothing) is replaced by a new watch from applied+1, created
// before the old one is dropped: Connected stays true all along, and the
// new watch replays the put from history.
func TestSilentReopenMakesBeforeBreak(t *testing.T) {
	m, cli, _ := listedMirror(t)
	ctx := context.Background()
	s, why := m.open(ctx, nil, false)
	if s == nil {
		t.Fatalf("open: %s", why)
	}
	defer s.cancel()
	p, err := cli.Put(ctx, faultPrefix+"pools/zz", zzA)
	if err != nil {
		t.Fatal(err)
	}
	stop, sampled := make(chan struct{}), make(chan int)
	go func() {
		down := 0
		for {
			select {
			case <-stop:
				sampled <- down
				return
			default:
			}
			if !m.Status().Connected {
				down++
			}
			runtime.Gosched()
		}
	}()
	next, why := m.silent(ctx, s)
	close(stop)
	if down := <-sampled; down > 0 {
		t.Fatalf("Connected false in %d samples during a healthy reopen", down)
	}
	if next == nil || next == s {
		t.Fatalf("silent watch with a change not delivered: next %v, %q; want a new watch", next, why)
	}
	defer next.cancel()
	if got := testutil.ToFloat64(m.metrics.reopens.WithLabelValues(ReasonSilent)); got != 1 {
		t.Fatalf("silent reopens = %v, want 1", got)
	}
	select {
	case resp, ok := <-next.ch:
		if why := m.drain(next.ch, resp, ok); why != "" {
			t.Fatalf("the new watch: %q", why)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the new watch replayed nothing")
	}
	if _, ok := m.Table().Pool("zz"); !ok || m.Table().Revision() < p.Header.Revision {
		t.Fatalf("pools/zz (revision %d) not replayed by the new watch (table revision %d)", p.Header.Revision, m.Table().Revision())
	}
}

// TestBehindTwiceRelists: a watch opened since one was found behind etcd
// (the mirror stuck), that heard nothing since, found behind in its turn
// ends in a relist (ReasonBehind): reopening from the applied revision
// again would be joined by etcd's grpc-proxy to the same dead upstream
// watch, or need a new one etcd refuses (an expired token). One that
// delivered something since is replaced as any silent watch is; so is the
// first found behind, which makes the mirror stuck
// (TestSilentReopenMakesBeforeBreak). A probe that finds the table current
// ends it. And a watch whose creation went unanswered relists when etcd
// holds changes past the applied revision, and opens again at etcd's
// revision when it holds none; either way the mirror is stuck until a
// watch delivers.
func TestBehindTwiceRelists(t *testing.T) {
	m, cli, r0 := listedMirror(t)
	ctx := context.Background()
	if _, err := cli.Put(ctx, faultPrefix+"pools/zz", zzA); err != nil {
		t.Fatal(err)
	}
	first := &stream{ctx: ctx, start: r0 + 1}
	next, why := m.silent(ctx, first)
	if next == nil || !m.stuck || !m.otherRange {
		t.Fatalf("the first watch found behind: %q, stuck %v, other range %v; want a new watch of the other key range (behind a proxy, a dead broadcast serves the one it had), and the mirror stuck", why, m.stuck, m.otherRange)
	}
	next.cancel()
	if m.silentAfter() >= m.cfg.ProgressInterval {
		t.Fatalf("stuck, a watch is probed after %v of silence; want less than one progress interval (%v)", m.silentAfter(), m.cfg.ProgressInterval)
	}
	quiet := &stream{ctx: ctx, start: r0 + 1}
	if next, why := m.silent(ctx, quiet); next != nil || why != ReasonBehind || !relists(why) {
		t.Fatalf("a watch that heard nothing, behind while stuck: next %v, %q; want a relist (%s)", next, why, ReasonBehind)
	}
	heard := &stream{ctx: ctx, start: r0 + 1, answered: true}
	next, why = m.silent(ctx, heard)
	if next == nil {
		t.Fatalf("a watch that delivered, behind while stuck: %q; want a new watch", why)
	}
	next.cancel()

	rangeBefore := m.otherRange
	if why := m.uncreated(ctx); why != ReasonUncreated || !m.stuck || m.otherRange == rangeBefore {
		t.Fatalf("uncreated with a change past the applied revision: %q, stuck %v, range switched %v; want %s, stuck, the other key range", why, m.stuck, m.otherRange != rangeBefore, ReasonUncreated)
	}
	rev, err := m.relist(ctx, ReasonUncreated)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cli.Put(ctx, "/regiond/v1/agents/node-1", `{}`) // outside the prefix
	if err != nil {
		t.Fatal(err)
	}
	if why := m.uncreated(ctx); why != "" || m.applied != p.Header.Revision {
		t.Fatalf("uncreated with nothing changed since %d: %q, applied %d; want to open again from etcd's revision %d", rev, why, m.applied, p.Header.Revision)
	}
	current := &stream{ctx: ctx, start: m.applied + 1}
	if n, why := m.silent(ctx, current); n != current || m.stuck {
		t.Fatalf("a probe that finds the table current: %q, stuck %v; want the watch kept and the mirror no longer stuck", why, m.stuck)
	}
}

// TestFailedProbeDisconnectsAtOnce: a silent watch whose probe gets no
// answer within RequestTimeout says Connected false at once, before the
// watch that replaces it is asked for, and Status names the silent reads
// (doc.go, silent: "a failed probe (no answer) sets Connected false at
// once, until the new watch's creation is answered"). Without it (the
// mutation review's survivor) Connected stayed true through the new
// watch's creation, up to RequestTimeout more, and, that creation not
// answered either, until follow gave the watch up.
func TestFailedProbeDisconnectsAtOnce(t *testing.T) {
	t.Parallel()
	g := &gate{}
	m, _ := gatedMirror(t, g)
	ctx := context.Background()
	s, why := m.open(ctx, nil, false)
	if s == nil {
		t.Fatalf("open: %q", why)
	}
	defer s.cancel()
	if !m.Status().Connected {
		t.Fatal("setup: not connected once the watch was created")
	}
	g.holdReads.Store(true) // the probe gets no answer
	g.pass.Store(0)         // nor does the creation of the watch after it
	var asked atomic.Int32
	var atCreation atomic.Pointer[Status]
	note := func() {
		if asked.Add(1) == 1 {
			st := m.Status()
			atCreation.Store(&st)
		}
	}
	g.onWatch.Store(&note)
	next, why := m.silent(ctx, s)
	if next != nil || why != ReasonSilent {
		t.Fatalf("silent with the probe and the creation unanswered: %v %q; want no watch, %q", next, why, ReasonSilent)
	}
	st := atCreation.Load()
	if st == nil {
		t.Fatal("no watch was asked for after the failed probe")
	}
	if st.Connected {
		t.Fatal("Connected true as the watch replacing one whose probe failed was asked for; want false at once")
	}
	if st.Unreachable != silentReadsMsg {
		t.Fatalf("Status.Unreachable %q after the failed probe; want %q", st.Unreachable, silentReadsMsg)
	}
}
