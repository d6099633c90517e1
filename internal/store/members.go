package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/regiond/regiond/internal/etcddiag"
)

// EtcdCluster is etcd's membership as regionctl status shows it: each
// member, whether it answers at its client URLs from this host, and how
// many more members the cluster can lose before it loses its quorum.
type EtcdCluster struct {
	// Members are the members etcd lists, in its order.
	Members []EtcdMember `json:"members"`
	// Leader is the name of the member the answering members follow (the
	// one of the highest raft term), "" when none is known.
	Leader string `json:"leader"`
	// RaftTerm is the raft term of that leader; 0 when none is known.
	RaftTerm uint64 `json:"raft_term"`
	// Voting is the number of voting members (learners do not vote).
	Voting int `json:"voting"`
	// Healthy is the number of voting members that answer and know a
	// leader.
	Healthy int `json:"healthy"`
	// Quorum is the number of voting members etcd needs: Voting/2+1.
	Quorum int `json:"quorum"`
	// QuorumAtRisk: losing one more voting member loses the quorum
	// (Healthy-1 < Quorum). Always so for a cluster of one or two voting
	// members. False when Error is set (nothing is known).
	QuorumAtRisk bool `json:"quorum_at_risk"`
	// Error says why the members are not known (etcd refused or did not
	// answer the member list); then Members is empty.
	Error string `json:"error,omitempty"`
}

// EtcdMember is one etcd member.
type EtcdMember struct {
	// Name is the member's --name; "" for a member added (etcdctl member
	// add) whose etcd has not started yet.
	Name string `json:"name"`
	// ID is the member's ID in hex, as etcdctl member list prints it.
	ID string `json:"id"`
	// ClientURLs are the client URLs it advertises.
	ClientURLs []string `json:"client_urls"`
	// PeerURLs are the peer URLs it advertises.
	PeerURLs []string `json:"peer_urls"`
	// Answering: its Status answered, at one of its client URLs or at
	// one of --endpoints.
	Answering bool `json:"answering"`
	// Error says why it does not answer, or why its Status was refused.
	Error string `json:"error"`
	// IsLeader: it is the leader the answering members follow.
	IsLeader bool `json:"is_leader"`
	// IsLearner: a non-voting member (etcdctl member add --learner).
	IsLearner bool `json:"is_learner"`
	// Version is the etcd version it reports.
	Version string `json:"version,omitempty"`
	// StatusErrors are the errors its Status reports: no leader, and the
	// cluster's alarms (NOSPACE, CORRUPT).
	StatusErrors []string `json:"status_errors,omitempty"`

	id     uint64
	leader uint64 // the leader it follows; 0: none, or not known
}

// Display is the member's name, or "(unstarted, id ID)" for a member not
// started yet.
func (m EtcdMember) Display() string {
	if m.Name == "" {
		return "(unstarted, id " + m.ID + ")"
	}
	return m.Name
}

// Down are the members that do not answer.
func (c *EtcdCluster) Down() []EtcdMember {
	var out []EtcdMember
	for _, m := range c.Members {
		if !m.Answering {
			out = append(out, m)
		}
	}
	return out
}

// Leaderless are the answering voting members that know no leader.
func (c *EtcdCluster) Leaderless() []EtcdMember {
	var out []EtcdMember
	for _, m := range c.Members {
		if m.Answering && !m.IsLearner && m.Error == "" && m.leader == 0 {
			out = append(out, m)
		}
	}
	return out
}

// Tolerance says how many more voting members the cluster can lose
// before it loses its quorum, as a clause: "one more member lost loses
// the quorum".
func (c *EtcdCluster) Tolerance() string {
	switch spare := c.Healthy - c.Quorum; {
	case spare < 0:
		return fmt.Sprintf("fewer than a quorum (%d of %d voting members) answer from this host", c.Quorum, c.Voting)
	case spare == 0 && c.Healthy == c.Voting:
		return "no member can be lost without losing the quorum"
	case spare == 0:
		return "one more member lost loses the quorum"
	case spare == 1:
		return "the quorum survives one more member lost"
	default:
		return fmt.Sprintf("the quorum survives %d more members lost", spare)
	}
}

