package agent_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/logbuf"
)

// socketGet answers GET path over the unix socket at sock, or an error.
func socketGet(sock, path string) (int, error) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	resp, err := c.Get("http://regiond" + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// runOffline runs an agent of cfg (its etcd unreachable: the API serves
// regardless) until the test ends or the returned stop is called, once
// its socket answers.
func runOffline(t *testing.T, cfg agent.Config) (stop func()) {
	t.Helper()
	h := runAgent(t, t.TempDir(), cfg)
	waitFor(t, "the agent's socket answering", func() bool {
		code, err := socketGet(cfg.Socket, "/healthz")
		return err == nil && code == 200
	})
	return h.stop
}

// TestSocketInUseIsRefused: a second agent given the --socket of a
// running one does not start (the error says the socket is in use), and
// the first keeps its socket; a socket file nothing answers on (a crashed
// run's) is taken over; an agent removes its socket file at exit only
// while the file is still the one it made.
func TestSocketInUseIsRefused(t *testing.T) {
	dir := t.TempDir()
	first := offlineConfig(filepath.Join(dir, "first"))
	first.Socket = filepath.Join(dir, "run", "regiond.sock")
	stopFirst := runOffline(t, first)

	second := offlineConfig(filepath.Join(dir, "second"))
	second.Socket = first.Socket
	if a, err := agent.New(second); err == nil {
		stopOffline(t, a)
		t.Fatal("a second agent started on the socket of a running one")
	} else if !strings.Contains(err.Error(), "is in use") || !strings.Contains(err.Error(), first.Socket) {
		t.Errorf("error %q does not say that the socket %s is in use", err, first.Socket)
	}
	if code, err := socketGet(first.Socket, "/healthz"); err != nil || code != 200 {
		t.Fatalf("the first agent's socket after the refused start: %d, %v", code, err)
	}
	stopFirst()
	if _, err := os.Lstat(first.Socket); !os.IsNotExist(err) {
		t.Errorf("socket file after a clean stop: %v, want it removed", err)
	}

	// A crashed run's socket: the file is there, nothing answers.
	ln, err := net.Listen("unix", first.Socket)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := socketGet(first.Socket, "/healthz"); err == nil {
		t.Fatal("the stale socket answers")
	}
	stopSecond := runOffline(t, second)

	// Its file replaced by another process's socket: left at exit.
	if err := os.Remove(second.Socket); err != nil {
		t.Fatal(err)
	}
	other, err := net.Listen("unix", second.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	stopSecond()
	if _, err := os.Lstat(second.Socket); err != nil {
		t.Errorf("the agent removed a socket file it had not made: %v", err)
	}
}

// TestSnapshotInUseIsRefused: a second agent given the --snapshot of a
// running one, with its own --socket and listener, does not start (the
// error names the files' lock and its holder): it wrote over the first's
// files, each its own table in turn, and removed the first's prepared temp
// files as leftovers (the host review). The first keeps its files; once it
// has stopped, an agent on the same --snapshot starts.
func TestSnapshotInUseIsRefused(t *testing.T) {
	dir := t.TempDir()
	first := offlineConfig(filepath.Join(dir, "first"))
	first.Snapshot = filepath.Join(dir, "shm", "table.json")
	stopFirst := runOffline(t, first)

	second := offlineConfig(filepath.Join(dir, "second"))
	second.Snapshot = first.Snapshot
	a, err := agent.New(second)
	if err == nil {
		stopOffline(t, a)
		t.Fatal("a second agent started on the --snapshot of a running one")
	}
	if want := fmt.Sprintf("another regiond writes these files (process %d holds %s)", os.Getpid(), filepath.Join(dir, "shm", ".table.json.lock")); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want %q", err, want)
	}
	stopFirst()
	stopSecond := runOffline(t, second)
	stopSecond()
}

// TestDeletedSocketIsMadeAgain: a socket file deleted while the agent
// runs (by hand, or a cleaner of /run) is made again within seconds and
// answers (the API had been unreachable at the path, with no word, until
// a restart: the host review); a clean stop removes the new file.
func TestDeletedSocketIsMadeAgain(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	cfg := offlineConfig(t.TempDir())
	stop := runOffline(t, cfg)
	if err := os.Remove(cfg.Socket); err != nil {
		t.Fatal(err)
	}
	if _, err := socketGet(cfg.Socket, "/healthz"); err == nil {
		t.Fatal("the socket answers with its file deleted")
	}
	waitFor(t, "the socket made again and answering", func() bool {
		code, err := socketGet(cfg.Socket, "/healthz")
		return err == nil && code == 200
	})
	if fi, err := os.Lstat(cfg.Socket); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("the socket made again: %v, %v; want mode 0660", fi, err)
	}
	stop()
	if _, err := os.Lstat(cfg.Socket); !os.IsNotExist(err) {
		t.Errorf("socket file after a clean stop: %v, want it removed", err)
	}
}

// TestStopWithAClientThatDoesNotRead: a client on the socket that asked
// for the table (over a megabyte: 4,000 pools more than the example, past
// any socket buffer, so the answer is still being written at the stop)
// and reads nothing does not make a clean stop fail: after the grace its
// connection is closed, Run returns nil, "regiond agent stopped" is
// logged (the shutdown review: Run returned "context deadline exceeded",
// regiond exited 1 and systemd marked the unit failed).
func TestStopWithAClientThatDoesNotRead(t *testing.T) {
	t.Parallel() // mostly idle, waiting out the shutdown's grace
	srv, cli := exampleEtcd(t)
	var last int64
	note := strings.Repeat("n", 250)
	for i := 0; i < 4000; i += 100 {
		var ops []clientv3.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%spools/big-%04d", prefix, j),
				fmt.Sprintf(`{"host":"big-%04d.example.net:443","residency":"eu","attrs":{"note":"%s"}}`, j, note)))
		}
		resp, err := cli.Txn(context.Background()).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Header.Revision
	}
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, "node-slow")
	cfg.Socket = filepath.Join(dir, "run", "regiond.sock")
	var logs logbuf.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the big table served", func() bool { m := a.Mirror(); return m != nil && m.Table() != nil && m.Table().Revision() >= last })
	c, err := net.Dial("unix", cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Repeat("GET /v1/table HTTP/1.1\r\nHost: x\r\n\r\n", 2))); err != nil {
		t.Fatal(err)
	}
	// The first bytes of the first answer: the server answers, and will
	// block on the rest.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop within 30 s")
	}
	done <- nil // for the deferred receive
	if err != nil || !strings.Contains(logs.String(), "regiond agent stopped") || !strings.Contains(logs.String(), "closed") {
		t.Fatalf("a clean stop with a client that does not read: Run returned %v; want nil, the connection closed and said\n%s", err, logs.String())
	}
}
