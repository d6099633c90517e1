package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// convergeSample is one `regionctl … --wait-converged` write.
type convergeSample struct {
	startToCommit, commitToExit, commitToStatus, startToExit time.Duration
	exitCode                                                 int
}

// regionctlResult is the part of regionctl's -o json write output read here.
type regionctlResult struct {
	Revision  int64 `json:"revision"`
	Epoch     int64 `json:"epoch"`
	NoOp      bool  `json:"noop"`
	Converged *bool `json:"converged"`
}

// convergeRunner runs regionctl writes back to back against the fleet.
type convergeRunner struct {
	o         options
	bin       string
	endpoints []string
	root      string
	route     string
	pools     [2]string // the two pools of the flipped route
	next      int       // which weights the next write gives: 0 → 70/30, 1 → 30/70
	agents    int
	status    *statusTracker
	commits   chan fileObs // epoch key events: rev, when the bench saw them
}

// watchEpoch watches the epoch key: every regionctl write commits a new
// epoch, so its event is the moment of the commit as a watcher sees it.
func (r *convergeRunner) watchEpoch(ctx context.Context, cli *clientv3.Client) error {
	ch, err := watchRevisions(ctx, cli, r.root+"/routing/"+routing.EpochKey)
	if err != nil {
		return fmt.Errorf("epoch key: %w", err)
	}
	r.commits = ch
	return nil
}

// run makes n writes back to back.
func (r *convergeRunner) run(ctx context.Context, n int) ([]convergeSample, error) {
	var out []convergeSample
	for i := 0; i < n; i++ {
		s, err := r.write(ctx)
		if err != nil {
			return out, fmt.Errorf("regionctl write %d/%d: %w", i+1, n, err)
		}
		out = append(out, s)
		if (i+1)%10 == 0 {
			logf(r.o, "fleet: %d/%d regionctl writes; last: commit → exit %.1f ms (exit %d)", i+1, n, ms(s.commitToExit), s.exitCode)
		}
	}
	return out, nil
}

func (r *convergeRunner) write(ctx context.Context) (convergeSample, error) {
	var s convergeSample
	w := 70
	if r.next == 1 {
		w = 30
	}
	args := []string{"--endpoints=" + strings.Join(r.endpoints, ","), "--prefix=" + r.root, "-o", "json",
		"route", "set", r.route,
		"--target", fmt.Sprintf("%s=%d", r.pools[0], w), "--target", fmt.Sprintf("%s=%d", r.pools[1], 100-w),
		"--reason", "regiond bench: fleet wait-converged", "--wait-converged=" + r.o.fleetConvergeWait.String()}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = withoutRegionctlEnv(os.Environ())
	// Its own process group (a terminal's Ctrl-C reaches only the bench,
	// which cancels ctx: CommandContext kills it); no Pdeathsig, which
	// fires when the thread that started the child exits: regionctl ends
	// by itself within --wait-converged.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for len(r.commits) > 0 {
		<-r.commits
	}
	t0 := time.Now()
	err := runWatched(cmd, r.o.fleetConvergeWait+30*time.Second)
	exited := time.Now()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		s.exitCode = ee.ExitCode()
	case err != nil:
		return s, err
	}
	var res regionctlResult
	if jerr := json.Unmarshal(stdout.Bytes(), &res); jerr != nil || res.Revision == 0 {
		return s, fmt.Errorf("exit %d, no write in the output (%v): %s %s", s.exitCode, jerr, stdout.Bytes(), stderr.Bytes())
	}
	if res.NoOp {
		return s, fmt.Errorf("the write changed nothing (exit %d): %s", s.exitCode, stdout.Bytes())
	}
	r.next ^= 1
	commit, err := waitObs(ctx, r.commits, res.Revision, 5*time.Second, "the epoch key watch")
	if err != nil {
		return s, err
	}
	s.startToCommit, s.commitToExit, s.startToExit = commit.at.Sub(t0), exited.Sub(commit.at), exited.Sub(t0)
	s.commitToStatus = -1
	if at, err := r.status.waitAll(ctx, r.agents, res.Revision, time.Second); err == nil {
		s.commitToStatus = at.Sub(commit.at)
	}
	return s, nil
}

// runWatched runs cmd and waits for it, but at most limit: a process that
// is not reaped by then is reported (with what /proc says of it) instead
// of hanging the bench. (Once, in a 100-agent run, Wait blocked in waitid
// for minutes on a regionctl that no longer appeared in the process table.)
func runWatched(cmd *exec.Cmd, limit time.Duration) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		pid := cmd.Process.Pid
		cmd.Process.Kill()
		state := "no /proc entry"
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			state = strings.TrimSpace(string(b))
		}
		return fmt.Errorf("%s (pid %d) not reaped %v after its start (%s; the bench's %s)",
			filepath.Base(cmd.Path), pid, limit, state, procSignals())
	}
}

// procSignals returns the bench's ignored and caught signal masks.
func procSignals() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "signal masks unknown"
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "SigIgn:") || strings.HasPrefix(line, "SigCgt:") {
			out = append(out, strings.Join(strings.Fields(line), " "))
		}
	}
	return strings.Join(out, ", ")
}

// withoutRegionctlEnv drops REGIONCTL_* variables, which would override
// the flags not given.
func withoutRegionctlEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "REGIONCTL_") {
			out = append(out, kv)
		}
	}
	return out
}

// exitCodes counts the samples' exit codes, as "code": count.
func exitCodes(ss []convergeSample) map[string]int {
	out := map[string]int{}
	for _, s := range ss {
		out[strconv.Itoa(s.exitCode)]++
	}
	return out
}
