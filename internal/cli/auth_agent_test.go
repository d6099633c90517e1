package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/routing"
)

// runRBACAgent runs a real agent (in-process) of node n1 that logs in as
// the agent's user alone, until the returned stop is called.
func (e *rbacEnv) runRBACAgent(t *testing.T, logs *logbuf.Buffer) (*agent.Agent, func()) {
	t.Helper()
	dir := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.Endpoints, cfg.Prefix, cfg.Node = e.srv.Endpoints, rbacPrefix, "n1"
	cfg.Socket, cfg.Listen = "", "127.0.0.1:0"
	cfg.Snapshot = filepath.Join(dir, "shm", "table.json")
	cfg.DialTimeout, cfg.StatusTTL = 2*time.Second, 2*time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if e.passwords != nil {
		tc, err := e.certs.ClientTLSConfig() // CN regiond-test-client is no user: the password logs in
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS, cfg.Username, cfg.Password = tc, rbacAgent, e.passwords[rbacAgent]
	} else {
		tc, err := e.cert(rbacAgent).TLSConfig(e.certs.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = tc
	}
	return startAgent(t, cfg)
}

// startAgent runs a real agent (in-process) of cfg until the returned stop
// (or the test's end) is called.
func startAgent(t *testing.T, cfg agent.Config) (*agent.Agent, func()) {
	t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("agent did not stop within 15s")
		}
	}
	t.Cleanup(stop)
	return a, stop
}

// agentResolve asks the agent's API where a viewer of cc goes.
func agentResolve(a *agent.Agent, cc string) (int, routing.Decision, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://%s/v1/resolve?country=%s&key=k", a.Addr(), cc))
	if err != nil {
		return 0, routing.Decision{}, err
	}
	defer resp.Body.Close()
	var d routing.Decision
	err = json.NewDecoder(resp.Body).Decode(&d)
	return resp.StatusCode, d, err
}

// agentRuns: a real agent whose user holds the agent role alone syncs,
// serves, follows an operator's change (which --wait-converged sees it
// reach), puts its status key and revokes it when stopped; it logs no
// refused request.
func agentRuns(t *testing.T, e *rbacEnv) {
	t.Helper()
	var logs logbuf.Buffer
	a, stop := e.runRBACAgent(t, &logs)
	rev := e.state().Revision
	if _, ok := poll.Until(20*time.Second, func() bool {
		code, d, err := agentResolve(a, "PL")
		return err == nil && code == 200 && d.Revision >= rev && len(d.Degraded) == 0
	}); !ok {
		t.Fatalf("the agent with the agent role did not sync:\n%s", logs.String())
	}
	statusKey := e.ks.Agent("n1")
	var st routing.AgentStatus
	if _, ok := poll.Until(20*time.Second, func() bool {
		resp, err := e.root.Get(context.Background(), statusKey)
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
			return false
		}
		return json.Unmarshal(resp.Kvs[0].Value, &st) == nil && st.Revision >= rev && st.Connected
	}); !ok {
		t.Fatalf("the agent put no status key at revision %d: %+v\n%s", rev, st, logs.String())
	}
	r := e.as(rbacOperator, "route", "set", "PL", "--target", "eu-west=100", "--reason", "to west", "--wait-converged=20s", "-o", "json")
	var w writeResult
	if r.code != ExitOK || json.Unmarshal([]byte(r.stdout), &w) != nil || w.Converged == nil || !*w.Converged {
		t.Fatalf("operator write waiting for the agent: %s", r)
	}
	if code, d, err := agentResolve(a, "PL"); err != nil || code != 200 || d.Pool != "eu-west" || d.Revision < w.Revision {
		t.Fatalf("after --wait-converged the agent serves %d %+v (%v), want eu-west at revision %d", code, d, err, w.Revision)
	}
	if r := e.as(rbacViewer, "status", "--max-lag", "0"); r.code != ExitOK || !strings.Contains(r.stdout, "n1") {
		t.Fatalf("viewer status with the agent current: %s", r)
	}
	// Its node record, under its own role: its status, without a lease.
	if resp, err := e.root.Get(context.Background(), e.ks.Node("n1")); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != 0 {
		t.Fatalf("the agent's node record: %v %v", resp, err)
	}
	// The viewer may not forget a node, the operator may not while its
	// agent is live.
	if r := e.as(rbacViewer, "agent", "rm", "n1"); r.code != ExitRefused || !strings.Contains(r.stderr, "permission denied") {
		t.Fatalf("viewer agent rm: %s; want permission denied", r)
	}
	if r := e.as(rbacOperator, "agent", "rm", "n1"); r.code != ExitRefused || !strings.Contains(r.stderr, "its agent is live") {
		t.Fatalf("operator agent rm of a live node: %s; want refused", r)
	}
	skippedHealthKey(t, e, statusKey)
	stop()
	if resp, err := e.root.Get(context.Background(), statusKey); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("status key after the agent stopped: %v %v (the lease revoke refused?)", resp, err)
	}
	if resp, err := e.root.Get(context.Background(), e.ks.Node("n1")); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("node record after the agent stopped cleanly: %v %v (its delete refused?)", resp, err)
	}
	if l := strings.ToLower(logs.String()); strings.Contains(l, "permission denied") || strings.Contains(l, "level=error") {
		t.Fatalf("the agent met a refusal or an error with the agent role:\n%s", logs.String())
	}
}

// skippedHealthKey: an origin's hand-written heartbeat (a value that is no
// JSON object) is skipped by the agent, which counts it as a live instance
// all the same, as every agent does: status shows it, yet it keeps no
// operator write from converging (the operator's role could not delete
// it, and an origin's mistake must not fail every --wait-converged).
func skippedHealthKey(t *testing.T, e *rbacEnv, statusKey string) {
	t.Helper()
	ctx := context.Background()
	rel := "health/eu-central/by-hand"
	hk := e.ks.RoutingKey(rel)
	if _, err := e.client(rbacOrigin).Put(ctx, hk, "up"); err != nil {
		t.Fatalf("the origin's own health key: %v", err)
	}
	defer func() {
		if _, err := e.client(rbacOrigin).Delete(ctx, hk); err != nil {
			t.Errorf("the origin deleting its health key: %v", err)
		}
	}()
	if _, ok := poll.Until(20*time.Second, func() bool {
		resp, err := e.root.Get(ctx, statusKey)
		var st routing.AgentStatus
		return err == nil && len(resp.Kvs) == 1 && json.Unmarshal(resp.Kvs[0].Value, &st) == nil &&
			st.Skipped == 1 && len(st.SkippedKeys) == 1 && st.SkippedKeys[0] == rel
	}); !ok {
		t.Fatalf("the agent's status key never listed %s as skipped", rel)
	}
	r := e.as(rbacOperator, "route", "set", "PL", "--target", "eu-west=100", "--attr", "note=by-hand", "--reason", "with a skipped health key", "--wait-converged=20s")
	if r.code != ExitOK || !strings.Contains(r.stdout, "converged") {
		t.Fatalf("operator write with an agent skipping an origin's health key: %s", r)
	}
	if r := e.as(rbacViewer, "status", "--max-lag", "0"); r.code != ExitOK || !strings.Contains(r.stdout, rel) {
		t.Fatalf("viewer status with an agent skipping an origin's health key: %s", r)
	}
	if _, err := e.client(rbacOperator).Delete(ctx, hk); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("the operator deleting an origin's health key: %v, want permission denied", err)
	}
}
