package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// BurstRun is one burst of puts issued as fast as the client can.
type BurstRun struct {
	// Puts is the number of puts in the burst (-burst).
	Puts int `json:"puts"`
	// Workers is the number of concurrent putters, one country route each
	// (-burst-workers).
	Workers int `json:"workers"`
	// DurationMS is from the first put to the ack of the last one.
	DurationMS float64 `json:"duration_ms"`
	// PutsPerSec is Puts over that duration: the rate the client achieved.
	PutsPerSec float64 `json:"puts_per_sec"`
	// LastAckToFileMS is from the ack of the last put to the snapshot file
	// holding its revision (or a later one).
	LastAckToFileMS float64 `json:"last_ack_to_file_ms"`
	// LastAckToTableMS is from the ack of the last put to /v1/status
	// showing its revision (polled every 0.5 ms): the mirror caught up.
	// LastAckToFileMS minus this is the snapshot writer's share.
	LastAckToTableMS float64 `json:"last_ack_to_table_ms"`
	// Rewrites is how many times the file was replaced from the first put
	// until it showed the last one, counted by inotify.
	Rewrites int `json:"rewrites"`
	// RewritesMetric is the change of regiond_snapshot_writes_total over
	// the burst.
	RewritesMetric int `json:"rewrites_metric"`
	// TableSwaps is the change of regiond_watch_table_swaps_total: how many
	// tables the agent compiled and swapped in for the burst.
	TableSwaps int `json:"table_swaps"`
	// ForeignCPUPct: see LatencyRun.
	ForeignCPUPct float64 `json:"foreign_cpu_pct"`
}

// setupBurst picks one country route per worker (PL excluded: it is the
// isolated-put route) and the two values each alternates between.
func (e *latencyEnv) setupBurst(ctx context.Context, workers int, countryRoutes []string) error {
	e.burstVariants, e.burstNext = map[string][2][]byte{}, map[string]int{}
	for _, r := range countryRoutes {
		if len(e.burstRoutes) == workers {
			break
		}
		if r == e.route {
			continue
		}
		v, err := routeVariants(e.exampleCfg(), r, "eu-central", "eu-west")
		if err != nil {
			return err
		}
		next, err := e.nextVariant(ctx, r, v)
		if err != nil {
			return err
		}
		e.burstRoutes = append(e.burstRoutes, r)
		e.burstVariants[r], e.burstNext[r] = v, next
	}
	if len(e.burstRoutes) < workers {
		return fmt.Errorf("-burst-workers %d: the example has only %d country routes besides %s", workers, len(e.burstRoutes), e.route)
	}
	return nil
}

// runBurst issues n puts from the workers, one route each, every put
// changing its route's weights, and times the file catching up.
func (e *latencyEnv) runBurst(ctx context.Context, n int) (BurstRun, error) {
	workers := len(e.burstRoutes)
	out := BurstRun{Puts: n, Workers: workers}
	writes0, err := e.ag.metric("regiond_snapshot_writes_total")
	if err != nil {
		return out, err
	}
	swaps0, err := e.ag.metric("regiond_watch_table_swaps_total")
	if err != nil {
		return out, err
	}
	for len(e.fw.C) > 0 { // observations of earlier phases
		<-e.fw.C
	}
	var (
		mu      sync.Mutex
		lastAck time.Time
		maxRev  int64
		firstEr error
		wg      sync.WaitGroup
	)
	start := time.Now()
	for w, route := range e.burstRoutes {
		count := n / workers
		if w < n%workers {
			count++
		}
		key, vals, next := e.prefix+"routes/"+route, e.burstVariants[route], e.burstNext[route]
		e.burstNext[route] = (next + count) % 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < count; j++ {
				resp, err := e.cli.Put(ctx, key, string(vals[(next+j)%2]))
				now := time.Now()
				mu.Lock()
				if err != nil && firstEr == nil {
					firstEr = err
				}
				if err == nil {
					if now.After(lastAck) {
						lastAck = now
					}
					maxRev = max(maxRev, resp.Header.Revision)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstEr != nil {
		return out, fmt.Errorf("burst put: %w", firstEr)
	}
	out.DurationMS = ms(lastAck.Sub(start))
	out.PutsPerSec = float64(n) / lastAck.Sub(start).Seconds()
	var st struct {
		Revision int64 `json:"revision"`
	}
	if err := e.ag.waitFor(ctx, "status at the burst's last revision", 10*time.Second, 500*time.Microsecond, func() bool {
		code, b, err := e.ag.get("/v1/status")
		return err == nil && code == 200 && json.Unmarshal(b, &st) == nil && st.Revision >= maxRev
	}); err != nil {
		return out, err
	}
	out.LastAckToTableMS = ms(time.Since(lastAck))
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case o := <-e.fw.C:
			if o.at.Before(start) {
				continue
			}
			out.Rewrites += o.n
			if o.rev < maxRev {
				continue
			}
			out.LastAckToFileMS = ms(o.at.Sub(lastAck))
			time.Sleep(50 * time.Millisecond) // let the writer count the write it just renamed
			writes1, err := e.ag.metric("regiond_snapshot_writes_total")
			if err != nil {
				return out, err
			}
			swaps1, err := e.ag.metric("regiond_watch_table_swaps_total")
			if err != nil {
				return out, err
			}
			out.RewritesMetric, out.TableSwaps = int(writes1-writes0), int(swaps1-swaps0)
			e.lastRev = maxRev
			return out, nil
		case <-timeout.C:
			return out, fmt.Errorf("the snapshot file did not show the burst's last revision %d within 10s\n%s", maxRev, e.ag.logTail())
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}
