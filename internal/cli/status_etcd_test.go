package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/routing"
)

// statusEtcd is status -o json's etcd object, its members as decoded
// JSON objects (the keys are checked, not only the values).
type statusEtcd struct {
	Etcd struct {
		Members      []map[string]any `json:"members"`
		Leader       string           `json:"leader"`
		QuorumAtRisk *bool            `json:"quorum_at_risk"`
		Error        string           `json:"error"`
	} `json:"etcd"`
	Agents []json.RawMessage `json:"agents"`
}

// member returns the JSON member named name, checking it has every key
// of the documented shape.
func (s statusEtcd) member(t *testing.T, name string) map[string]any {
	t.Helper()
	for _, m := range s.Etcd.Members {
		if m["name"] == name {
			for _, k := range []string{"name", "id", "client_urls", "answering", "error", "is_leader", "is_learner"} {
				if _, ok := m[k]; !ok {
					t.Fatalf("status -o json: etcd member %s has no %q: %v", name, k, m)
				}
			}
			return m
		}
	}
	t.Fatalf("status -o json: no etcd member %s in %v", name, s.Etcd.Members)
	return nil
}

// TestStatusNamesEtcdMembers: on a 3-member cluster, status's first line
// says 3 members answer and names the leader; with one member killed it
// names that member, why it does not answer and that one more lost loses
// the quorum, on stdout and as a warning on stderr, at once (not after
// --command-timeout), and the exit code stays the agents' (0 for a
// converged agent under --max-lag 0). -o json has the etcd object.
func TestStatusNamesEtcdMembers(t *testing.T) {
	c := etcdproc.Start(t, etcdproc.Config{Members: 3})
	eps := c.Endpoints()
	prefix := "/drill/members"
	status := func(args ...string) (result, time.Duration) {
		full := append([]string{"--endpoints", strings.Join(eps, ","), "--prefix", prefix,
			"--dial-timeout", "10s", "--command-timeout", "20s"}, args...)
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		start := time.Now()
		code := run(ctx, full, &out, &errb, func(string) string { return "" })
		return result{code: code, stdout: out.String(), stderr: errb.String()}, time.Since(start)
	}
	seed, _ := status("apply", "-f", exampleConfig, "--reason", "seed", "-o", "json")
	var w writeResult
	if seed.code != ExitOK || json.Unmarshal([]byte(seed.stdout), &w) != nil {
		t.Fatalf("seed: %s", seed)
	}
	// One live agent, converged: status --max-lag 0 exits 0.
	cli := c.Client(t)
	ks, _ := keyspace.New(prefix)
	lease, err := cli.Grant(context.Background(), 120)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(routing.AgentStatus{Node: "node-a", Revision: w.Revision, Epoch: w.Epoch, Connected: true, Version: "test",
		SyncedAt: time.Now().UTC().Format(time.RFC3339)})
	if _, err := cli.Put(context.Background(), ks.Agent("node-a"), string(b), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}

	leader := c.Members[c.Leader(t)].Name
	r, took := status("status", "--max-lag", "0")
	t.Logf("all up (%s): %s", took, r)
	up := regexp.MustCompile(`^etcd: 3 members, 3 answering, leader (m[0-2]) \(raft term [1-9][0-9]*\)\n`)
	if m := up.FindStringSubmatch(r.stdout); r.code != ExitOK || m == nil || m[1] != leader {
		t.Fatalf("status, all members up: %s\nwant exit 0 and a first line matching %s naming leader %s", r, up, leader)
	}
	if otherWarning(r.stderr) || !strings.Contains(r.stdout, "\nepoch ") || !strings.Contains(r.stdout, "node-a") {
		t.Fatalf("status, all members up: want the agents after the etcd line and no warning: %s", r)
	}
	var js statusEtcd
	r, _ = status("status", "-o", "json")
	mustJSON(t, r.stdout, &js)
	if len(js.Etcd.Members) != 3 || js.Etcd.QuorumAtRisk == nil || *js.Etcd.QuorumAtRisk || js.Etcd.Leader != leader || len(js.Agents) != 1 {
		t.Fatalf("status -o json, all up: etcd %+v; want 3 members, quorum_at_risk false, leader %s, and the agent", js.Etcd, leader)
	}
	for i, m := range c.Members {
		st, err := c.MemberStatus(context.Background(), i)
		if err != nil {
			t.Fatal(err)
		}
		got := js.member(t, m.Name)
		if got["id"] != fmt.Sprintf("%x", st.Header.MemberId) || got["answering"] != true || got["error"] != "" ||
			got["is_leader"] != (m.Name == leader) || fmt.Sprint(got["client_urls"]) != fmt.Sprint([]any{m.ClientURL}) {
			t.Errorf("status -o json: member %s: %v; want id %x, answering, no error, is_leader %v, client_urls [%s]",
				m.Name, got, st.Header.MemberId, m.Name == leader, m.ClientURL)
		}
	}

	// One member lost (not the leader: no election meanwhile).
	k := (c.Leader(t) + 1) % 3
	lost := c.Members[k]
	c.Kill(k)
	r, took = status("status", "--max-lag", "0")
	t.Logf("%s killed (%s): %s", lost.Name, took, r)
	down := fmt.Sprintf("%s (%s) does not answer: dial: connect: connection refused; one more member lost loses the quorum", lost.Name, lost.ClientURL)
	line := regexp.MustCompile(`^etcd: 3 members, 2 answering, leader m[0-2] \(raft term [1-9][0-9]*\); ` + regexp.QuoteMeta(down) + "\n")
	if r.code != ExitOK || !line.MatchString(r.stdout) {
		t.Fatalf("status, %s killed: %s\nwant exit 0 (the agent is converged) and a first line matching %s", lost.Name, r, line)
	}
	if !strings.Contains(r.stderr, "regionctl: warning: etcd member "+down) || !strings.Contains(r.stdout, "node-a") {
		t.Fatalf("status, %s killed: want the warning %q on stderr, and the agents: %s", lost.Name, down, r)
	}
	if took > 10*time.Second {
		t.Errorf("status took %s with a member down: it waited for --command-timeout (20s) instead of failing the dead member at once", took)
	}
	if r, _ := status("status"); r.code != ExitOK {
		t.Errorf("status without --max-lag, a member down: %s; want exit 0", r)
	}
	js = statusEtcd{}
	r, _ = status("status", "-o", "json")
	mustJSON(t, r.stdout, &js)
	got := js.member(t, lost.Name)
	if js.Etcd.QuorumAtRisk == nil || !*js.Etcd.QuorumAtRisk || got["answering"] != false || got["is_leader"] != false ||
		!strings.Contains(fmt.Sprint(got["error"]), "connection refused") {
		t.Fatalf("status -o json, %s killed: etcd %+v; want quorum_at_risk and the member not answering, its error named", lost.Name, js.Etcd)
	}
	if !strings.Contains(r.stderr, "regionctl: warning: etcd member "+down) {
		t.Errorf("status -o json, %s killed: no warning on stderr: %s", lost.Name, r)
	}
}

