package watch

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/tcpproxy"
)

// gate decides how many responses of each watch stream reach clientv3, as
// etcd's grpc-proxy with an expired stream token does: -1 all, 0 none (a
// creation never answered: a new upstream watch refused), 1 the creation
// alone (a watch joined to a refused or dead upstream watch). Reads pass,
// unless refuseReads: then etcd refuses them (permission denied).
type gate struct {
	pass         atomic.Int32
	refuseReads  atomic.Bool
	holdReads    atomic.Bool  // reads get no answer (until their deadline)
	progressReqs atomic.Int32 // progress requests sent on watch streams
	reads        atomic.Int32 // the reads (Range) made
	holdRead     atomic.Int32 // the read of that number gets no answer (0: none)
	// onWatch, if set, runs as each watch stream is opened (in clientv3's
	// goroutine, before the stream's creation is sent).
	onWatch atomic.Pointer[func()]
}

// SendMsg counts the progress requests sent.
func (s *gatedStream) SendMsg(m any) error {
	if r, ok := m.(*pb.WatchRequest); ok && r.GetProgressRequest() != nil {
		s.g.progressReqs.Add(1)
	}
	return s.ClientStream.SendMsg(m)
}

// gatedStream is a watch stream behind a gate.
type gatedStream struct {
	grpc.ClientStream
	g    *gate
	seen int32
}

// RecvMsg passes the responses the gate lets through, then blocks until
// the stream ends.
func (s *gatedStream) RecvMsg(m any) error {
	if p := s.g.pass.Load(); p >= 0 && s.seen >= p {
		<-s.Context().Done()
		return s.Context().Err()
	}
	s.seen++
	return s.ClientStream.RecvMsg(m)
}

// gatedMirror is listedMirror with its watch streams behind g (open at
// first), a 300 ms request timeout and 1.2 s progress interval; it also
// returns a client that is not behind g.
func gatedMirror(t *testing.T, g *gate, tweak ...func(*Config)) (*Mirror, *clientv3.Client) {
	t.Helper()
	m, direct, _ := gatedMirrorVia(t, g, false, tweak...)
	return m, direct
}

