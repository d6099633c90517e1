package main

// The front phase (-phases front): requests/s and latency of the PHP front
// door (examples/php/example.php) under a real php-fpm (pm = static) behind
// nginx, driven by wrk, A/B against the same controller without the routing
// lookup, in one run, with the full-JSON reader and an APCu whole-table
// cache side by side. See bench/README.md, "Front phase".

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/internal/phpfront"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/internal/snapshot"
	"github.com/regiond/regiond/routing"
)

// frontVariant is one front controller measured by the front phase.
type frontVariant struct {
	Name     string `json:"name"`
	Script   string `json:"script"`
	Snapshot string `json:"snapshot"`
	// OpenBasedir runs the pool with open_basedir.
	OpenBasedir bool `json:"open_basedir"`
	srv         *phpfront.Server
	// Per round: p50 and p99 latency (µs) and requests/s (wrk); p50 and
	// p99 of the lookup's own time measured in PHP (ms, X-Regiond-Lookup-Ns)
	// and p50 of the response time (µs) in the interleaved sampling.
	P50, P99, RPS []float64
	InP50, InP99  []float64
	SeqP50        []float64
	client        *http.Client
}

// frontOptions are the front phase's flags.
type frontOptions struct {
	duration    time.Duration
	connections int
	children    int
	samples     int
}

var frontOpts frontOptions

func frontFlags() {
	flag.DurationVar(&frontOpts.duration, "front-duration", 5*time.Second, "front phase: wrk's duration per variant per run")
	flag.IntVar(&frontOpts.connections, "front-connections", 1, "front phase: wrk's connections (1: latency without queueing)")
	flag.IntVar(&frontOpts.children, "front-children", 2, "front phase: php-fpm pm.max_children per variant")
	flag.IntVar(&frontOpts.samples, "front-samples", 2000, "front phase: sequential requests per variant per run whose in-PHP lookup time is read")
}

// runFront runs the front phase and prints its report.
func runFront(ctx context.Context, o options) error {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		return fmt.Errorf("front phase: wrk not found (apt-get install -y wrk): %w", err)
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "regiond-bench-front-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	shm := work
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if shm, err = os.MkdirTemp("/dev/shm", "regiond-bench-front-"); err != nil {
			return err
		}
		defer os.RemoveAll(shm)
	}
	front := filepath.Join(work, "front")
	if err := os.MkdirAll(front, 0o755); err != nil {
		return err
	}
	for src, dst := range map[string]string{
		"examples/php/example.php":      "example.php",
		"examples/php/RegiondTable.php": "RegiondTable.php",
		"examples/php/ThrottledLog.php": "ThrottledLog.php",
		"bench/php/front-nolookup.php":  "front-nolookup.php",
		"bench/php/front-apcu.php":      "front-apcu.php",
		"bench/php/front-floor.php":     "front-floor.php",
	} {
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(front, dst), b, 0o644); err != nil {
			return err
		}
	}
	if err := writeTimedExample(filepath.Join(root, "examples/php/example.php"), filepath.Join(front, "example.php")); err != nil {
		return err
	}
	tab, err := frontTable(filepath.Join(root, o.example))
	if err != nil {
		return err
	}
	withIdx, jsonOnly := filepath.Join(shm, "idx", "table.json"), filepath.Join(shm, "json", "table.json")
	writeSnap := func() error {
		now := time.Now()
		h := routing.JSONHeader{WrittenAt: now, SyncedAt: now}
		js, err := tab.JSONWith(nil, h)
		if err != nil {
			return err
		}
		idx, err := snapindex.Encode(nil, tab, h)
		if err != nil {
			return err
		}
		for _, p := range []string{withIdx, jsonOnly} {
			if err := atomicfile.WriteFile(p, js, 0o644); err != nil {
				return err
			}
		}
		return atomicfile.WriteFile(snapshot.IndexPath(withIdx), idx, 0o644)
	}
	if err := writeSnap(); err != nil {
		return err
	}
	// Keep synced_at fresh (a rewrite every 10 s, as a healthy agent's
	// refresh), so no variant turns stale during the run.
	refreshCtx, stopRefresh := context.WithCancel(ctx)
	defer stopRefresh()
	go func() {
		for {
			select {
			case <-refreshCtx.Done():
				return
			case <-time.After(10 * time.Second):
				writeSnap()
			}
		}
	}()

	vs := []*frontVariant{
		{Name: "no lookup (baseline)", Script: "front-nolookup.php", Snapshot: withIdx},
		{Name: "index (table.idx)", Script: "example.php", Snapshot: withIdx},
		{Name: "index floor (no checks)", Script: "front-floor.php", Snapshot: withIdx},
		{Name: "index + open_basedir", Script: "example.php", Snapshot: withIdx, OpenBasedir: true},
		{Name: "full JSON (no table.idx)", Script: "example.php", Snapshot: jsonOnly},
		{Name: "APCu whole table", Script: "front-apcu.php", Snapshot: jsonOnly},
	}
	for i, v := range vs {
		dir := filepath.Join(work, "srv"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		// The tables are the bench's own: their owner is its user.
		v.srv, err = phpfront.Start(ctx, phpfront.Config{Dir: dir, Script: filepath.Join(front, v.Script),
			Snapshot: v.Snapshot, Children: frontOpts.children, OpenBasedir: v.OpenBasedir,
			Params: map[string]string{"REGIOND_OWNER": strconv.Itoa(os.Geteuid())}})
		if err != nil {
			return fmt.Errorf("front phase: %s: %w", v.Name, err)
		}
		defer v.srv.Close()
		if err := frontCheck(v); err != nil {
			return err
		}
	}
	logf(o, "front: %d variants, %d runs of %v each, wrk -c%d, php-fpm pm=static children=%d", len(vs), o.runs,
		frontOpts.duration, frontOpts.connections, frontOpts.children)
	for _, v := range vs { // warm up: OPcache, APCu, the page cache
		if _, err := runWrk(ctx, wrk, v.srv.URL, time.Second); err != nil {
			return fmt.Errorf("front phase: %s: %w", v.Name, err)
		}
	}
	for r := range o.runs {
		for k := range vs {
			v := vs[(k+r)%len(vs)] // rotate the order: drift spreads over every variant
			res, err := runWrk(ctx, wrk, v.srv.URL, frontOpts.duration)
			if err != nil {
				return fmt.Errorf("front phase: %s: %w", v.Name, err)
			}
			v.P50, v.P99, v.RPS = append(v.P50, res.p50), append(v.P99, res.p99), append(v.RPS, res.rps)
			logf(o, "front: run %d %-26s wrk p50 %7.1f µs  p99 %7.1f µs  %8.0f req/s", r+1, v.Name, res.p50, res.p99, res.rps)
		}
		if err := sampleInterleaved(ctx, vs, frontOpts.samples); err != nil {
			return err
		}
		for _, v := range vs {
			logf(o, "front: run %d %-26s interleaved p50 %7.1f µs; in PHP: lookup p50 %6.1f µs p99 %6.1f µs",
				r+1, v.Name, v.SeqP50[r], v.InP50[r]*1e3, v.InP99[r]*1e3)
		}
	}
	printFront(os.Stdout, vs, o.runs)
	return nil
}

