package faultsuite

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/gobuild"
	"github.com/regiond/regiond/internal/tcpproxy"
	"github.com/regiond/regiond/routing"
)

var (
	flagOps    = flag.Int("fleet.ops", 5000, "operations in the random history of TestFleetFaults")
	flagAgents = flag.Int("fleet.agents", 6, "agent processes in TestFleetFaults (a third of them through the grpc-proxy)")
	flagSeed   = flag.Uint64("fleet.seed", 0, "random seed of TestFleetFaults (0: from the clock; the seed is logged)")
)

const (
	root   = "/fault"
	prefix = root + "/routing/"
	// opsPerPhase is how many operations run between two checkpoints.
	opsPerPhase = 1000
)

// fleet is the suite's world: the cluster, the proxy, the agents and what
// watches them.
type fleet struct {
	t      *testing.T
	seed   uint64
	c      *etcdproc.Cluster
	admin  *clientv3.Client // the writer's and the compactor's
	rec    *recorder
	refs   *refs
	chk    *checker
	proxy  *etcdproc.Proxy
	agents []*agentProc
	// links are the TCP proxies each agent reaches etcd (or the grpc-proxy)
	// through, severed to cut its connections.
	links  map[*agentProc][]*tcpproxy.Proxy
	rng    *rand.Rand
	faults map[string]int
	// compactions counts compactions done by the background compactor.
	compactions atomic.Int64
}

// TestFleetFaults is the fleet fault suite (see the package doc).
func TestFleetFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-member etcd cluster, a grpc-proxy and agent processes")
	}
	// Beside the lease tests (t.Parallel), which mostly wait out leases'
	// TTLs on clusters and agents of their own: the suite's -race run was
	// the sum of the four.
	t.Parallel()
	prebuild(true, false)
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -args -fleet.seed=%d)", seed, seed)
	f := startFleet(t, seed, *flagAgents)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.startBackground(ctx)
	f.checkpoint(ctx, 0, "start")

	// Several writers at once: the history is what the recorder saw, in
	// whatever order etcd committed it.
	writers := make([]*writer, 4)
	for i := range writers {
		writers[i] = &writer{cli: f.admin, prefix: prefix, rng: rand.New(rand.NewPCG(seed, uint64(10+i)))}
	}
	began := time.Now()
	for phase := 1; total(writers).ops+total(writers).failed < *flagOps; phase++ {
		var wg sync.WaitGroup
		for _, w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < opsPerPhase/len(writers) && ctx.Err() == nil; n++ {
					w.apply(ctx, w.next())
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		f.injectFaultsUntil(done)
		f.checkpoint(ctx, total(writers).last, fmt.Sprintf("checkpoint %d", phase))
	}
	f.report(ctx, total(writers), time.Since(began))
}

// prebuild starts building the test's binaries (gobuild builds each once
// per process: gobuild.Binary waits for it) while the caller starts its
// cluster, so that their link does not follow etcd's in the test's time.
func prebuild(agent, ctl bool) {
	if agent {
		go gobuild.Build("./cmd/regiond", "-tags", "nodev")
	}
	if ctl {
		go gobuild.Build("./cmd/regionctl")
	}
}

// total sums the writers' counts; last is the newest revision any wrote.
func total(ws []*writer) *writer {
	var t writer
	for _, w := range ws {
		t.ops, t.failed, t.last = t.ops+w.ops, t.failed+w.failed, max(t.last, w.last)
	}
	return &t
}

// startFleet starts the cluster, the proxy, the recorder and the agents:
// two thirds of them reach the members directly (each its own order of
// endpoints), one third the grpc-proxy; each through TCP proxies of its
// own, so that its connections can be cut.
func startFleet(t *testing.T, seed uint64, nAgents int) *fleet {
	t.Helper()
	// No fsync: the suite's faults are process crashes and network cuts,
	// which lose nothing written to the page cache; disk latency would
	// only slow the history down.
	c := etcdproc.Start(t, etcdproc.Config{Members: 3, Args: []string{"--unsafe-no-fsync"}})
	f := &fleet{t: t, seed: seed, c: c, admin: c.Client(t), rng: rand.New(rand.NewPCG(seed, 2)),
		links: map[*agentProc][]*tcpproxy.Proxy{}, faults: map[string]int{}}
	if _, err := f.admin.Put(context.Background(), prefix+"epoch", "1"); err != nil {
		t.Fatal(err)
	}
	f.rec = startRecorder(t, c.Client(t), prefix)
	f.refs = &refs{rec: f.rec, at: map[int64]*routing.Table{}}
	f.chk = &checker{refs: f.refs}
	f.proxy = c.StartProxy(t, etcdproc.ProxyConfig{})
	bin := gobuild.Binary(t, "./cmd/regiond", "-tags", "nodev")
	for i := range nAgents {
		targets := []string{f.proxy.Addr}
		if i%3 != 2 {
			targets = nil
			for j := range 3 {
				targets = append(targets, strings.TrimPrefix(c.Members[(i+j)%3].ClientURL, "http://"))
			}
		}
		var eps []string
		var links []*tcpproxy.Proxy
		for _, target := range targets {
			p, err := tcpproxy.New(target)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			eps, links = append(eps, p.URL()), append(links, p)
		}
		a := newAgent(t, bin, fmt.Sprintf("agent-%02d", i), eps, root)
		f.agents, f.links[a] = append(f.agents, a), links
		if err := a.start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, a := range f.agents {
				t.Logf("last lines of %s's log:\n%s", a.name, a.logTail(25))
			}
		}
	})
	return f
}

// startBackground starts the compactor and one checker per agent.
func (f *fleet) startBackground(ctx context.Context) {
	done := make(chan struct{}, len(f.agents)+1)
	go func() { defer func() { done <- struct{}{} }(); f.compactLoop(ctx) }()
	for i, a := range f.agents {
		go func() { defer func() { done <- struct{}{} }(); f.chk.watchAgent(ctx, a, f.seed+uint64(i)) }()
	}
	f.t.Cleanup(func() {
		for range len(f.agents) + 1 {
			<-done
		}
	})
}

// compactLoop compacts etcd's history every 200 ms, up to the revision the
// recorder has heard (never past it: the recorder is the reference).
func (f *fleet) compactLoop(ctx context.Context) {
	var last int64
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rev := f.rec.Heard()
		if rev <= last {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		if _, err := f.admin.Compact(cctx, rev); err == nil {
			last = rev
			f.compactions.Add(1)
		}
		cancel()
	}
}