// gatedMirrorVia is gatedMirror whose client, with proxied, reaches etcd
// through a TCP proxy (returned) that the test can sever and restore;
// gRPC then redials every 50 ms.
func gatedMirrorVia(t *testing.T, g *gate, proxied bool, tweak ...func(*Config)) (*Mirror, *clientv3.Client, *tcpproxy.Proxy) {
	t.Helper()
	g.pass.Store(-1)
	srv := devetcd.NewTest(t)
	direct := devetcd.NewTestClient(t, srv)
	fleettest.Load(t, direct, faultPrefix)
	endpoints := srv.Endpoints
	var proxy *tcpproxy.Proxy
	var redial []grpc.DialOption
	if proxied {
		var err error
		if proxy, err = tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		endpoints = []string{proxy.URL()}
		redial = append(redial, grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 200 * time.Millisecond,
			Backoff: grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1, MaxDelay: 50 * time.Millisecond}}))
	}
	icpt := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if f := g.onWatch.Load(); f != nil && method == "/etcdserverpb.Watch/Watch" {
			(*f)()
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != "/etcdserverpb.Watch/Watch" {
			return cs, err
		}
		return &gatedStream{ClientStream: cs, g: g}, nil
	}
	reads := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.KV/Range" && g.refuseReads.Load() {
			return rpctypes.ErrGRPCPermissionDenied
		}
		if method == "/etcdserverpb.KV/Range" && (g.reads.Add(1) == g.holdRead.Load() || g.holdReads.Load()) {
			<-ctx.Done()
			return ctx.Err()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: append(redial, grpc.WithStreamInterceptor(icpt), grpc.WithUnaryInterceptor(reads))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	cfg := Config{Client: cli, Prefix: faultPrefix, RequestTimeout: 300 * time.Millisecond, ProgressInterval: 1200 * time.Millisecond}
	for _, f := range tweak {
		f(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The list has the mirror's short request timeout: a loaded machine
	// (-race, the other packages' tests) may need more than one.
	for attempt := 1; ; attempt++ {
		_, err := m.relist(context.Background(), ReasonInitial)
		if err == nil {
			break
		}
		if attempt == 10 {
			t.Fatal(err)
		}
	}
	return m, direct, proxy
}

// TestUnansweredCreationsInARow: a creation not answered on a connection
// up all along leads to the probe (and, with changes past the table, the
// relist) only at the second in a row; the count starts over after the
// probe, and at a watch created in between (review: after one relist,
// every single unanswered creation relisted, a full list each).
func TestUnansweredCreationsInARow(t *testing.T) {
	t.Parallel()
	g := &gate{}
	m, direct := gatedMirror(t, g)
	ctx := context.Background()
	put := func() {
		t.Helper()
		if _, err := direct.Put(ctx, faultPrefix+"pools/zz", zzA+" "); err != nil {
			t.Fatal(err)
		}
	}
	pair := func(what string) {
		t.Helper()
		put()
		if s, why := m.open(ctx, nil, false); s != nil || why != createTimeout {
			t.Fatalf("%s, the first unanswered creation: %v %q; want %q (no probe: it would find the put and relist)", what, s, why, createTimeout)
		}
		if s, why := m.open(ctx, nil, false); s != nil || why != ReasonUncreated || !m.stuck {
			t.Fatalf("%s, the second unanswered creation in a row: %v %q, stuck %v; want %q", what, s, why, m.stuck, ReasonUncreated)
		}
		if _, err := m.relist(ctx, ReasonUncreated); err != nil {
			t.Fatal(err)
		}
	}
	g.pass.Store(0)
	pair("at first")
	pair("after the relist")
	put()
	if s, why := m.open(ctx, nil, false); s != nil || why != createTimeout {
		t.Fatalf("an unanswered creation: %v %q; want %q", s, why, createTimeout)
	}
	g.pass.Store(-1)
	s, why := m.open(ctx, nil, false)
	if s == nil {
		t.Fatalf("open with creations answered: %q", why)
	}
	s.cancel()
	g.pass.Store(0)
	pair("after a watch created")

	// A creation that fails otherwise breaks the row: here its check's
	// read is refused (permission denied) between two unanswered ones.
	put()
	if s, why := m.open(ctx, nil, false); s != nil || why != createTimeout {
		t.Fatalf("an unanswered creation: %v %q; want %q", s, why, createTimeout)
	}
	g.pass.Store(-1)
	g.refuseReads.Store(true)
	if s, why := m.open(ctx, nil, true); s != nil || why != ReasonPermission {
		t.Fatalf("a creation whose check is refused: %v %q; want %q", s, why, ReasonPermission)
	}
	g.refuseReads.Store(false)
	g.pass.Store(0)
	if s, why := m.open(ctx, nil, false); s != nil || why != createTimeout {
		t.Fatalf("the unanswered creation after one that failed otherwise: %v %q; want %q (the row broken: no probe)", s, why, createTimeout)
	}
}

// TestCreationAskedWhileDownIsNotUnanswered: a creation asked while the
// client had no connection to etcd, and not answered by its timeout
// although the connection was back by then, is no creation "not answered
// on a connection up all along" (open's ready): it breaks the row instead
// of counting in it (doc.go: two in a row lead to the probe, and with
// changes past the table to a relist, a full list). Two such creations,
// then one on a connection up all along, lead to no probe: only the next
// one does, the second of a real row. Counted (the mutation review's
// survivor, "ready &&" dropped), the second such creation relisted.
func TestCreationAskedWhileDownIsNotUnanswered(t *testing.T) {
	t.Parallel()
	g := &gate{}
	m, direct, proxy := gatedMirrorVia(t, g, true)
	ctx := context.Background()
	conn := m.cfg.Client.ActiveConnection()
	// toState waits until the client's connection is ready (or, with
	// ready false, is not), bounded; it reports whether it got there.
	toState := func(ready bool) bool {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for st := conn.GetState(); (st == connectivity.Ready) != ready; st = conn.GetState() {
			if st == connectivity.Idle {
				conn.Connect()
			}
			if !conn.WaitForStateChange(wctx, st) {
				return false
			}
		}
		return true
	}
	if _, err := direct.Put(ctx, faultPrefix+"pools/zz", zzA); err != nil { // a probe would find it and relist
		t.Fatal(err)
	}
	g.pass.Store(0) // no creation is answered
	// restore, run as the watch stream is opened (after open found the
	// connection down), brings the connection back before the creation
	// is sent: it is up when the creation times out.
	restore := func() {
		if err := proxy.Restore(); err != nil {
			t.Error(err)
		}
		if !toState(true) {
			t.Error("the connection did not come back within 10 s of the restore")
		}
	}
	for i := 1; i <= 2; i++ {
		proxy.Sever()
		if !toState(false) {
			t.Fatal("the connection still ready 10 s after the proxy was severed")
		}
		g.onWatch.Store(&restore)
		s, why := m.open(ctx, nil, false)
		g.onWatch.Store(nil)
		if t.Failed() {
			t.FailNow()
		}
		if s != nil || why != createTimeout || m.stuck {
			t.Fatalf("creation %d, asked while down, back up before its timeout: %v %q, stuck %v; want %q, no probe (it would find the put and relist)",
				i, s, why, m.stuck, createTimeout)
		}
	}
	if s, why := m.open(ctx, nil, false); s != nil || why != createTimeout || m.stuck {
		t.Fatalf("the first creation on a connection up all along: %v %q, stuck %v; want %q (one alone: no probe)", s, why, m.stuck, createTimeout)
	}
	if s, why := m.open(ctx, nil, false); s != nil || why != ReasonUncreated {
		t.Fatalf("the second creation in a row on a connection up all along: %v %q; want %q (the probe found the put)", s, why, ReasonUncreated)
	}
}

// TestReadRefusalHoldsWhileCreationsGoUnanswered: a probe whose read etcd
// refuses names the refusal in Status at once, and it stays named while
// creations go unanswered (behind a grpc-proxy: a watch creation held, a
// read refused), until a read is answered: it flapped, cleared by every
// unanswered creation and set again by every second one's probe (the
// diff review).
func TestReadRefusalHoldsWhileCreationsGoUnanswered(t *testing.T) {
	t.Parallel()
	g := &gate{}
	m, _ := gatedMirror(t, g)
	ctx := context.Background()
	g.pass.Store(0)
	g.refuseReads.Store(true)
	for i := 1; i <= 5; i++ {
		m.open(ctx, nil, false)
		refused := strings.Contains(m.Status().Refused, "etcd refuses the read")
		if i >= 2 && !refused {
			t.Fatalf("after unanswered creation %d (a probe's read refused at the second): Status().Refused %q; want the refused read named", i, m.Status().Refused)
		}
	}
	g.refuseReads.Store(false)
	m.open(ctx, nil, false)
	m.open(ctx, nil, false) // the probe's read is answered
	if r := m.Status().Refused; r != "" {
		t.Fatalf("after a read answered: Status().Refused %q; want it cleared", r)
	}
}

// TestStuckWatchKeepsTheBackoff: a watch created that lasted past a second
// but ended stuck (behind: joined to a refused upstream watch) is no
// success for the backoff, which keeps growing (reset, a stuck agent
// relisted, a full list each time, every few seconds for good: the diff
// review); one that lasted and ended otherwise resets it
// (TestHealthyWatchResetsTheBackoff).
func TestStuckWatchKeepsTheBackoff(t *testing.T) {
	t.Parallel()
	g := &gate{}
	m, direct := gatedMirror(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := direct.Put(ctx, faultPrefix+"pools/zz", zzA); err != nil {
		t.Fatal(err)
	}
	bo := backoff.New(50*time.Millisecond, 30*time.Second)
	bo.Factor, bo.Jitter, bo.ResetAft = 10, 0, time.Hour
	bo.Next()
	bo.Next()       // 500 ms: the next is 5 s
	m.stuck = true  // a watch was found behind before
	g.pass.Store(1) // created, then silent
	began := time.Now()
	if why := m.follow(ctx, bo, nil); why != ReasonBehind {
		t.Fatalf("follow: %q; want %q", why, ReasonBehind)
	}
	if lasted := time.Since(began); lasted < healthyAfter {
		t.Fatalf("the watch lasted %v: want more than %v for the test to mean anything", lasted, healthyAfter)
	}
	if d := bo.Next(); d < 5*time.Second {
		t.Fatalf("the next delay after a watch that ended behind: %v; want 5 s (the backoff was reset)", d)
	}
}

// TestDeliveryEndsStuck: a watch that delivers ends the stuck state (the
// silent watches after it are probed at the third progress tick again,
// not at the first, and one found behind is replaced, not relisted).
func TestDeliveryEndsStuck(t *testing.T) {
	t.Parallel()
	g := &gate{}
	m, direct := gatedMirror(t, g)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, why := m.open(ctx, nil, false)
	if s == nil {
		t.Fatalf("open: %q", why)
	}
	m.stuck = true
	p, err := direct.Put(ctx, faultPrefix+"pools/zz", zzA)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); m.serve(ctx, s) }()
	deadline := time.Now().Add(10 * time.Second)
	for m.Table().Revision() < p.Header.Revision {
		if time.Now().After(deadline) {
			t.Fatal("the put was not delivered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if m.stuck {
		t.Fatal("stuck after a watch delivered; want it ended")
	}
}

// TestFailingOpensBackOff: creations that keep failing are retried with
// the backoff past the first quick retries (each attempt a creation, and
// every second one a probe, on an etcd that may be struggling), not in a
// loop (the mutation review: no test counted them).
func TestFailingOpensBackOff(t *testing.T) {
	t.Parallel()
	g := &gate{}
	m, _ := gatedMirror(t, g)
	bo := backoff.New(time.Second, 30*time.Second)
	bo.Factor, bo.Jitter, bo.ResetAft = 10, 0, time.Hour
	g.pass.Store(0) // no creation is answered
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if why := m.follow(ctx, bo, nil); why != "" {
		t.Fatalf("follow: %q; want it to retry until the context ends", why)
	}
	// 1 s, then 10 s (cut short by the context): the next is the cap.
	if d := bo.Next(); d != 30*time.Second {
		t.Fatalf("the next delay after 4 s of failing creations: %v; want 30 s (two waits of the backoff taken)", d)
	}
}

// TestListTimeoutIsSaid: lists whose pages get no answer on a connection
// that is up are said in Status (etcd_error in /v1/status) while they
// fail, not left unexplained (the herd review: 30 s of "connected":
// false and no reason, as a fleet's agents listed at once through an
// overloaded proxy); a list answered ends it.
func TestListTimeoutIsSaid(t *testing.T) {
	t.Parallel()
	g := &gate{}
	m, _ := gatedMirror(t, g)
	g.holdReads.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait := func(what string, cond func(Status) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for st := m.Status(); !cond(st); st = m.Status() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %+v", what, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("the list timing out said", func(st Status) bool {
		return !st.Connected && strings.Contains(st.Unreachable, "a page of the list of the prefix got no answer within the request timeout (300ms")
	})
	g.holdReads.Store(false)
	wait("connected once a list is answered", func(st Status) bool { return st.Connected && st.Unreachable == "" })
}

// TestNoProgressRequestsWhileChangesFlow: a watch that delivers within
// each progress interval is synced by what it delivers and asks etcd for
// no progress (etcd's grpc-proxy drops each request with an ERROR in its
// log: the herd review counted one per agent every 5 s under a steady
// stream of writes); a quiet watch still asks.
func TestNoProgressRequestsWhileChangesFlow(t *testing.T) {
	t.Parallel()
	g := &gate{}
	m, direct := gatedMirror(t, g)
	ctx, cancel := context.WithCancel(context.Background())
	s, why := m.open(ctx, nil, false)
	if s == nil {
		t.Fatalf("open: %q", why)
	}
	done := make(chan struct{})
	go func() { defer close(done); m.serve(ctx, s) }()
	defer func() { cancel(); <-done }()
	for i := range 40 { // 4 s of changes, every 100 ms: three progress ticks
		if _, err := direct.Put(ctx, faultPrefix+"pools/zz", fmt.Sprintf(`{"host":"h%d.example.net","residency":"eu"}`, i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := g.progressReqs.Load(); n != 0 {
		t.Fatalf("%d progress request(s) while changes were delivered every 100 ms; want none", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for g.progressReqs.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no progress request from a quiet watch within 10 s; want one per progress interval")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestListPageAskedAgain: a page of a list that gets no answer within the
// request timeout is asked again at the list's revision, and the list
// goes on from there, instead of being thrown away and started over (the
// herd review: agents listing at once through an overloaded proxy lost
// up to 7 pages each time, and failed together again).
func TestListPageAskedAgain(t *testing.T) {
	t.Parallel()
	g := &gate{}
	m, _ := gatedMirror(t, g, func(c *Config) { c.PageSize = 10 })
	want := len(m.state)
	if want <= 30 {
		t.Fatalf("the fleet has %d keys: want more than three pages of 10", want)
	}
	before := g.reads.Load()
	g.holdRead.Store(before + 3) // the third page of the next list
	if _, err := m.relist(context.Background(), ReasonInitial); err != nil {
		t.Fatalf("a list whose third page got no answer once: %v; want the page asked again and the list done", err)
	}
	if len(m.state) != want {
		t.Fatalf("listed %d keys; want %d", len(m.state), want)
	}
	if n, pages := g.reads.Load()-before, int32((want+9)/10); n != pages+1 {
		t.Fatalf("%d reads for a list of %d pages, one held; want %d (the held page once more, not the list again)", n, pages, pages+1)
	}
}
