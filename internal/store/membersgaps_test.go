package store

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/keyspace"
)

// TestGapUnstartedLearnerDoesNotVote guards EtcdMembers' count of voting
// members, which leaves learners out: on a one-member etcd with a learner
// added (etcdctl member add --learner) whose etcd never started, the
// learner is listed (no name, no client URL, an empty list in JSON, "not
// started" as its error, not answering) and down, but not voting: the
// quorum is the one member's, which answers, so no member can be lost
// (not "fewer than a quorum answer").
func TestGapUnstartedLearnerDoesNotVote(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A peer URL nothing listens on: the learner's etcd never starts.
	add, err := cli.MemberAddAsLearner(ctx, []string{deadURL(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := New(cli, keyspace.Default(), Options{}).EtcdMembers(ctx, nil)
	if c.Error != "" || len(c.Members) != 2 {
		t.Fatalf("members: %+v, want two (the member and the learner)", c)
	}
	var learner, member EtcdMember
	for _, m := range c.Members {
		if m.ID == fmt.Sprintf("%x", add.Member.ID) {
			learner = m
		} else {
			member = m
		}
	}
	if !learner.IsLearner || learner.Answering || learner.Name != "" || learner.ClientURLs == nil || len(learner.ClientURLs) != 0 ||
		!strings.HasPrefix(learner.Error, "not started: added (etcdctl member add), its etcd not yet running, or started without --initial-cluster-state=existing") ||
		learner.Display() != "(unstarted, id "+learner.ID+")" {
		t.Errorf("the unstarted learner: %+v", learner)
	}
	if !member.Answering || !member.IsLeader || member.IsLearner || c.Leader != member.Name {
		t.Errorf("the member: %+v, leader %q", member, c.Leader)
	}
	if c.Voting != 1 || c.Quorum != 1 || c.Healthy != 1 || !c.QuorumAtRisk {
		t.Errorf("voting %d, quorum %d, healthy %d, at risk %v; want 1, 1, 1, true (a learner does not vote)", c.Voting, c.Quorum, c.Healthy, c.QuorumAtRisk)
	}
	if got, want := c.Tolerance(), "no member can be lost without losing the quorum"; got != want {
		t.Errorf("tolerance %q, want %q", got, want)
	}
	if down := c.Down(); len(down) != 1 || down[0].ID != learner.ID {
		t.Errorf("down: %+v, want the learner", down)
	}
	if l := c.Leaderless(); len(l) != 0 {
		t.Errorf("leaderless: %+v, want none", l)
	}
}

// deadURL is an http URL on a loopback port reserved for this test
// process (freeport) that nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// startEmbedded starts a cluster of n embedded etcd members on free
// loopback ports, the first advertising advertise0 as its client URL
// when set (one it does not listen on), and returns a client of the
// first member's listening URL; all stop when the test ends.
func startEmbedded(t *testing.T, n int, advertise0 string) *clientv3.Client {
	t.Helper()
	var cfgs []*embed.Config
	var initial []string
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name, cfg.Dir, cfg.LogLevel = fmt.Sprintf("m%d", i), t.TempDir(), "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.TickMs, cfg.ElectionMs = 10, 100 // elect a leader at once
		for _, u := range []*[]url.URL{&cfg.ListenClientUrls, &cfg.ListenPeerUrls} {
			u0, err := url.Parse(deadURL(t))
			if err != nil {
				t.Fatal(err)
			}
			*u = []url.URL{*u0}
		}
		cfg.AdvertiseClientUrls, cfg.AdvertisePeerUrls = cfg.ListenClientUrls, cfg.ListenPeerUrls
		if i == 0 && advertise0 != "" {
			u0, err := url.Parse(advertise0)
			if err != nil {
				t.Fatal(err)
			}
			cfg.AdvertiseClientUrls = []url.URL{*u0}
		}
		initial = append(initial, cfg.Name+"="+cfg.ListenPeerUrls[0].String())
		cfgs = append(cfgs, cfg)
	}
	var started []*embed.Etcd
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		started = append(started, e)
	}
	for i, e := range started {
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(20 * time.Second):
			t.Fatalf("member m%d not ready", i)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cfgs[0].ListenClientUrls[0].String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestGapMemberAnsweringAtTheEndpointOnly guards EtcdMembers' asking of
// the client's endpoints as well as the URLs the members advertise: a
// member whose advertised client URL does not answer from this host (a
// name or address only its own network knows) but which answers at
// --endpoints is up, the leader, and healthy.
func TestGapMemberAnsweringAtTheEndpointOnly(t *testing.T) {
	t.Parallel()
	cli := startEmbedded(t, 1, deadURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := New(cli, keyspace.Default(), Options{}).EtcdMembers(ctx, nil)
	if c.Error != "" || len(c.Members) != 1 {
		t.Fatalf("members: %+v", c)
	}
	if m := c.Members[0]; !m.Answering || m.Error != "" || !m.IsLeader || c.Healthy != 1 || len(c.Down()) != 0 {
		t.Errorf("a member answering at the endpoint alone: %+v (healthy %d), want it answering, the leader", m, c.Healthy)
	}
}

// TestGapTwoVotingMembersHaveNoSpare guards EtcdMembers' quorum, a
// majority of the voting members (Voting/2+1): a cluster of two needs
// both, so with both answering its quorum is at risk and no member can
// be lost (docs/regionctl.md: quorum_at_risk always so for one or two
// voting members).
func TestGapTwoVotingMembersHaveNoSpare(t *testing.T) {
	t.Parallel()
	cli := startEmbedded(t, 2, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := New(cli, keyspace.Default(), Options{}).EtcdMembers(ctx, nil)
	if c.Error != "" || len(c.Members) != 2 || len(c.Down()) != 0 || c.Leader == "" {
		t.Fatalf("members of a cluster of two: %+v", c)
	}
	if c.Voting != 2 || c.Quorum != 2 || c.Healthy != 2 || !c.QuorumAtRisk {
		t.Errorf("voting %d, quorum %d, healthy %d, at risk %v; want 2, 2, 2, true", c.Voting, c.Quorum, c.Healthy, c.QuorumAtRisk)
	}
	if got, want := c.Tolerance(), "no member can be lost without losing the quorum"; got != want {
		t.Errorf("tolerance %q, want %q", got, want)
	}
}
