package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/regiond/regiond/internal/devetcd"
)

// TestDialTLSAndAuth: Dial reaches an etcd with TLS, client certificates
// and authentication on; refusals of the user are *AuthError (not
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

	for _, tc := range []struct {
		name, user, password, probe string
		is                          error
		want                        string
	}{
		{name: "wrong password", user: a.User, password: "wrong", is: rpctypes.ErrAuthFailed,
			want: "authentication failed for user " + a.User + " at " + srv.Endpoints[0]},
		{name: "no user", is: rpctypes.ErrPermissionDenied, want: "without a user"},
		{name: "outside the role", user: a.User, password: a.Password, probe: "/other/routing/epoch",
			is: rpctypes.ErrPermissionDenied, want: "permission denied for user " + a.User},
	} {
		c := base
		c.Username, c.Password = tc.user, tc.password
		if tc.probe != "" {
			c.ProbeKey = tc.probe
		}
		_, err := Dial(ctx, c)
		var ae *AuthError
		var ue *UnreachableError
		if !errors.As(err, &ae) || errors.As(err, &ue) || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want *AuthError wrapping %v with %q", tc.name, err, tc.is, tc.want)
		}
	}
}