// writeTimedExample copies example.php, timing its lookup (load and
// resolve) with hrtime and sending the time in X-Regiond-Lookup-Ns.
func writeTimedExample(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	const lookup = "$d = RegiondTable::load($snapshot, owner: $owner)->resolve($country, $viewer);"
	if !bytes.Contains(b, []byte(lookup)) {
		return fmt.Errorf("front phase: %s no longer has the line %q to time", src, lookup)
	}
	timed := "$lookupT0 = hrtime(true);\n    " + lookup + "\n    header('X-Regiond-Lookup-Ns: ' . (hrtime(true) - $lookupT0));"
	return os.WriteFile(dst, bytes.Replace(b, []byte(lookup), []byte(timed), 1), 0o644)
}

// sampleInterleaved sends n rounds of one request to every variant, one
// request at a time, in an order rotated from round to round, so that every
// variant meets the same machine. It appends each variant's p50 response
// time (µs, request written to body read, keep-alive) and the distribution
// of the lookup times the controller reports.
func sampleInterleaved(ctx context.Context, vs []*frontVariant, n int) error {
	took := make([][]time.Duration, len(vs))
	lookup := make([][]time.Duration, len(vs))
	for i := range n {
		for k := range vs {
			j := (k + i) % len(vs)
			v := vs[j]
			if v.client == nil {
				v.client = &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, v.srv.URL+"/watch/1", nil)
			req.Header.Set("CF-IPCountry", "PL")
			req.Header.Set("Cookie", "viewer=v-"+strconv.Itoa(i))
			t0 := time.Now()
			resp, err := v.client.Do(req)
			if err != nil {
				return fmt.Errorf("front phase: %s: %w", v.Name, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			took[j] = append(took[j], time.Since(t0))
			ns, err := strconv.ParseInt(resp.Header.Get("X-Regiond-Lookup-Ns"), 10, 64)
			if err != nil {
				return fmt.Errorf("front phase: %s: no X-Regiond-Lookup-Ns (status %d)", v.Name, resp.StatusCode)
			}
			lookup[j] = append(lookup[j], time.Duration(ns))
		}
	}
	for j, v := range vs {
		in := dist(lookup[j])
		v.InP50, v.InP99 = append(v.InP50, in.P50), append(v.InP99, in.P99)
		v.SeqP50 = append(v.SeqP50, dist(took[j]).P50*1e3)
	}
	return nil
}

// frontTable compiles the example fleet, as the agent would serve it.
func frontTable(example string) (*routing.Table, error) {
	b, err := os.ReadFile(example)
	if err != nil {
		return nil, err
	}
	cfg, err := routing.ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", example, err)
	}
	return routing.CompileConfig(cfg, nil, routing.CompileOptions{Now: time.Now()})
}

// frontCheck makes one request the way wrk will and checks the answer: a
// redirect naming a pool.
func frontCheck(v *frontVariant) error {
	c := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, v.srv.URL+"/watch/1", nil)
	req.Header.Set("CF-IPCountry", "PL")
	req.Header.Set("Cookie", "viewer=v-12345")
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("front phase: %s: %w", v.Name, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("X-Regiond-Pool") == "" {
		return fmt.Errorf("front phase: %s: status %d, pool %q: %s\n%s", v.Name, resp.StatusCode,
			resp.Header.Get("X-Regiond-Pool"), body, v.srv.Logs())
	}
	return nil
}

type wrkResult struct{ p50, p99, rps float64 }

// runWrk runs wrk against url for d with one thread and the configured
// connections, a viewer from PL with a sticky cookie, and parses its
// latency distribution (µs) and requests/s.
func runWrk(ctx context.Context, wrk, url string, d time.Duration) (wrkResult, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cmd := exec.CommandContext(ctx, wrk, "-t1", "-c"+strconv.Itoa(frontOpts.connections), "-d"+strconv.Itoa(secs)+"s",
		"--latency", "-H", "CF-IPCountry: PL", "-H", "Cookie: viewer=v-12345", url+"/watch/1")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %w: %s", err, stderr.String())
	}
	return parseWrk(out.String())
}

