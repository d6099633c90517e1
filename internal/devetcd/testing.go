package devetcd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/tcpproxy"
)

// NewTest starts an embedded etcd in t.TempDir() on free loopback ports and
// stops it when the test ends. Passwords of users added to it are hashed
// at bcrypt.MinCost, for fast authentication.
func NewTest(t testing.TB) *Server {
	t.Helper()
	srv, err := Start(context.Background(), Config{Dir: t.TempDir(), BcryptCost: uint(bcrypt.MinCost)})
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// NewTestClient returns a client of srv closed when the test ends.
func NewTestClient(t testing.TB, srv *Server) *clientv3.Client {
	t.Helper()
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// NewTestTLS is NewTest serving clients over TLS with certs' server
// certificate and requiring client certificates signed by certs' CA; its
// Client presents certs' client certificate. Passwords are hashed with
// bcrypt.MinCost, for fast authentication.
func NewTestTLS(t testing.TB, certs *TestCerts) *Server {
	t.Helper()
	tlsCfg, err := certs.ServerTLS()
	if err != nil {
		t.Fatalf("test TLS config: %v", err)
	}
	srv, err := Start(context.Background(), Config{Dir: t.TempDir(), ClientTLS: tlsCfg, BcryptCost: uint(bcrypt.MinCost)})
	if err != nil {
		t.Fatalf("start embedded etcd with TLS: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// Test users of EnableTestAuth.
const (
	TestRootPassword = "root-secret"
	TestUser         = "regiond-test"
	TestPassword     = "regiond-secret"
)

// EnableTestAuth turns on authentication on srv with root
// (TestRootPassword) and TestUser (TestPassword) allowed to read and write
// keys under prefix, and returns the users.
func EnableTestAuth(t testing.TB, srv *Server, prefix string) Auth {
	t.Helper()
	return enableTestAuth(t, srv, Auth{RootPassword: TestRootPassword, User: TestUser, Password: TestPassword, Prefix: prefix})
}

// EnableTestRootAuth turns on authentication on srv with user root
// (TestRootPassword) alone, and returns a client of root closed when the
// test ends.
func EnableTestRootAuth(t testing.TB, srv *Server) *clientv3.Client {
	t.Helper()
	enableTestAuth(t, srv, Auth{RootPassword: TestRootPassword})
	root, err := srv.ClientAs("root", TestRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

func enableTestAuth(t testing.TB, srv *Server, a Auth) Auth {
	t.Helper()
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// A set-up step, not what a test measures: each user added costs a
	// bcrypt hash, seconds on a loaded 2-core machine under -race.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := EnableAuth(ctx, cli, a); err != nil {
		t.Fatal(err)
	}
	return a
}

// Secure is an embedded etcd serving TLS (client certificates required)
// with authentication on, and a client logged in as TestUser.
type Secure struct {
	// Server is the etcd, serving TLS (NewTestTLS).
	Server *Server
	// Certs is the test CA that signed the server's certificate; it
	// issues client certificates (IssueClient).
	Certs *TestCerts
	// Auth names its users (EnableTestAuth): TestUser has readwrite on
	// the prefix.
	Auth Auth
	// Client is TestUser's client, closed when the test ends.
	Client *clientv3.Client
}

// NewTestSecure starts a Secure etcd whose TestUser may read and write
// under prefix; it stops when the test ends.
func NewTestSecure(t testing.TB, prefix string) Secure {
	t.Helper()
	certs := NewTestCerts(t)
	srv := NewTestTLS(t, certs)
	a := EnableTestAuth(t, srv, prefix)
	cli, err := srv.ClientAs(a.User, a.Password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return Secure{Server: srv, Certs: certs, Auth: a, Client: cli}
}

// AuthBehindProxy is an embedded etcd with authentication on, reached
// through a TCP proxy a test can cut (Sever, then Restore) to make its
// clients connect again: how a test makes a client's watch be created
// anew after its role changed.
type AuthBehindProxy struct {
	// Server is the etcd, reached directly or through Proxy.
	Server *Server
	// Auth is the test user's (EnableTestAuth): readwrite on Prefix.
	Auth Auth
	// Root is a client of user root, straight to etcd.
	Root *clientv3.Client
	// Proxy is the TCP proxy to Server that the clients under test dial
	// (Proxy.URL), cut with Sever.
	Proxy *tcpproxy.Proxy
}

// NewTestAuthBehindProxy starts an AuthBehindProxy whose test user may
// read and write prefix; all of it is closed when the test ends.
func NewTestAuthBehindProxy(t testing.TB, prefix string) *AuthBehindProxy {
	t.Helper()
	srv := NewTest(t)
	a := EnableTestAuth(t, srv, prefix)
	root, err := srv.ClientAs("root", TestRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	proxy, err := tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return &AuthBehindProxy{Server: srv, Auth: a, Root: root, Proxy: proxy}
}

// SetAccess revokes (false) or grants back (true) the test user's
// readwrite on its prefix. Revoking also cuts the proxy's connections, so
// that the clients behind it create their watches again, and are refused.
func (p *AuthBehindProxy) SetAccess(t testing.TB, on bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	role, end := p.Auth.User+"-rw", clientv3.GetPrefixRangeEnd(p.Auth.Prefix)
	if on {
		if _, err := p.Root.RoleGrantPermission(ctx, role, p.Auth.Prefix, end, clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := p.Root.RoleRevokePermission(ctx, role, p.Auth.Prefix, end); err != nil {
		t.Fatal(err)
	}
	p.Proxy.Sever()
	if err := p.Proxy.Restore(); err != nil {
		t.Fatal(err)
	}
}

// RaiseNoSpaceAlarm raises etcd's NOSPACE alarm on the member cli is
// connected to, as a backend past --quota-backend-bytes does (the same
// state: etcd then refuses every put, Txn with a put and lease grant, and
// lets reads, deletes and keepalives pass, until the alarm is disarmed),
// and checks that a put is refused. It returns what disarms it; the test's
// end disarms it too.
func RaiseNoSpaceAlarm(t testing.TB, cli *clientv3.Client) (disarm func()) {
	t.Helper()
	ctx := context.Background()
	st, err := cli.Status(ctx, cli.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/devetcd-nospace-probe", "x"); err == nil || !strings.Contains(err.Error(), "space exceeded") {
		t.Fatalf("the NOSPACE alarm is not in force: put: %v", err)
	}
	disarm = func() {
		if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE}); err != nil {
			t.Errorf("disarm the NOSPACE alarm: %v", err)
		}
	}
	t.Cleanup(func() {
		cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE})
	})
	return disarm
}

// NewGoneClient returns a client of a loopback endpoint nothing listens
// on (etcd gone), closed when the test ends: every request fails at its
// deadline.
func NewGoneClient(t testing.TB) *clientv3.Client {
	t.Helper()
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{fmt.Sprintf("127.0.0.1:%d", port)}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
