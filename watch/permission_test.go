package watch_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// TestWatchRefusedForPermission: with etcd auth on, the mirror's user
// loses read on the prefix (its role changed) and its connection drops.
// The new watch is refused: that is counted as permission-denied (not a
// bare "error"), the mirror is not connected, and it keeps serving its
// last good table. Once the permission is back, it follows changes again.
func TestWatchRefusedForPermission(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	e, cli := userBehindProxy(t)
	a, root := e.Auth, e.Root
	reg := prometheus.NewRegistry()
	logs := &logbuf.Buffer{}
	m := startMirror(t, cli, watch.Config{Registerer: reg, Logger: debugLogger(logs), RequestTimeout: 5 * time.Second, User: a.User})
	defer func() {
		if t.Failed() {
			t.Logf("mirror log:\n%s\n%s", logs, counters(t, reg))
		}
	}()
	before := m.Table()
	deadline := time.Now().Add(15 * time.Second)
	for !m.Status().Connected { // the watch is up before its permission goes
		if time.Now().After(deadline) {
			t.Fatal("the mirror's watch was never created")
		}
		time.Sleep(10 * time.Millisecond)
	}

	e.SetAccess(t, false)
	deadline = time.Now().Add(15 * time.Second)
	for createFailures(t, reg, watch.ReasonPermission) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no create failure counted as %s after the role lost its read", watch.ReasonPermission)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := createFailures(t, reg, watch.ReasonError); n != 0 {
		t.Errorf("create_failures_total{reason=error} %v: the refusal is permission-denied", n)
	}
	for m.Status().Connected { // set false right after the refusal is counted
		if time.Now().After(deadline) {
			t.Fatal("connected while etcd refuses the watch")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if tb := m.Table(); tb == nil || tb.Revision() != before.Revision() || tb.Stale() != before.Stale() {
		t.Error("the table changed while etcd refused the watch: want the last good one kept")
	}
	if r := m.Status().Refused; !strings.Contains(r, "permission denied") || !strings.Contains(r, a.Prefix) || !strings.Contains(r, "to etcd user "+a.User+":") ||
		!strings.Contains(r, "still granted to the user (regionctl auth roles shows the agents' roles)") {
		t.Errorf("Status().Refused %q while etcd refuses the watch: want the refusal, naming the prefix and the user", r)
	}

	e.SetAccess(t, true)
	rev := put(t, root, "pools/back", `{"host":"back.example.net","residency":"eu","status":"active"}`)
	waitUntil(t, m, "the change made once the permission was back", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	deadline = time.Now().Add(15 * time.Second)
	for st := m.Status(); st.Refused != "" || !st.Connected; st = m.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("status %+v with the permission back: want connected, no refusal", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRefusalClearedWhenEtcdHoldsRequests: a watch etcd refused (the
// user's role lost its read) is in Status().Refused; once etcd holds the
// mirror's requests past the request timeout instead (its read granted
// again), the refusal is no longer what is known, and Refused is cleared:
// it said "permission denied" of an etcd that granted the read (the
// restore drill's agents, whose old tokens etcd held).
func TestRefusalClearedWhenEtcdHoldsRequests(t *testing.T) {
	t.Parallel() // mostly idle, waiting out the mirror's timeouts: run beside the other such tests
	e, cli := userBehindProxy(t)
	m := startMirror(t, cli, watch.Config{Registerer: prometheus.NewRegistry(), RequestTimeout: time.Second, User: e.Auth.User})
	e.SetAccess(t, false)
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(m.Status().Refused, "permission denied") {
		if time.Now().After(deadline) {
			t.Fatalf("Status().Refused %q: want the refused list", m.Status().Refused)
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.SetAccess(t, true)
	e.Proxy.FreezeReplies() // the requests reach etcd, no answer comes back
	deadline = time.Now().Add(30 * time.Second)
	for m.Status().Refused != "" {
		if time.Now().After(deadline) {
			t.Fatalf("Status().Refused %q while lists time out on an etcd that grants the read: want it cleared", m.Status().Refused)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// userBehindProxy starts an etcd with authentication on, behind a TCP
// proxy, loads the example fleet, and returns a client of the test user
// through the proxy (closed when the test ends).
func userBehindProxy(t *testing.T) (*devetcd.AuthBehindProxy, *clientv3.Client) {
	t.Helper()
	e := devetcd.NewTestAuthBehindProxy(t, "/regiond/v1/")
	loadExample(t, e.Root)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Proxy.URL()}, DialTimeout: 5 * time.Second,
		Username: e.Auth.User, Password: e.Auth.Password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return e, cli
}

// createFailures returns regiond_watch_create_failures_total{reason}.
func createFailures(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	return byReason(t, reg, "regiond_watch_create_failures_total", reason)
}

// counters lists reg's non-zero counters, for a failure's log.
func counters(t *testing.T, reg *prometheus.Registry) string {
	mfs, _ := reg.Gather()
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				b.WriteString(mf.GetName())
				for _, l := range m.GetLabel() {
					b.WriteString(" " + l.GetValue())
				}
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}
