package watch_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/tcpproxy"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// decisions returns what a table answers for countries the tests touch, a
// line each, to compare two agents by.
func decisions(t *testing.T, tb *routing.Table) string {
	t.Helper()
	var b strings.Builder
	for _, cc := range []string{"PL", "DE", "FR", "AT", "US", "GB", routing.Unknown} {
		fmt.Fprintf(&b, "%s->%s ", cc, resolvePool(t, tb, cc))
	}
	return b.String()
}

// sameAs checks that a and b serve the same: decisions, policy, skipped keys.
func sameAs(t *testing.T, a, b *routing.Table, what string) {
	t.Helper()
	if da, db := decisions(t, a), decisions(t, b); da != db {
		t.Fatalf("%s: the agents disagree:\n A: %s\n B: %s", what, da, db)
	}
	if !reflect.DeepEqual(a.Policy().Classes, b.Policy().Classes) {
		t.Fatalf("%s: policy %v on A, %v on B", what, a.Policy().Classes, b.Policy().Classes)
	}
	if !reflect.DeepEqual(a.Skipped(), b.Skipped()) {
		t.Fatalf("%s: skipped %v on A, %v on B", what, a.Skipped(), b.Skipped())
	}
}

// TestCutOffAgentAgreesAfterDeleteAndRefusedValue is the scenario:
// agent A is cut off while the residency policy is deleted and written
// again with a refused value, PL is routed to a US pool only, and the
// history is compacted. Once A is back (a relist: the history is gone) it
// must serve what B, which saw every event, serves: the deleted policy's
// value is no last good value of the new incarnation, so both use the
// built-in EEA default and keep PL viewers on EU pools.
func TestCutOffAgentAgreesAfterDeleteAndRefusedValue(t *testing.T) {
	srv := devetcd.NewTest(t)
	direct := devetcd.NewTestClient(t, srv)
	loadExample(t, direct)
	put(t, direct, routing.PolicyKey, `{"classes":{"eu":["DE","FR"]}}`)
	proxy, err := tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	cutCli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.URL()}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cutCli.Close()
	a := startMirror(t, cutCli, watch.Config{})
	b := startMirror(t, direct, watch.Config{})
	onlyDEFR := func(tb *routing.Table) bool { return len(tb.Policy().Classes["eu"]) == 2 }
	waitUntil(t, a, "A has the old policy", onlyDEFR)
	waitUntil(t, b, "B has the old policy", onlyDEFR)

	proxy.Sever()
	if _, err := direct.Delete(context.Background(), prefix+routing.PolicyKey); err != nil {
		t.Fatal(err)
	}
	put(t, direct, routing.PolicyKey, `{"classes":5}`)
	last := put(t, direct, "routes/PL", `{"targets":[{"pool":"us-east","weight":100}],"fallback":["eu-general"]}`)
	if _, err := direct.Compact(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	at := func(tb *routing.Table) bool { return tb.Revision() >= last }
	ta := waitUntil(t, a, "A back at the last revision", at)
	tb := waitUntil(t, b, "B at the last revision", at)
	sameAs(t, ta, tb, "after the cut")
	if p := resolvePool(t, tb, "PL"); p == "us-east" || p == "NoRoute" {
		t.Fatalf("PL -> %s: want an EU pool (the built-in EEA default holds PL)", p)
	}
	if sk := tb.Skipped(); len(sk) != 1 || sk[0].Key != routing.PolicyKey {
		t.Fatalf("skipped %v, want the refused policy", sk)
	}
}

// TestRestartedAgentKeepsLastGoodFromHistory: a key's good value, then a
// newer good one, then a refused one. B saw them all and serves the newer
// good value; an agent started afterwards (a restart, with nothing but etcd
// to go by) reads it from history and serves the same. Once the history is
// compacted away there is nothing to read, and a new agent serves the
// built-in default, naming the key.
func TestRestartedAgentKeepsLastGoodFromHistory(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	b := startMirror(t, cli, watch.Config{})
	put(t, cli, routing.PolicyKey, `{"classes":{"eu":["DE","FR"]}}`)
	put(t, cli, routing.PolicyKey, `{"classes":{"eu":["DE","FR","PL"]}}`)
	put(t, cli, routing.PolicyKey, `{"classes":6}`)
	last := put(t, cli, routing.PolicyKey, `{"classes":{"eu":"PL"}}`) // refused too: two refused writes to walk back over
	tb := waitUntil(t, b, "B at the last revision", func(tb *routing.Table) bool { return tb.Revision() >= last })
	if got := tb.Policy().Classes["eu"]; len(got) != 3 {
		t.Fatalf("B's policy eu = %v, want the newest good value [DE FR PL]", got)
	}
	logs := &logbuf.Buffer{}
	restarted := startMirror(t, cli, watch.Config{Logger: debugLogger(logs)})
	sameAs(t, restarted.Table(), tb, "a restarted agent")
	if !strings.Contains(logs.String(), "read from etcd's history") {
		t.Fatalf("no log of the value read from history:\n%s", logs)
	}

	if _, err := cli.Compact(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	logs = &logbuf.Buffer{}
	late := startMirror(t, cli, watch.Config{Logger: debugLogger(logs)})
	lt := late.Table()
	if !reflect.DeepEqual(lt.Policy().Classes, routing.DefaultResidency().Classes) {
		t.Fatalf("after compaction a new agent's policy is %v, want the built-in default", lt.Policy().Classes)
	}
	if sk := lt.Skipped(); len(sk) != 1 || sk[0].Key != routing.PolicyKey {
		t.Fatalf("skipped %v, want the refused policy", sk)
	}
	if !strings.Contains(logs.String(), "compacted away") {
		t.Fatalf("no warning that the history is gone:\n%s", logs)
	}
}

// TestHistoryReadsStopAtTheFirstTimeout: after a list, etcd stops
// answering the history reads of refused keys (an interceptor holds every
// Get of one key at a past revision until its context ends). The first
// read that times out ends them: only it waits out RequestTimeout, the
// others are not sent, the listed table is published, and a warning says
// so. With a timeout per read and no stop, all eight waited, one after the
// other, before the mirror was ready.
func TestHistoryReadsStopAtTheFirstTimeout(t *testing.T) {
	srv := devetcd.NewTest(t)
	direct := devetcd.NewTestClient(t, srv)
	loadExample(t, direct)
	const refused = 8
	for i := range refused {
		put(t, direct, fmt.Sprintf("pools/bad%d", i), `{"host":"h.example.net","residency":"eu","status":"active"}`)
		put(t, direct, fmt.Sprintf("pools/bad%d", i), `{"host":`) // refused, version 2: history to read
	}
	var held atomic.Int32
	hold := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*pb.RangeRequest); ok && r.Revision > 0 && len(r.RangeEnd) == 0 {
			if ctx.Err() == nil {
				held.Add(1)
			}
			<-ctx.Done()
			return ctx.Err()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: time.Second, DialOptions: []grpc.DialOption{hold}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	logs := &logbuf.Buffer{}
	m := startMirror(t, cli, watch.Config{Logger: debugLogger(logs), RequestTimeout: 500 * time.Millisecond})
	if sk := m.Table().Skipped(); len(sk) != refused {
		t.Fatalf("skipped %d keys, want the %d refused", len(sk), refused)
	}
	if n := held.Load(); n != 1 {
		t.Fatalf("%d history reads waited for their deadline, want 1: the first timeout ends them", n)
	}
	if !strings.Contains(logs.String(), "did not answer a read of a refused key") {
		t.Fatalf("no warning that the history reads ran out of time:\n%s", logs)
	}
}