// TestStatusEtcdMembersWithAuth: with etcd's authentication on, the
// least-privilege viewer (regiond-viewer: read the four sections of <root>/) gets the members
// line, with a password (a token) and with a client certificate: etcd
// asks MemberList and Status for an authenticated user only.
func TestStatusEtcdMembersWithAuth(t *testing.T) {
	for _, passwords := range []bool{true, false} {
		t.Run(fmt.Sprintf("passwords=%v", passwords), func(t *testing.T) {
			t.Parallel()
			e := newRBACEnv(t, passwords)
			r := e.as(rbacViewer, "status")
			line := regexp.MustCompile(`^etcd: 1 member, 1 answering, leader \S+ \(raft term [1-9][0-9]*\); no member can be lost without losing the quorum\n`)
			if r.code != ExitOK || !line.MatchString(r.stdout) || otherWarning(r.stderr) {
				t.Fatalf("viewer status: %s\nwant exit 0, a first line matching %s, no warning", r, line)
			}
			var js statusEtcd
			r = e.as(rbacViewer, "status", "-o", "json")
			mustJSON(t, r.stdout, &js)
			if r.code != ExitOK || len(js.Etcd.Members) != 1 || js.Etcd.Members[0]["answering"] != true || js.Etcd.Members[0]["error"] != "" ||
				js.Etcd.Members[0]["is_leader"] != true || js.Etcd.Error != "" {
				t.Fatalf("viewer status -o json: %s", r)
			}
		})
	}
}

