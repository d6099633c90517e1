package cli

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
)

// bgHeartbeat is a heartbeat run in-process in the background.
type bgHeartbeat struct {
	cancel      context.CancelFunc
	done        chan struct{} // closed at its exit
	code        int           // its exit code, once done
	out, errOut *logbuf.Buffer
}

func (h *bgHeartbeat) String() string {
	return "stdout:\n" + h.out.String() + "stderr:\n" + h.errOut.String()
}

// stop cancels the heartbeat (as SIGTERM does) and returns its exit code.
func (h *bgHeartbeat) stop() int {
	h.cancel()
	<-h.done
	return h.code
}

// startHeartbeatIn runs regionctl heartbeat POOL --instance instance
// --addr addr (and extra flags) in-process against the test etcd; the test
// stops it at its end if it still runs.
func (e *tenv) startHeartbeatIn(t *testing.T, pool, instance, addr string, extra ...string) *bgHeartbeat {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &bgHeartbeat{cancel: cancel, done: make(chan struct{}), out: &logbuf.Buffer{}, errOut: &logbuf.Buffer{}}
	args := append([]string{"--endpoints", strings.Join(testServer.Endpoints, ","), "--prefix", e.prefix,
		"--dial-timeout", "10s", "--command-timeout", "20s",
		"heartbeat", pool, "--instance", instance, "--addr", addr}, extra...)
	go func() {
		defer close(h.done)
		h.code = run(ctx, args, h.out, h.errOut, func(string) string { return "" })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
			t.Errorf("heartbeat %s/%s did not stop", pool, instance)
		}
	})
	return h
}

// waitUp waits for the heartbeat's "alive under lease" line and returns
// the lease it names; it fails the test if the heartbeat exits first.
func (h *bgHeartbeat) waitUp(t *testing.T) int64 {
	t.Helper()
	re := regexp.MustCompile(`alive under lease ([0-9a-f]+) `)
	var lease int64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(h.out.String()); m != nil {
			lease, _ = strconv.ParseInt(m[1], 16, 64)
			return lease
		}
		select {
		case <-h.done:
			t.Fatalf("heartbeat exited %d before it was up:\n%s", h.code, h)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("heartbeat not up:\n%s", h)
	return 0
}

// keyOf returns the lease and value of a key; lease -1 when it is absent.
func keyOf(t *testing.T, key string) (int64, string) {
	t.Helper()
	resp, err := testClient.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return -1, ""
	}
	return resp.Kvs[0].Lease, string(resp.Kvs[0].Value)
}

// TestHeartbeatRefusesUnknownPool: a pool id typo (with a user that may
// read pools/, as with authentication off) exits 1 naming the pool and the
// nearest id, and writes nothing. Before, it ran and kept a health key
// that counted for nothing.
func TestHeartbeatRefusesUnknownPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	rev, n := e.fingerprint()
	r := e.run("heartbeat", "eu-centrl", "--instance", "fra-1a", "--addr", "10.0.0.12:443")
	if r.code != ExitRefused || !strings.Contains(r.stderr, "no pool eu-centrl ("+e.ks.RoutingKey("pools/eu-centrl")+" does not exist): its health keys would count for nothing") ||
		!strings.Contains(r.stderr, "nothing written; did you mean eu-central? Fix POOL") {
		t.Fatalf("heartbeat of a typo'd pool: %s; want exit 1 naming the pool and eu-central", r)
	}
	t.Logf("refused: %s", r.stderr)
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatal("the refused heartbeat wrote")
	}
	// No pool near it: the pools there are are listed.
	if r := e.run("heartbeat", "zz-nowhere", "--instance", "fra-1a", "--addr", "10.0.0.12:443"); r.code != ExitRefused ||
		!strings.Contains(r.stderr, "nothing written (pools: apac-singapore, ") {
		t.Fatalf("heartbeat of an unknown pool: %s; want exit 1 listing the pools", r)
	}
}