var (
	wrkPercentile = regexp.MustCompile(`^\s*(50|99)(?:\.0+)?%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkRPS        = regexp.MustCompile(`^Requests/sec:\s+([0-9.]+)`)
	wrkBad        = regexp.MustCompile(`(Non-2xx or 3xx responses|Socket errors):.*`)
)

// parseWrk reads wrk --latency output.
func parseWrk(s string) (wrkResult, error) {
	var r wrkResult
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := sc.Text()
		if m := wrkPercentile.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			v *= map[string]float64{"us": 1, "ms": 1e3, "s": 1e6}[m[3]]
			if m[1] == "50" {
				r.p50 = v
			} else {
				r.p99 = v
			}
		}
		if m := wrkRPS.FindStringSubmatch(line); m != nil {
			r.rps, _ = strconv.ParseFloat(m[1], 64)
		}
		if m := wrkBad.FindString(line); m != "" {
			return r, fmt.Errorf("wrk: %s", m)
		}
	}
	if r.p50 == 0 || r.rps == 0 {
		return r, fmt.Errorf("wrk output without latency distribution or requests/s:\n%s", s)
	}
	return r, nil
}

// printFront prints the medians over the runs, and each variant's p50 and
// throughput against the no-lookup baseline of the same run: under wrk,
// and in the interleaved sampling (the finer A/B: every variant's requests
// alternate with the baseline's on the same machine).
func printFront(w io.Writer, vs []*frontVariant, runs int) {
	base := vs[0]
	fmt.Fprintf(w, "\nFront door under php-fpm + nginx (wrk -c%d, %d runs of %v, then %d interleaved requests per variant; medians over runs)\n",
		frontOpts.connections, runs, frontOpts.duration, frontOpts.samples)
	fmt.Fprintf(w, "%-26s %9s %9s %8s %12s %10s %10s %13s %10s %10s  %s\n", "variant", "wrk p50", "wrk p99", "req/s", "wrk − base", "×base",
		"intl p50", "intl − base", "lookup p50", "lookup p99", "per-run interleaved p50 − base (µs)")
	for _, v := range vs {
		var deltas []string
		var d, sd []float64
		for i := range v.P50 {
			d = append(d, v.P50[i]-base.P50[i])
			sd = append(sd, v.SeqP50[i]-base.SeqP50[i])
			deltas = append(deltas, fmt.Sprintf("%+.1f", v.SeqP50[i]-base.SeqP50[i]))
		}
		fmt.Fprintf(w, "%-26s %9.1f %9.1f %8.0f %12.1f %10.2f %10.1f %13.1f %10.1f %10.1f  [%s]\n", v.Name, median(v.P50), median(v.P99), median(v.RPS),
			median(d), median(v.P50)/median(base.P50), median(v.SeqP50), median(sd), median(v.InP50)*1e3, median(v.InP99)*1e3, strings.Join(deltas, " "))
	}
	fmt.Fprintln(w, "(µs; wrk: wrk's own percentiles; intl: response time of the interleaved requests, request written to body read; lookup: measured in PHP)")
}