// TestStatusEtcdMembersRefused: an etcd that refuses the member list, or
// a member's status, to the user (etcd's permission denied, injected)
// gives a line saying so, and status goes on: exit 0, the agents shown.
func TestStatusEtcdMembersRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	refuse := func(method string) context.Context {
		deny := func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if m == method {
				return rpctypes.ErrGRPCPermissionDenied
			}
			return invoker(ctx, m, req, reply, cc, opts...)
		}
		return context.WithValue(context.Background(), dialOptionsHook{}, []grpc.DialOption{grpc.WithChainUnaryInterceptor(deny)})
	}

	r := e.runCtx(refuse("/etcdserverpb.Cluster/MemberList"), "status")
	const list = "etcd: members not known: etcd refuses its member list to a client without a user (etcdserver: permission denied); status goes on with the agents\n"
	if r.code != ExitOK || !strings.HasPrefix(r.stdout, list) || !strings.Contains(r.stdout, "\nepoch 1, ") {
		t.Fatalf("status, member list refused: %s\nwant exit 0, the line %q, then the agents' summary", r, list)
	}
	var js statusEtcd
	r = e.runCtx(refuse("/etcdserverpb.Cluster/MemberList"), "status", "-o", "json")
	mustJSON(t, r.stdout, &js)
	if r.code != ExitOK || !strings.Contains(js.Etcd.Error, "etcd refuses its member list") || len(js.Etcd.Members) != 0 {
		t.Fatalf("status -o json, member list refused: %s", r)
	}

	r = e.runCtx(refuse("/etcdserverpb.Maintenance/Status"), "status")
	status := regexp.MustCompile(`^etcd: 1 member, 1 answering, no leader known; no member can be lost without losing the quorum\n` +
		`etcd: \S+: etcd refuses its status to a client without a user \(etcdserver: permission denied\)\n`)
	if r.code != ExitOK || !status.MatchString(r.stdout) || otherWarning(r.stderr) {
		t.Fatalf("status, members' status refused: %s\nwant exit 0, lines matching %s, no warning", r, status)
	}
}

// otherWarning reports whether stderr holds a warning other than the one
// of a prefix with no agent live or lost (these tests' fleets may have
// none).
func otherWarning(stderr string) bool {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "warning") && !strings.Contains(l, "no agent is live or lost under") {
			return true
		}
	}
	return false
}

// TestStatusThroughAGrpcProxy: etcd's grpc-proxy answers the member list
// with the address it advertises (--advertise-client-url, 127.0.0.1:23790
// unless set; with --resolver-prefix, every proxy registered there), not
// etcd's members. Status through it says so and warns of no member down:
// it named the proxy's address as a member that does not answer.
func TestStatusThroughAGrpcProxy(t *testing.T) {
	t.Parallel()
	c := etcdproc.Start(t, etcdproc.Config{Members: 1})
	p := c.StartProxy(t, etcdproc.ProxyConfig{}) // advertises its listen address
	want := regexp.MustCompile(`^etcd: members not known: the endpoints are etcd's grpc-proxy: its member list names the proxies \(` + regexp.QuoteMeta(p.Addr) +
		`\), not etcd's members, whose health cannot be seen through it; point regionctl status at the members \(--endpoints https://etcd-1:2379,\.\.\.\) to see them; status goes on with the agents\n`)
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := run(ctx, []string{"--endpoints", p.URL(), "--prefix", "/drill/proxy", "--dial-timeout", "10s", "status"}, &out, &errb, func(string) string { return "" })
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	if r.code != ExitOK || !want.MatchString(r.stdout) || strings.Contains(r.stderr, "etcd member") {
		t.Fatalf("status through a grpc-proxy: %s\nwant exit 0, a first line matching %s, no warning of a member down", r, want)
	}
}