// EtcdMembers lists etcd's members (MemberList) and asks each for its
// Status at each of its client URLs, and at each of the client's
// endpoints (an --endpoints name that differs from the URL a member
// advertises), concurrently, all within the store's request timeout,
// with the client's TLS and credentials. tc is the client's TLS
// configuration (nil: none), with which a member that does not answer is
// diagnosed (etcddiag). It never fails: what it could not learn is in
// the result's Error, or in a member's.
//
// etcd (v3.7.3: EtcdServer.MemberList, authMaintenanceServer.Status)
// asks nothing of the user for MemberList and Status but to be logged
// in: any user, whatever its roles, may call them; a refusal (another
// etcd) is reported in Error, or in the member's.
func (s *Store) EtcdMembers(ctx context.Context, tc *tls.Config) *EtcdCluster {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	ml, err := s.cli.MemberList(ctx)
	if err != nil {
		if refused(err) {
			return &EtcdCluster{Error: fmt.Sprintf("etcd refuses its member list to %s (%v)", s.who(), err)}
		}
		return &EtcdCluster{Error: fmt.Sprintf("member list: %v", err)}
	}
	if why := proxyMemberList(ml); why != "" {
		return &EtcdCluster{Error: why}
	}
	// Every URL to ask, once: the members' own, then the endpoints.
	var urls []string
	for _, m := range ml.Members {
		for _, u := range m.ClientURLs {
			if !slices.Contains(urls, u) {
				urls = append(urls, u)
			}
		}
	}
	own := len(urls)
	for _, u := range s.cli.Endpoints() {
		if !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	answers := make([]statusAnswer, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.memberStatus(ctx, u)
			answers[i] = statusAnswer{url: u, resp: resp, err: err}
		}()
	}
	wg.Wait()

	// The answers by the member that gave them.
	byID := map[uint64]*pb.StatusResponse{}
	cluster := ml.Header.GetClusterId()
	for _, a := range answers {
		if a.resp != nil && a.resp.Header != nil && a.resp.Header.ClusterId == cluster {
			if _, ok := byID[a.resp.Header.MemberId]; !ok {
				byID[a.resp.Header.MemberId] = a.resp
			}
		}
	}
	out := &EtcdCluster{}
	var leader *pb.StatusResponse
	for _, r := range byID {
		if r.Leader != 0 && (leader == nil || r.RaftTerm > leader.RaftTerm) {
			leader = r
		}
	}
	for _, m := range ml.Members {
		em := EtcdMember{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), ClientURLs: m.ClientURLs, PeerURLs: m.PeerURLs,
			IsLearner: m.IsLearner, id: m.ID}
		if em.ClientURLs == nil {
			em.ClientURLs = []string{}
		}
		if r, ok := byID[m.ID]; ok {
			em.Answering, em.Version, em.StatusErrors, em.leader = true, r.Version, r.Errors, r.Leader
			em.IsLearner = em.IsLearner || r.IsLearner
		} else {
			// A refusal is an answer: the member is up, its status not ours.
			em.Error, em.Answering = s.memberError(ctx, m, cluster, answers[:own], tc)
		}
		out.Members = append(out.Members, em)
	}
	for i := range out.Members {
		for j, e := range out.Members[i].StatusErrors {
			out.Members[i].StatusErrors[j] = out.alarmText(e)
		}
	}
	if leader != nil {
		out.RaftTerm = leader.RaftTerm
		out.Leader = fmt.Sprintf("%x", leader.Leader)
		for i, m := range out.Members {
			if m.id == leader.Leader {
				out.Members[i].IsLeader = true
				out.Leader = m.Display()
			}
		}
	}
	for _, m := range out.Members {
		if m.IsLearner {
			continue
		}
		out.Voting++
		if m.Answering && (m.leader != 0 || m.Error != "") { // a refused status: up, its leader not known
			out.Healthy++
		}
	}
	out.Quorum = out.Voting/2 + 1
	out.QuorumAtRisk = out.Healthy-1 < out.Quorum
	return out
}

// alarmRE matches an alarm as etcd's Status lists it among its errors:
// the AlarmMember's protobuf text ("memberID:351898220565275620
// alarm:NOSPACE", its spacing not fixed).
var alarmRE = regexp.MustCompile(`^memberID:\s*(\d+)\s+alarm:\s*([A-Z]+)\s*$`)

// alarmText is e, a status error, in words when it is an alarm: "alarm
// CORRUPT raised by <member>" (the member named as elsewhere, its ID in
// hex); NOSPACE is NoSpaceHint (with the way out), naming the member.
// Any other error is as etcd wrote it.
func (c *EtcdCluster) alarmText(e string) string {
	m := alarmRE.FindStringSubmatch(e)
	if m == nil {
		return e
	}
	id, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		return e
	}
	who := fmt.Sprintf("member %x", id)
	for _, em := range c.Members {
		if em.id == id {
			who = fmt.Sprintf("%s (%x)", em.Display(), id)
		}
	}
	if m[2] == "NOSPACE" {
		return etcddiag.NoSpaceHint + " (raised by " + who + `; docs/operations.md, "etcd's NOSPACE alarm")`
	}
	return "alarm " + m[2] + " raised by " + who
}

// ViaProxy reports whether --endpoints answer with the member list
// etcd's grpc-proxy makes up (proxyMemberList), with the proxies it
// names; false when the list is etcd's or cannot be read (a refusal, no
// answer within the request timeout: the caller's own request says so).
func (s *Store) ViaProxy(ctx context.Context) ([]string, bool) {
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()
	return viaProxy(ctx, s.cli)
}

// viaProxy is ViaProxy for a client.
func viaProxy(ctx context.Context, cli *clientv3.Client) ([]string, bool) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, false
	}
	return proxyURLs(ml)
}

