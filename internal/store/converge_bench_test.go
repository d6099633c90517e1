package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/routing"
)

// benchAgents is the fleet of BenchmarkWaitConverged: goroutines playing
// agents, each with its own client, that re-put their status key as soon
// as they see a new epoch (what regiond does once it re-puts on every
// table change), and record when etcd acknowledged that put.
type benchAgents struct {
	n    int
	mu   sync.Mutex
	cond *sync.Cond
	acks map[int64][]time.Time // revision → ack time of each agent's put
}

func startBenchAgents(ctx context.Context, b *testing.B, srv *devetcd.Server, s *Store, n int) *benchAgents {
	fa := &benchAgents{n: n, acks: map[int64][]time.Time{}}
	fa.cond = sync.NewCond(&fa.mu)
	ready := make(chan struct{}, n)
	for i := range n {
		cli := devetcd.NewTestClient(b, srv)
		node := fmt.Sprintf("node-%02d", i)
		wch := cli.Watch(ctx, s.Keyspace().Epoch(), clientv3.WithCreatedNotify())
		go func() {
			for wr := range wch {
				if wr.Created {
					ready <- struct{}{}
				}
				for _, ev := range wr.Events {
					epoch, _ := strconv.ParseInt(string(ev.Kv.Value), 10, 64)
					v, _ := json.Marshal(routing.AgentStatus{Node: node, Revision: ev.Kv.ModRevision, Epoch: epoch, Connected: true})
					if _, err := cli.Put(ctx, s.Keyspace().Agent(node), string(v)); err != nil {
						return
					}
					fa.ack(ev.Kv.ModRevision)
				}
			}
		}()
	}
	for range n {
		<-ready
	}
	return fa
}

func (fa *benchAgents) ack(rev int64) {
	now := time.Now()
	fa.mu.Lock()
	fa.acks[rev] = append(fa.acks[rev], now)
	fa.mu.Unlock()
	fa.cond.Broadcast()
}

// lastAck waits until every agent acknowledged rev and returns the last.
func (fa *benchAgents) lastAck(rev int64) time.Time {
	fa.mu.Lock()
	defer fa.mu.Unlock()
	for len(fa.acks[rev]) < fa.n {
		fa.cond.Wait()
	}
	last := slices.MaxFunc(fa.acks[rev], func(a, b time.Time) int { return a.Compare(b) })
	delete(fa.acks, rev)
	return last
}

// BenchmarkWaitConverged measures --wait-converged's path with 50 agents
// on one embedded etcd, back to back: commit → WaitConverged returns, and
// the share of that which is WaitConverged's own (its return after the
// last agent's status put was acknowledged). Run with -benchtime=200x.
func BenchmarkWaitConverged(b *testing.B) {
	const agents = 50
	srv := devetcd.NewTest(b)
	cli := devetcd.NewTestClient(b, srv)
	s := New(cli, mustKeyspace(b), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := exampleConfig(b)
	if _, err := s.Write(ctx, WriteRequest{Command: "seed", Build: func(context.Context, *State) (*Plan, error) { return &Plan{Config: cfg}, nil }}); err != nil {
		b.Fatal(err)
	}
	fleet := startBenchAgents(ctx, b, srv, s, agents)
	var total, own []time.Duration
	b.ResetTimer()
	for i := range b.N {
		res, err := s.Write(ctx, WriteRequest{Command: "bench", Build: func(_ context.Context, cur *State) (*Plan, error) {
			return &Plan{Config: withPool(cur.Config, "eu-west", "n", fmt.Sprint(i))}, nil
		}})
		if err != nil {
			b.Fatal(err)
		}
		committed := time.Now()
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		_, err = s.WaitConverged(wctx, res.Revision)
		wcancel()
		returned := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		total = append(total, returned.Sub(committed))
		own = append(own, returned.Sub(fleet.lastAck(res.Revision)))
	}
	b.StopTimer()
	reportPercentiles(b, "commit→return", total)
	reportPercentiles(b, "last-ack→return", own)
}

func reportPercentiles(b *testing.B, name string, ds []time.Duration) {
	slices.Sort(ds)
	at := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(at(0.5), name+"-p50-ms")
	b.ReportMetric(at(0.99), name+"-p99-ms")
	b.Logf("%s over %d writes: p50 %.2f ms, p99 %.2f ms, max %.2f ms", name, len(ds), at(0.5), at(0.99), at(1))
}

func mustKeyspace(b *testing.B) keyspace.Space {
	b.Helper()
	ks, err := keyspace.New(fmt.Sprintf("/bench/%d", prefixSeq.Add(1)))
	if err != nil {
		b.Fatal(err)
	}
	return ks
}
