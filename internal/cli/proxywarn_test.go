package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
)

// TestWarnsWhenPointedAtAProxy: a write's --wait-converged and a
// heartbeat pointed at etcd's grpc-proxy (which the docs say to point at
// the members only: the wait can miss the agents' puts, and the proxy
// does not renew a heartbeat's lease reliably) warn on stderr, naming the
// proxy and the docs; pointed at the member, they do not (the runbook
// walk: both ran through a proxy silently).
func TestWarnsWhenPointedAtAProxy(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	p := etcdproc.StartProxyTo(t, srv.Endpoints, etcdproc.ProxyConfig{})
	const warning = "--endpoints are etcd's grpc-proxy (its member list names "
	at := func(endpoint string, stderr *logbuf.Buffer, ctx context.Context, args ...string) int {
		full := append([]string{"--endpoints", endpoint, "--prefix", "/proxywarn", "--dial-timeout", "10s", "--command-timeout", "20s"}, args...)
		var out bytes.Buffer
		return run(ctx, full, &out, stderr, func(string) string { return "" })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errb logbuf.Buffer
	if code := at(srv.Endpoints[0], &errb, ctx, "apply", "-f", exampleConfig, "--reason", "seed"); code != ExitOK {
		t.Fatalf("seed: exit %d: %s", code, errb.String())
	}

	for _, c := range []struct {
		endpoint string
		warn     bool
	}{{p.URL(), true}, {srv.Endpoints[0], false}} {
		var errb logbuf.Buffer
		// No agent runs: the wait exits 5 after its second.
		code := at(c.endpoint, &errb, ctx, "pool", "drain", "eu-central", "--reason", "proxy", "--wait-converged=1s")
		if code != ExitNotConverged || strings.Contains(errb.String(), warning) != c.warn ||
			c.warn && (!strings.Contains(errb.String(), p.URL()[len("http://"):]) || !strings.Contains(errb.String(), `"etcd and its grpc-proxy"`)) {
			t.Errorf("drain --wait-converged at %s: exit %d; want exit 5, warned %v naming the proxy:\n%s", c.endpoint, code, c.warn, errb.String())
		}
		at(c.endpoint, &errb, ctx, "pool", "undrain", "eu-central", "--reason", "proxy")

		var hb logbuf.Buffer
		hctx, hcancel := context.WithCancel(ctx)
		done := make(chan int, 1)
		go func() {
			done <- at(c.endpoint, &hb, hctx, "heartbeat", "eu-central", "--instance", "fra-1", "--addr", "10.0.0.1:443")
		}()
		// The warning comes before the key is put; "alive under lease"
		// on stdout is not shared, so wait for it in etcd.
		if _, ok := poll.Until(20*time.Second, func() bool {
			g, err := cli.Get(hctx, "/proxywarn/routing/health/eu-central/fra-1")
			return err == nil && len(g.Kvs) == 1
		}); !ok {
			t.Fatalf("heartbeat at %s: no health key:\n%s", c.endpoint, hb.String())
		}
		hcancel()
		if code := <-done; code != ExitOK || strings.Contains(hb.String(), warning) != c.warn {
			t.Errorf("heartbeat at %s: exit %d; want exit 0, warned %v:\n%s", c.endpoint, code, c.warn, hb.String())
		}
	}
}
