//go:build linux && dev && !nodev

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/routing"
)

// TestFloodUnderALowFDLimit: regiond runs with a file descriptor limit of
// 128 (ulimit -n) and a client opens 300 connections, each with a blocking
// query that never ends. The API's caps are fitted to the limit less the
// reserve, so regiond never runs out of descriptors: plain resolves on new
// connections answer, and the snapshot file follows each of three changes
// (each write opens files; without the reserve the accepted connections
// take every descriptor and the writes fail); the refusals are counted.
func TestFloodUnderALowFDLimit(t *testing.T) {
	bin := buildRegiond(t, "dev")
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	fleettest.Load(t, cli, "/regiond/v1/routing/")
	dir := t.TempDir()
	listen, snap := freeAddr(t), filepath.Join(dir, "table.json")
	logPath := filepath.Join(dir, "regiond.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logs := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	cmd := exec.Command("sh", "-c", `ulimit -n 128 && exec "$0" "$@"`, bin, "--endpoints", srv.Endpoints[0],
		"--listen", listen, "--socket", filepath.Join(dir, "run", "regiond.sock"), "--snapshot", snap,
		"--node", "node-fd", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		resp, err := hc.Get("http://" + listen + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ready := false
	for i := 0; i < 400 && !ready; i++ {
		time.Sleep(25 * time.Millisecond)
		c, _ := get("/readyz")
		ready = c == 200
	}
	if !ready {
		t.Fatalf("regiond not ready\n%s", logs())
	}

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	answered := make(chan int, 300)
	for i := 0; i < 300; i++ {
		c, err := net.Dial("tcp", listen)
		if err != nil {
			t.Fatalf("flood connection %d: %v", i, err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /v1/resolve?country=DE&min_revision=999999999&wait=5m HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		go func() {
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				answered <- resp.StatusCode
			}
		}()
	}
	for i := 0; i < 3; i++ {
		if c, body := get("/v1/resolve?country=DE&key=k"); c != 200 {
			t.Fatalf("plain resolve during the flood: %d %s\n%s", c, body, logs())
		}
		p, err := cli.Put(context.Background(), "/regiond/v1/routing/routes/DE",
			fmt.Sprintf(`{"targets":[{"pool":"eu-north","weight":%d}]}`, 50+i))
		if err != nil {
			t.Fatal(err)
		}
		if !snapshotReaches(snap, p.Header.Revision) {
			t.Fatalf("change %d (revision %d) did not reach the snapshot file during the flood\n%s", i, p.Header.Revision, logs())
		}
	}
	_, metrics := get("/metrics")
	if n := metricValue(metrics, "regiond_api_blocking_queries_refused_total"); n < 1 {
		t.Fatalf("regiond_api_blocking_queries_refused_total = %v during the flood, want refusals\n%s", n, logs())
	}
	if strings.Contains(logs(), "too many open files") {
		t.Fatalf("regiond ran out of file descriptors:\n%s", logs())
	}
}

// snapshotReaches waits (bounded) for the snapshot file at path to hold
// revision rev or later.
func snapshotReaches(path string, rev int64) bool {
	for i := 0; i < 400; i++ {
		if b, err := os.ReadFile(path); err == nil {
			if tb, _, err := routing.LoadTableJSON(b); err == nil && tb.Revision() >= rev {
				return true
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	return false
}

// metricValue is the value of an unlabelled series in a /metrics text, or
// -1.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
