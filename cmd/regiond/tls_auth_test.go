package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
)

// TestRootTLSAndAuthFlags: `regiond` with --cacert/--cert/--key, a
// scheme-less endpoint (made https by the TLS flags), --user and
// $REGIOND_PASSWORD serves decisions from an etcd with TLS, client
// certificates and authentication on. With a wrong password it keeps
// running and names the refused login in /v1/status; a TLS file that does
// not load exits 2.
func TestRootTLSAndAuthFlags(t *testing.T) {
	sec := devetcd.NewTestSecure(t, "/regiond/v1/")
	srv, certs, a, cli := sec.Server, sec.Certs, sec.Auth, sec.Client
	if _, err := cli.Put(context.Background(), "/regiond/v1/routing/routes/_default",
		`{"targets":[{"pool":"p1","weight":100}]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), "/regiond/v1/routing/pools/p1",
		`{"host":"edge-1.example.net:443","residency":"eu","status":"active"}`); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.Endpoints[0], "https://")
	args := func(dir string) []string {
		return []string{"--endpoints", host, "--cacert", certs.CAFile, "--cert", certs.ClientCertFile,
			"--key", certs.ClientKeyFile, "--user", a.User, "--node", "node-flags",
			"--socket", filepath.Join(dir, "regiond.sock"), "--snapshot", filepath.Join(dir, "table.json"),
			"--log-level", "error"}
	}
	run := func(ctx context.Context, args []string) error {
		cmd := newRootCommand()
		cmd.SetArgs(args)
		return cmd.ExecuteContext(ctx)
	}

	t.Setenv("REGIOND_PASSWORD", a.Password)
	listen := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, append(args(t.TempDir()), "--listen", listen)) }()
	var d struct{ Pool, Route string }
	ok := false
	for i := 0; i < 200 && !ok; i++ {
		time.Sleep(25 * time.Millisecond)
		resp, err := http.Get(fmt.Sprintf("http://%s/v1/resolve?country=PL&key=k", listen))
		if err != nil {
			continue
		}
		ok = resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&d) == nil && d.Pool == "p1"
		resp.Body.Close()
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("regiond: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("regiond did not stop")
	}
	if !ok {
		t.Fatalf("no decision from regiond over TLS with auth (last %+v)", d)
	}

	// A wrong password: regiond keeps running (it would serve its snapshot)
	// and names the refusal in /v1/status until etcd accepts the login.
	t.Setenv("REGIOND_PASSWORD", "wrong")
	listen = freeAddr(t)
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- run(ctx, append(args(t.TempDir()), "--listen", listen)) }()
	var st struct {
		EtcdError string `json:"etcd_error"`
	}
	for i := 0; i < 200 && !strings.Contains(st.EtcdError, "authentication failed"); i++ {
		time.Sleep(25 * time.Millisecond)
		resp, err := http.Get(fmt.Sprintf("http://%s/v1/status", listen))
		if err != nil {
			continue
		}
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("regiond with a wrong password, stopped: %v, want a clean stop", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("regiond with a wrong password did not stop")
	}
	if !strings.Contains(st.EtcdError, "authentication failed") || !strings.Contains(st.EtcdError, a.User) {
		t.Fatalf("wrong password: /v1/status etcd_error %q, want the refused login of %s", st.EtcdError, a.User)
	}
	bad := append(args(t.TempDir()), "--listen", freeAddr(t), "--cacert", filepath.Join(t.TempDir(), "missing.pem"))
	if err := run(context.Background(), bad); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "--cacert") {
		t.Fatalf("missing --cacert file: %v (exit %d), want exit 2", err, exitCode(err))
	}
}