// TestHeartbeatWarnings: a pool without health_check is warned about (its
// health keys change nothing) and the heartbeat runs; a --ttl above 60s is
// warned about, saying what it means; the "alive under lease" line gives
// the TTL etcd granted, which for --ttl 1s is etcd's minimum (what the
// lease itself says).
func TestHeartbeatWarnings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	key := e.ks.RoutingKey(routing.HealthKey("eu-central", "fra-long"))

	long := e.startHeartbeatIn(t, "eu-central", "fra-long", "10.0.0.1:443", "--ttl", "90s")
	lease := long.waitUp(t)
	if !strings.Contains(long.errOut.String(), "regionctl: warning: --ttl 1m30s: an origin killed (SIGKILL, a crash, its host down) still counts as live for up to 1m30s") ||
		!strings.Contains(long.errOut.String(), "regionctl: warning: pool eu-central has no health_check: ") {
		t.Fatalf("want the TTL and health_check warnings:\n%s", long)
	}
	if !strings.Contains(long.out.String(), fmt.Sprintf("heartbeat: %s alive under lease %x (ttl 1m30s)\n", key, lease)) {
		t.Fatalf("want the granted TTL, as asked:\n%s", long)
	}
	if code := long.stop(); code != ExitOK {
		t.Fatalf("stop: exit %d\n%s", code, long)
	}

	e.must(ExitOK, "pool", "set", "eu-central", "--health-check", "--force")
	short := e.startHeartbeatIn(t, "eu-central", "fra-short", "10.0.0.1:443", "--ttl", "1s")
	lease = short.waitUp(t)
	ttl, err := testClient.TimeToLive(context.Background(), clientv3.LeaseID(lease))
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL <= 1 {
		t.Fatalf("etcd granted %ds for a 1s lease: the test expects its minimum above 1s", ttl.GrantedTTL)
	}
	want := fmt.Sprintf("(ttl %s, granted by etcd for --ttl 1s: its minimum lease TTL)\n", time.Duration(ttl.GrantedTTL)*time.Second)
	if !strings.Contains(short.out.String(), want) {
		t.Fatalf("want %q:\n%s", want, short)
	}
	if strings.Contains(short.errOut.String(), "warning") {
		t.Fatalf("a health-checked pool, a short TTL: want no warning:\n%s", short)
	}
	if code := short.stop(); code != ExitOK {
		t.Fatalf("stop: exit %d\n%s", code, short)
	}
}

// TestHeartbeatRefusesAnotherAddrsKey: a heartbeat started with the
// --instance of a running one but another --addr exits 1 naming the key,
// the other lease and addr and the likely causes, and leaves the key to
// the running one, which logs nothing. Before, it took the key silently.
// The same instance and --addr under another live lease (this instance
// restarted after a crash, its old lease alive) is taken over, as a
// systemd restart needs; a key under a lease with another addr and no
// running heartbeat (a restart with a new --addr) is refused naming the
// old lease's remaining TTL.
func TestHeartbeatRefusesAnotherAddrsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	key := e.ks.RoutingKey(routing.HealthKey("eu-central", "fra-dup"))
	a := e.startHeartbeatIn(t, "eu-central", "fra-dup", "10.0.0.1:443", "--ttl", "5s")
	leaseA := a.waitUp(t)

	r := e.run("heartbeat", "eu-central", "--instance", "fra-dup", "--addr", "10.0.0.2:443", "--ttl", "5s")
	want := fmt.Sprintf("%s is held by live lease %x with addr 10.0.0.1:443, not this heartbeat's 10.0.0.2:443; nothing written. Either two origins run with --instance fra-dup", key, leaseA)
	if r.code != ExitRefused || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "its old heartbeat's lease ends within ") ||
		!strings.Contains(r.stderr, "(what remains of its 5s TTL)") {
		t.Fatalf("second heartbeat, another addr: %s; want exit 1 with %q and the TTL", r, want)
	}
	t.Logf("refused: %s", r.stderr)
	if lease, _ := keyOf(t, key); lease != leaseA {
		t.Fatalf("the key is under lease %x, want the running heartbeat's %x", lease, leaseA)
	}
	if strings.Contains(a.errOut.String(), "another lease") || strings.Contains(a.errOut.String(), "someone else") {
		t.Fatalf("the running heartbeat saw a conflict that was refused:\n%s", a)
	}
	if code := a.stop(); code != ExitOK {
		t.Fatalf("stop: exit %d\n%s", code, a)
	}

	// A crashed heartbeat's key: its lease lives on for a TTL.
	crashed, err := testClient.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	defer testClient.Revoke(context.Background(), crashed.ID)
	if _, err := testClient.Put(context.Background(), key, `{"addr":"10.0.0.1:443","since":"2026-01-01T00:00:00Z"}`, clientv3.WithLease(crashed.ID)); err != nil {
		t.Fatal(err)
	}
	r = e.run("heartbeat", "eu-central", "--instance", "fra-dup", "--addr", "10.0.0.2:443")
	if r.code != ExitRefused || !strings.Contains(r.stderr, fmt.Sprintf("held by live lease %x with addr 10.0.0.1:443", crashed.ID)) ||
		!regexp.MustCompile(`ends within [0-9]+s \(what remains of its 1m0s TTL\)`).MatchString(r.stderr) {
		t.Fatalf("restart with a new --addr under the old live lease: %s; want exit 1 naming the lease and its remaining TTL", r)
	}
	if lease, _ := keyOf(t, key); lease != int64(crashed.ID) {
		t.Fatalf("the refused heartbeat changed the key's lease to %x", lease)
	}

	// Restarted with the same --addr: taken over.
	b := e.startHeartbeatIn(t, "eu-central", "fra-dup", "10.0.0.1:443", "--ttl", "5s")
	leaseB := b.waitUp(t)
	if lease, val := keyOf(t, key); lease != leaseB || leaseB == int64(crashed.ID) || strings.Contains(val, "2026-01-01") {
		t.Fatalf("key under lease %x holding %s, want it taken over under %x\n%s", lease, val, leaseB, b)
	}
	if !strings.Contains(b.errOut.String(), "took over the marker from another lease with the same --addr") {
		t.Fatalf("the takeover is not logged:\n%s", b)
	}
	if code := b.stop(); code != ExitOK {
		t.Fatalf("stop: exit %d\n%s", code, b)
	}
	if lease, _ := keyOf(t, key); lease != -1 {
		t.Fatalf("key still there (lease %x) after its heartbeat stopped", lease)
	}
}

