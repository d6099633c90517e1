// Command filefloor is the file floor of the change-path harness
// (../shared/perf, issue 13; bench/changepath.sh runs it): the least a
// process that keeps etcd keys in a file can do. It lists the prefix once,
// then, for each watch response, writes every value it holds, as etcd
// sent it, one per line, into a temp file and renames that over the
// snapshot path: no decoding, no validation, no fsync. What it costs beyond
// the harness's in-process watcher (the etcd floor) is a second process
// woken by etcd, a file written and renamed, and the reader woken by
// inotify; an agent that publishes a file cannot do less, so regiond's
// put → file figures are read against it too.
//
// It is a harness peer, not a sidecar to run (a value that is not one line
// stays as it is). ETCD_ENDPOINT (host:port), PREFIX and SNAPSHOT come from
// the harness.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "filefloor:", err)
		os.Exit(1)
	}
}

func run() error {
	endpoint, prefix, path := os.Getenv("ETCD_ENDPOINT"), os.Getenv("PREFIX"), os.Getenv("SNAPSHOT")
	if endpoint == "" || prefix == "" || path == "" {
		return fmt.Errorf("set ETCD_ENDPOINT, PREFIX and SNAPSHOT (the harness does)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	defer cli.Close()
	return mirror(ctx, cli, prefix, path)
}

// mirror keeps path holding every value under prefix until ctx is done
// (then it returns nil) or the list, the watch or a write fails.
//
// It lists and watches by hand rather than with clientv3/mirror: the
// Syncer's base sync asks for the revision first and then reads pages of
// 1,000 keys, sorted, where one Get does; a floor must not do more than
// it needs to, or regiond's sync would be read against a slower peer.
func mirror(ctx context.Context, cli *clientv3.Client, prefix, path string) error {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("list %s: %w", prefix, err)
	}
	state := make(map[string][]byte, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		state[string(kv.Key)] = kv.Value
	}
	var buf []byte
	if buf, err = publish(path, state, buf); err != nil {
		return err
	}
	for wr := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", prefix, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				delete(state, string(ev.Kv.Key))
			} else {
				state[string(ev.Kv.Key)] = ev.Kv.Value
			}
		}
		if buf, err = publish(path, state, buf); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil // stopped: the watch channel closes when ctx is done
	}
	return fmt.Errorf("watch %s: closed while running (the client closed)", prefix)
}

// publish replaces path with state's values, one per line (in no
// particular order), through path.tmp and a rename; it returns buf, grown
// to hold them, for the next call.
func publish(path string, state map[string][]byte, buf []byte) ([]byte, error) {
	buf = buf[:0]
	for _, v := range state {
		buf = append(append(buf, v...), '\n')
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf, 0o644); err != nil {
		return buf, fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return buf, fmt.Errorf("publish %s: %w", path, err)
	}
	return buf, nil
}
