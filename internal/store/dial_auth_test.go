package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
)

// TestDialTLSAndAuth: Dial reaches an etcd with TLS, client certificates
// and authentication on; a refused login is an *AuthError, a refused
// probe a *PermissionError naming the user (or the certificate's CN), the
// key, what the job needs and the roles that hold it (never an
// *UnreachableError), keeping etcd's error in the chain.
func TestDialTLSAndAuth(t *testing.T) {
	t.Parallel()
	certs := devetcd.NewTestCerts(t)
	srv := devetcd.NewTestTLS(t, certs)
	a := devetcd.EnableTestAuth(t, srv, "/regiond/v1/")
	base := DialConfig{Endpoints: srv.Endpoints, CACert: certs.CAFile, Cert: certs.ClientCertFile,
		Key: certs.ClientKeyFile, ProbeKey: "/regiond/v1/routing/epoch"}
	ctx := context.Background()

	ok := base
	ok.Username, ok.Password = a.User, a.Password
	cli, err := Dial(ctx, ok)
	if err != nil {
		t.Fatalf("dial with TLS and the right password: %v", err)
	}
	if _, err := cli.Put(ctx, "/regiond/v1/agents/n", "x"); err != nil {
		t.Fatalf("put under the prefix: %v", err)
	}
	cli.Close()

	other, _ := keyspace.New("/other")
	for _, tc := range []struct {
		name, user, password, probe string
		roles                       Roles
		needs                       []Grant
		is                          error
		login                       bool // an *AuthError, else a *PermissionError
		want                        string
	}{
		{name: "wrong password", user: a.User, password: "wrong", is: rpctypes.ErrAuthFailed, login: true,
			want: "authentication failed for user " + a.User + " at " + srv.Endpoints[0]},
		// The client certificate's CN is no etcd user.
		{name: "no user", is: rpctypes.ErrPermissionDenied,
			want: "permission denied for user " + devetcd.TestClientCN + " at " + srv.Endpoints[0] + ": read /regiond/v1/routing/epoch"},
		{name: "outside the role", user: a.User, password: a.Password, probe: "/other/routing/epoch", roles: NewRoles(other, ""),
			is: rpctypes.ErrPermissionDenied,
			want: "permission denied for user " + a.User + " at " + srv.Endpoints[0] + ": read /other/routing/epoch needs read on /other/routing/ " +
				"(role regiond-viewer or regiond-operator): etcdserver: permission denied"},
		{name: "a write job", user: a.User, password: a.Password, probe: "/other/routing/epoch", roles: NewRoles(other, "x-"),
			needs: NewRoles(other, "x-").CommitNeeds(), is: rpctypes.ErrPermissionDenied,
			want: "read /other/routing/epoch needs readwrite on /other/routing/pools/, /other/routing/routes/, /other/routing/policy/, " +
				"/other/routing/overrides/, the key /other/routing/epoch and /other/audit/ (role x-operator)"},
	} {
		c := base
		c.Username, c.Password, c.Roles, c.ProbeNeeds = tc.user, tc.password, tc.roles, tc.needs
		if tc.probe != "" {
			c.ProbeKey = tc.probe
		}
		_, err := Dial(ctx, c)
		var ae *AuthError
		var pe *PermissionError
		var ue *UnreachableError
		typed := errors.As(err, &pe)
		if tc.login {
			typed = errors.As(err, &ae)
		}
		if !typed || errors.As(err, &ue) || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error wrapping %v with %q", tc.name, err, tc.is, tc.want)
		}
		// A user from the certificate alone: the refusal says it must be
		// an etcd user, and not that a grpc-proxy passes no certificate on
		// (at the members, the auth review: noise).
		if fromCert := strings.Contains(fmt.Sprint(err), "is the client certificate's common name: it must be an etcd user holding that role"); !tc.login && fromCert != (tc.user == "") {
			t.Errorf("%s: the certificate's note %v, want it exactly when the user is the certificate's CN: %v", tc.name, fromCert, err)
		}
		if strings.Contains(fmt.Sprint(err), "grpc-proxy") {
			t.Errorf("%s: a refusal at the members names the grpc-proxy: %v", tc.name, err)
		}
	}
}

// TestDialNoPasswordUser: a user made without a password (it logs in by
// its client certificate, as regionctl auth apply's users do) given a
// password is an *AuthError that says so and what to do, not "check the
// password" (etcd's own text, code Unknown, said only that a password was
// given).
func TestDialNoPasswordUser(t *testing.T) {
	t.Parallel()
	certs := devetcd.NewTestCerts(t)
	srv := devetcd.NewTestTLS(t, certs)
	devetcd.EnableTestAuth(t, srv, "/regiond/v1/")
	root, err := srv.ClientAs("root", devetcd.TestRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx := context.Background()
	if _, err := root.UserAddWithOptions(ctx, "certonly", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatal(err)
	}
	_, err = Dial(ctx, DialConfig{Endpoints: srv.Endpoints, CACert: certs.CAFile, Cert: certs.ClientCertFile,
		Key: certs.ClientKeyFile, Username: "certonly", Password: "x", ProbeKey: "/regiond/v1/routing/epoch"})
	var ae *AuthError
	if !errors.As(err, &ae) || !ae.NoPassword || !strings.Contains(err.Error(), "the user has no password in etcd, it logs in by its client certificate") ||
		!strings.Contains(err.Error(), "leave out --user") || !strings.Contains(err.Error(), "make it again with one (regionctl auth apply --passwords)") {
		t.Fatalf("a password for a no-password user: %v; want an *AuthError saying to log in by the certificate", err)
	}
}

// TestDialLogsInAgainAfterARestore: a client of Dial with a password
// (a heartbeat's, which lives for months) outlives a restore of etcd from
// a backup whose raft log is behind the index named in its token. etcd
// holds its requests instead of refusing the token; after one timed out,
// the client logs in again and the next are answered.
func TestDialLogsInAgainAfterARestore(t *testing.T) {
	t.Parallel()
	r := devetcd.NewTestRestorable(t)
	devetcd.EnableTestRootAuth(t, r.Server).Close()
	r.Backup()
	ctx := context.Background()
	cli, err := Dial(ctx, DialConfig{Endpoints: r.Server.Endpoints, Username: "root", Password: devetcd.TestRootPassword, DialTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i := range 300 { // the raft log moves on past the backup's
		if _, err := cli.Put(ctx, "/moving-on", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	// The token named an index below the writes: log in again past them.
	cli.Close()
	if cli, err = Dial(ctx, DialConfig{Endpoints: r.Server.Endpoints, Username: "root", Password: devetcd.TestRootPassword, DialTimeout: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	r.Restore()
	timedOut := false
	for i := 0; i < 100; i++ {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = cli.Get(rctx, "/moving-on")
		cancel()
		if err == nil {
			if !timedOut {
				t.Fatal("answered at once after the restore: the token was not held (the test's premise: etcd's simple tokens wait for their raft index)")
			}
			return
		}
		timedOut = timedOut || errors.Is(err, context.DeadlineExceeded)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("reads still fail after the restore: %v", err)
}