// TestGetHealth: get health gives each key's lease's remaining life ("no
// lease" for a key without one), marks keys of pools that do not exist or
// have no health_check, and names each health-checked pool with no live
// instance (it printed an empty table).
func TestGetHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "eu-central", "--health-check", "--force")
	e.must(ExitOK, "pool", "set", "us-east", "--health-check", "--force")
	r := e.must(ExitOK, "get", "health")
	for _, want := range []string{
		"HEALTH KEY  ADDR  SINCE  TTL  NOTE\n",
		"(pool eu-central: health_check on, 0 live instances: down for the agents once their grace window ends; start its heartbeats, or drain it)\n",
		"(pool us-east: health_check on, 0 live instances",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("get health with no key: %s; want %q", r, want)
		}
	}

	lease, err := testClient.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	defer testClient.Revoke(context.Background(), lease.ID)
	ctx := context.Background()
	for rel, leased := range map[string]bool{
		routing.HealthKey("eu-central", "fra-1"): true,
		routing.HealthKey("eu-centrl", "fra-2"):  true,
		routing.HealthKey("eu-west", "ams-1"):    false,
		routing.HealthKey("eu-central", "hand"):  false,
	} {
		var opts []clientv3.OpOption
		if leased {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		if _, err := testClient.Put(ctx, e.ks.RoutingKey(rel), `{"addr":"10.0.0.1:443","since":"2026-01-01T00:00:00Z"}`, opts...); err != nil {
			t.Fatal(err)
		}
	}
	r = e.must(ExitOK, "get", "health")
	for rel, note := range map[string]string{
		routing.HealthKey("eu-central", "fra-1"): "-",
		routing.HealthKey("eu-centrl", "fra-2"):  "no such pool",
	} {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(rel) + ` +10\.0\.0\.1:443 +2026-01-01T00:00:00Z +([0-9]+)s +` + regexp.QuoteMeta(note) + ` *$`)
		m := re.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("get health: %s; want %s with its lease's TTL and %q", r, rel, note)
		}
		if s, _ := strconv.Atoi(m[1]); s < 1 || s > 60 {
			t.Fatalf("get health: %s: TTL %ss of a 60s lease", m[0], m[1])
		}
	}
	if !regexp.MustCompile(`(?m)^health/eu-west/ams-1 +10\.0\.0\.1:443 +2026-01-01T00:00:00Z +no lease +pool without health_check *$`).MatchString(r.stdout) {
		t.Fatalf("get health: %s; want the leaseless key of eu-west marked no lease and without health_check", r)
	}
	// A leaseless key of a health-checked pool keeps it up until deleted
	// (the RBAC review: nothing said so).
	if !regexp.MustCompile(`(?m)^health/eu-central/hand +10\.0\.0\.1:443 +2026-01-01T00:00:00Z +no lease +no lease: live until deleted \(as root\) *$`).MatchString(r.stdout) {
		t.Fatalf("get health: %s; want the leaseless key of eu-central noted live until deleted", r)
	}
	if strings.Contains(r.stdout, "(pool eu-central:") || !strings.Contains(r.stdout, "(pool us-east: health_check on, 0 live instances") {
		t.Fatalf("get health: %s; want us-east alone named with 0 live instances", r)
	}
	// -o json: the TTLs beside the values, null for a key without a lease.
	r = e.must(ExitOK, "get", "health", "-o", "json")
	var js struct {
		Health map[string]routing.Health `json:"health"`
		TTLs   map[string]*int64         `json:"health_ttl_seconds"`
	}
	mustJSON(t, r.stdout, &js)
	if len(js.TTLs) != len(js.Health) || len(js.Health) != 4 {
		t.Fatalf("get health -o json: %s; want health_ttl_seconds for each of the 4 health keys", r.stdout)
	}
	for rel, leased := range map[string]bool{
		routing.HealthKey("eu-central", "fra-1"): true,
		routing.HealthKey("eu-centrl", "fra-2"):  true,
		routing.HealthKey("eu-west", "ams-1"):    false,
		routing.HealthKey("eu-central", "hand"):  false,
	} {
		ttl, ok := js.TTLs[rel]
		if !ok || leased != (ttl != nil) || leased && (*ttl < 1 || *ttl > 60) {
			t.Fatalf("get health -o json: health_ttl_seconds[%s] = %v (present %v); want %s", rel, ttl, ok,
				map[bool]string{true: "1-60 (a 60s lease)", false: "null (no lease)"}[leased])
		}
	}
}

