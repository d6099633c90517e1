package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// echoFloor measures the floor of --wait-converged's agents' share in the
// same run: one plain client per kept agent, in the bench, on that agent's
// endpoint, watches a trigger key and puts an ack key of its own at each
// event, back to back for writes triggers. A sample runs from the bench's
// watch seeing the trigger's commit to its watch on the acks seeing the
// last of them: etcd's fan-out to n watchers, n puts, and their fan-in to
// one watcher, which any agent pays to report a change. The keys are
// outside routing/, so the agents are not woken.
func echoFloor(ctx context.Context, o options, cli *clientv3.Client, endpoints []string, writes int) ([]time.Duration, error) {
	prefix := fleetRoot + "/bench-echo/"
	trigger, acks := prefix+"trigger", prefix+"ack/"
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		cli.Delete(dctx, prefix, clientv3.WithPrefix())
		dcancel()
	}()

	commits, err := watchRevisions(ctx, cli, trigger)
	if err != nil {
		return nil, err
	}
	ackCh := make(chan fanObs, 1<<16)
	err = watchEvents(ctx, cli, acks, func(ev *clientv3.Event, at time.Time) {
		slot, _ := strconv.Atoi(strings.TrimPrefix(string(ev.Kv.Key), acks))
		rev, _ := strconv.ParseInt(string(ev.Kv.Value), 10, 64)
		ackCh <- fanObs{slot: slot, rev: rev, at: at}
	}, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("echo floor: %w", err)
	}

	for i, ep := range endpoints {
		ec, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("echo floor: client %d at %s: %w", i, ep, err)
		}
		defer ec.Close()
		key := fmt.Sprintf("%s%d", acks, i)
		err = watchEvents(ctx, ec, trigger, func(ev *clientv3.Event, _ time.Time) {
			ec.Put(ctx, key, strconv.FormatInt(ev.Kv.ModRevision, 10))
		})
		if err != nil {
			return nil, fmt.Errorf("echo floor: watcher %d at %s: %w", i, ep, err)
		}
	}

	var out []time.Duration
	for i := 0; i < writes; i++ {
		drain(ackCh)
		resp, err := cli.Put(ctx, trigger, strconv.Itoa(i))
		if err != nil {
			return out, fmt.Errorf("echo floor: put %d: %w", i, err)
		}
		rev := resp.Header.Revision
		commit, err := waitObs(ctx, commits, rev, 5*time.Second, "the trigger's watch")
		if err != nil {
			return out, err
		}
		seen, err := collect(ctx, ackCh, len(endpoints), rev, 5*time.Second, "echo watchers")
		if err != nil {
			return out, err
		}
		last := commit.at
		for _, at := range seen {
			if at.After(last) {
				last = at
			}
		}
		out = append(out, last.Sub(commit.at))
		if (i+1)%10 == 0 {
			logf(o, "fleet: echo floor %d/%d; last: commit → last ack %.1f ms", i+1, writes, ms(out[len(out)-1]))
		}
	}
	return out, nil
}

// watchRevisions watches key and sends each event's revision and the
// moment the bench saw it.
func watchRevisions(ctx context.Context, cli *clientv3.Client, key string) (chan fileObs, error) {
	ch := make(chan fileObs, 1024)
	err := watchEvents(ctx, cli, key, func(ev *clientv3.Event, at time.Time) {
		ch <- fileObs{rev: ev.Kv.ModRevision, at: at, n: 1}
	})
	return ch, err
}

// watchEvents watches key with opts, waits until etcd created the watch,
// then calls each for every event, with the moment the bench saw it, until
// ctx ends.
func watchEvents(ctx context.Context, cli *clientv3.Client, key string, each func(*clientv3.Event, time.Time), opts ...clientv3.OpOption) error {
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), key, append(opts, clientv3.WithCreatedNotify())...)
	if first, ok := <-wch; !ok || !first.Created {
		return fmt.Errorf("watch of %s not created: %v", key, first.Err())
	}
	go func() {
		for resp := range wch {
			now := time.Now()
			for _, ev := range resp.Events {
				each(ev, now)
			}
		}
	}()
	return nil
}