// proxyURLs returns the client URLs of a member list etcd's grpc-proxy
// made up (proxyMemberList), and whether it is one.
func proxyURLs(ml *clientv3.MemberListResponse) ([]string, bool) {
	if ml.Header.GetClusterId() != 0 || len(ml.Members) == 0 {
		return nil, false
	}
	var urls []string
	for _, m := range ml.Members {
		if m.ID != 0 {
			return nil, false
		}
		urls = append(urls, m.ClientURLs...)
	}
	return urls, true
}

// proxyMemberList says so when ml is not etcd's member list but the one
// etcd's grpc-proxy makes up unless started with an empty
// --advertise-client-url (whose default is 127.0.0.1:23790): itself at
// that address, or the proxies registered under its --resolver-prefix,
// each without a member ID, and no header, where
// etcd names its cluster and every member has an ID. Their health is not
// etcd's members': "" for etcd's own list.
func proxyMemberList(ml *clientv3.MemberListResponse) string {
	urls, ok := proxyURLs(ml)
	if !ok {
		return ""
	}
	return fmt.Sprintf("the endpoints are etcd's grpc-proxy: its member list names the proxies (%s), not etcd's members, whose health cannot be seen through it; "+
		"point regionctl status at the members (--endpoints https://etcd-1:2379,...) to see them", strings.Join(urls, ", "))
}

// memberStatus asks the member at url for its Status, over a connection
// of its own with the client's TLS, credentials and dial options. The
// call fails at once when the connection does not (clientv3's Status
// would wait for it until ctx ends: a member down would cost the whole
// timeout).
func (s *Store) memberStatus(ctx context.Context, url string) (*pb.StatusResponse, error) {
	conn, err := s.cli.Dial(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return pb.NewMaintenanceClient(conn).Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(false))
}

// statusAnswer is what one URL answered to Status.
type statusAnswer struct {
	url  string
	resp *pb.StatusResponse
	err  error
}

// memberError says why member m gave no Status at its client URLs
// (answers holds each member URL's), and whether it refused it: then
// it is up.
func (s *Store) memberError(ctx context.Context, m *pb.Member, cluster uint64, answers []statusAnswer, tc *tls.Config) (why string, refusedIt bool) {
	if len(m.ClientURLs) == 0 {
		if m.Name == "" {
			// The runbook walk: a member started with
			// --initial-cluster-state=new ran as a cluster of its own.
			return "not started: added (etcdctl member add), its etcd not yet running, or started without --initial-cluster-state=existing " +
				"(it bootstrapped a cluster of its own, which the others refuse: its log says \"cluster ID mismatch\"; stop it, empty its data directory, start it with existing)", false
		}
		return "it advertises no client URL", false
	}
	var whys []string
	for _, u := range m.ClientURLs {
		i := slices.IndexFunc(answers, func(a statusAnswer) bool { return a.url == u })
		if i < 0 {
			continue
		}
		err := answers[i].err
		var why string
		switch {
		case err == nil && answers[i].resp.GetHeader().GetClusterId() != cluster:
			why = fmt.Sprintf("an etcd of another cluster (id %x) answers there: a member started again with an empty data directory and --initial-cluster-state=new?",
				answers[i].resp.GetHeader().GetClusterId())
		case err == nil:
			why = fmt.Sprintf("another member (id %x) answers there", answers[i].resp.GetHeader().GetMemberId())
		case refused(err):
			refusedIt = true
			why = fmt.Sprintf("etcd refuses its status to %s (%s)", s.who(), rpctypes.ErrorDesc(err))
		case errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded ||
			status.Code(err) == codes.Unavailable || status.Code(err) == codes.Canceled:
			// Name the cause, as an unreachable dial does.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*etcddiag.Timeout)
			why = strings.TrimPrefix(etcddiag.Why(dctx, []string{u}, tc), u+": ")
			cancel()
			if why == "" {
				why = fmt.Sprintf("took the connection, but etcd did not answer within %s (%s)", s.opts.RequestTimeout, rpctypes.ErrorDesc(err))
			}
		default:
			why = rpctypes.ErrorDesc(err)
		}
		if len(m.ClientURLs) > 1 {
			why = u + ": " + why
		}
		whys = append(whys, why)
	}
	return strings.Join(whys, "; "), refusedIt
}

// refused reports whether err is etcd refusing the user (a permission,
// or no user at all), as opposed to not answering.
func refused(err error) bool {
	if err == nil {
		return false
	}
	if isPermissionDenied(err) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCUserEmpty) {
		return true
	}
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// who names the store's user for a refusal.
func (s *Store) who() string {
	if s.opts.User == "" {
		return "a client without a user"
	}
	return "user " + s.opts.User
}

// TLS returns the client TLS configuration of c's TLS files (nil when
// none is set), as Dial builds it.
func (c DialConfig) TLS() (*tls.Config, error) { return c.tlsConfig() }