// TestHeartbeatGrantedNote: the "alive under lease" line says why the TTL
// granted differs from --ttl: leases have whole seconds, and etcd raises
// a TTL below its minimum.
func TestHeartbeatGrantedNote(t *testing.T) {
	for _, c := range []struct {
		asked, granted time.Duration
		want           string
	}{
		{10 * time.Second, 10 * time.Second, ""},
		{1500 * time.Millisecond, 2 * time.Second, ", --ttl 1.5s rounded up to whole seconds"},
		{time.Second, 2 * time.Second, ", granted by etcd for --ttl 1s: its minimum lease TTL"},
		{1100 * time.Millisecond, 3 * time.Second, ", granted by etcd for --ttl 1.1s: its minimum lease TTL"},
	} {
		if got := grantedNote(c.asked, c.granted); got != c.want {
			t.Errorf("grantedNote(%s, %s) = %q, want %q", c.asked, c.granted, got, c.want)
		}
	}
}

// TestHeartbeatRefusesTTLAndInstanceOutOfRange: a --ttl above 24h is a
// usage error naming the cap (2562047h47m16s overflowed to a 2s lease
// blamed on etcd's minimum; 2500001h, past etcd's maximum lease TTL, was
// retried for ever), and an --instance past 128 bytes one naming the
// grammar and that limit (it said only "want health/<pool>/<instance>").
// Nothing is written.
func TestHeartbeatRefusesTTLAndInstanceOutOfRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	for _, ttl := range []string{"2562047h47m16s", "2500001h", "24h0m1s"} {
		r := e.run("heartbeat", "eu-central", "--instance", "fra-1", "--addr", "10.0.0.1:443", "--ttl", ttl)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "want at most 24h0m0s: a killed origin (SIGKILL, a crash, its host down) counts as live for up to --ttl") {
			t.Errorf("--ttl %s: %s; want exit 2 naming the 24h cap", ttl, r)
		}
	}
	long := strings.Repeat("a", 129)
	r := e.run("heartbeat", "eu-central", "--instance", long, "--addr", "10.0.0.1:443")
	if want := "(129 bytes): want an instance id of 1 to 128 letters, digits, '.', '_', ':' or '-'"; r.code != ExitUsage || !strings.Contains(r.stderr, want) {
		t.Errorf("--instance of 129 bytes: %s; want exit 2 with %q", r, want)
	}
	resp, err := testClient.Get(context.Background(), e.ks.RoutingKey("health/"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("health keys after refused starts: %v %v; want none", resp, err)
	}
}
