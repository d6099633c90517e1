package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SyncRun is one start of a fresh agent (no snapshot file to seed from)
// against a store of many keys.
type SyncRun struct {
	// Keys is the number of keys under the store's routing prefix.
	Keys int `json:"keys"`
	// ListMS is regiond_watch_last_list_duration_seconds: the paged Get,
	// the compile and the swap of the first table.
	ListMS float64 `json:"list_ms"`
	// GetMS is the same paged Get (1000 keys a page, at one revision) done
	// by the bench's client just before: etcd's share of ListMS.
	GetMS float64 `json:"get_ms"`
	// StartToReadyMS is from starting the process to /readyz answering 200
	// (process start, etcd dial, list, compile), polled every 2 ms.
	StartToReadyMS float64 `json:"start_to_ready_ms"`
	// StartToFileMS is from starting the process to the snapshot file
	// holding the store's revision.
	StartToFileMS float64 `json:"start_to_file_ms"`
	// PeakRSSMiB is VmHWM of the agent once synced and the file written.
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// RSSMiB is VmRSS then.
	RSSMiB float64 `json:"rss_mib"`
	// AnonMiB is RSSMiB's anonymous memory (Go heap, stacks).
	AnonMiB float64 `json:"rss_anon_mib"`
	// FileMiB is RSSMiB's pages of the executable mapped from the page
	// cache.
	FileMiB float64 `json:"rss_file_mib"`
	// FileBytes is the size of the snapshot file.
	FileBytes int `json:"file_bytes"`
	// ForeignCPUPct: see LatencyRun.
	ForeignCPUPct float64 `json:"foreign_cpu_pct"`
}

// pagedGet reads every key under prefix at one revision, 1000 keys a page,
// as the mirror does, and returns how long it took.
func pagedGet(ctx context.Context, cli *clientv3.Client, prefix string) (time.Duration, int, error) {
	start := time.Now()
	end := clientv3.GetPrefixRangeEnd(prefix)
	key, rev, n := prefix, int64(0), 0
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, key, opts...)
		if err != nil {
			return 0, 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		n += len(resp.Kvs)
		if !resp.More || len(resp.Kvs) == 0 {
			return time.Since(start), n, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// runSync starts a fresh agent under prefix and measures its first sync.
func runSync(ctx context.Context, cli *clientv3.Client, o agentOpts, keys int, storeRev int64) (SyncRun, error) {
	out := SyncRun{Keys: keys}
	d, n, err := pagedGet(ctx, cli, o.prefix+"/routing/")
	if err != nil {
		return out, err
	}
	if n != keys {
		return out, fmt.Errorf("the sync store has %d keys, want %d", n, keys)
	}
	out.GetMS = ms(d)
	ag, err := startAgent(o)
	if err != nil {
		return out, err
	}
	defer ag.stop(10 * time.Second)
	ready := func() bool {
		code, _, err := ag.get("/readyz")
		return err == nil && code == 200
	}
	// Polled every 2 ms: tighter polling would take CPU from the list.
	if err := ag.waitFor(ctx, "/readyz 200", 60*time.Second, 2*time.Millisecond, ready); err != nil {
		return out, err
	}
	out.StartToReadyMS = ms(time.Since(ag.started))
	var st struct {
		Revision int64             `json:"revision"`
		Skipped  []json.RawMessage `json:"skipped"`
	}
	synced := func() bool {
		code, b, err := ag.get("/v1/status")
		return err == nil && code == 200 && json.Unmarshal(b, &st) == nil && st.Revision >= storeRev
	}
	if err := ag.waitFor(ctx, "status at revision "+strconv.FormatInt(storeRev, 10), 30*time.Second, time.Millisecond, synced); err != nil {
		return out, err
	}
	if len(st.Skipped) > 0 {
		return out, fmt.Errorf("the agent refused %d keys of the sync dataset, e.g. %s", len(st.Skipped), st.Skipped[0])
	}
	fileOK := func() bool {
		rev, err := readRevision(o.snapshot)
		return err == nil && rev >= storeRev
	}
	if err := ag.waitFor(ctx, "snapshot file at revision "+strconv.FormatInt(storeRev, 10), 30*time.Second, time.Millisecond, fileOK); err != nil {
		return out, err
	}
	out.StartToFileMS = ms(time.Since(ag.started))
	sec, err := ag.metric("regiond_watch_last_list_duration_seconds")
	if err != nil {
		return out, err
	}
	out.ListMS = sec * 1000
	hwm, err := procStatus(ag.pid(), "VmHWM")
	if err != nil {
		return out, err
	}
	rss, err := procStatus(ag.pid(), "VmRSS")
	if err != nil {
		return out, err
	}
	out.PeakRSSMiB, out.RSSMiB = float64(hwm)/(1<<20), float64(rss)/(1<<20)
	if anon, err := procStatus(ag.pid(), "RssAnon"); err == nil {
		out.AnonMiB = float64(anon) / (1 << 20)
	}
	if file, err := procStatus(ag.pid(), "RssFile"); err == nil {
		out.FileMiB = float64(file) / (1 << 20)
	}
	if b, err := readFileSize(o.snapshot); err == nil {
		out.FileBytes = b
	}
	return out, nil
}

func syncAgentOpts(base agentOpts, work, shm string, i int) agentOpts {
	o := base
	o.dir = filepath.Join(work, fmt.Sprintf("sync-%d", i))
	o.snapshot = filepath.Join(shm, fmt.Sprintf("sync-%d", i), "table.json")
	o.node = fmt.Sprintf("bench-sync-%d", i)
	if base.cpuprofile != "" {
		o.cpuprofile = fmt.Sprintf("%s.sync-%d", base.cpuprofile, i)
	}
	return o
}
