package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/devetcd"
)

// TestMirrorKeepsEveryValue runs the file floor against a real etcd: the
// file holds the listed values, then follows puts and deletes, and the
// mirror stops cleanly with its context. Were it to miss a change, the
// harness's figures against it would be of a peer that does less than its
// job.
func TestMirrorKeepsEveryValue(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for k, v := range map[string]string{"/p/a": `{"m":"a1"}`, "/p/b": `{"m":"b1"}`, "/other": `{"m":"x"}`} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "table.txt")
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mirror(mctx, cli, "/p/", path) }()

	waitFor(t, path, `{"m":"a1"}`, `{"m":"b1"}`)
	if _, err := cli.Put(ctx, "/p/c", `{"m":"c1"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/p/a", `{"m":"a2"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, "/p/b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, path, `{"m":"a2"}`, `{"m":"c1"}`)

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("mirror stopped with %v, want nil", err)
		}
	case <-ctx.Done():
		t.Fatal("mirror did not stop with its context")
	}
}

// TestMirrorSaysWhenTheWatchEnds: a watch that ends while the floor runs
// (its client closed) is an error naming it, not a quiet stop that would
// leave the harness reading a file nobody updates.
func TestMirrorSaysWhenTheWatchEnds(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/p/a", `{"m":"a1"}`); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "table.txt")
	done := make(chan error, 1)
	go func() { done <- mirror(ctx, cli, "/p/", path) }()
	waitFor(t, path, `{"m":"a1"}`)
	cli.Close()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "watch /p/") {
			t.Fatalf("mirror after its client closed = %v, want an error naming the watch of /p/", err)
		}
	case <-ctx.Done():
		t.Fatal("mirror did not return after its client closed")
	}
}

// waitFor waits (bounded) until path holds exactly the lines want, in
// any order.
func waitFor(t *testing.T, path string, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		got = strings.Fields(string(b))
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("%s holds %q, want %q", path, got, want)
}

// TestRunNamesMissingEnvironment: without the harness's variables the
// floor says which it needs instead of dialling a default.
func TestRunNamesMissingEnvironment(t *testing.T) {
	t.Setenv("ETCD_ENDPOINT", "")
	t.Setenv("PREFIX", "/p/")
	t.Setenv("SNAPSHOT", "")
	err := run()
	if err == nil || !strings.Contains(err.Error(), "ETCD_ENDPOINT, PREFIX and SNAPSHOT") {
		t.Fatalf("run() = %v, want an error naming ETCD_ENDPOINT, PREFIX and SNAPSHOT", err)
	}
}
