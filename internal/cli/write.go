package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// defaultConvergeWait is the timeout of a bare --wait-converged.
const defaultConvergeWait = time.Minute

// writeOpts are the flags every write takes.
type writeOpts struct {
	reason string
	dryRun bool
	wait   time.Duration
	expect int // --expect-agents
	retry  int
	force  bool
	// ignoreNotFound is --ignore-not-found, of the removal verbs.
	ignoreNotFound bool
	// allowResidency is --allow-residency-change, of the verbs that may
	// write the residency policy (apply, rollback).
	allowResidency bool
	// ownWarnings: the verb warns of what validate warns of in the
	// config it writes itself (apply, of the file merged; rollback, of
	// the epoch's config), so runWrite does not.
	ownWarnings bool
	notes       []string // printed after the diff of a real write
	// warning, if set, is called once the write is made (or dry-run), not
	// for one that changes nothing: what it returns, if not "", is a
	// warning on stderr.
	warning func() string
	// changesWarning, if set, is called as warning is, with the keys
	// written (or a dry run's): a warning of what the store computed at
	// the write (a boost's new expires_at).
	changesWarning func([]routing.Change) string
}

func addWriteFlags(cmd *cobra.Command, w *writeOpts) {
	f := cmd.Flags()
	f.StringVar(&w.reason, "reason", "", "why: stored in the audit record")
	f.BoolVar(&w.dryRun, "dry-run", false, "print the diff and write nothing")
	f.DurationVar(&w.wait, "wait-converged", 0, "after writing, wait until every live agent, and at least one, serves the new revision (bare flag: "+
		defaultConvergeWait.String()+"); exit 5 if it does not in time (no live agent: at the deadline) or the wait fails: the write stays committed. With nothing to write, it waits for the state's newest change")
	f.Lookup("wait-converged").NoOptDefVal = defaultConvergeWait.String()
	f.IntVar(&w.expect, "expect-agents", 0, "with --wait-converged, also wait until at least N live agents confirm it (the fleet's size: an agent whose status key expired before the wait is otherwise unknown to it; set REGIONCTL_EXPECT_AGENTS per fleet)")
	f.IntVar(&w.retry, "retry", 0, "on a concurrent change, re-read and retry up to N times")
	f.BoolVar(&w.force, "force", false, "write even if some country would be left with no eligible pool")
}

// addIgnoreNotFoundFlag adds --ignore-not-found to a removal verb (pool
// rm, route rm, boost cancel, agent rm).
func addIgnoreNotFoundFlag(cmd *cobra.Command, ignore *bool) {
	cmd.Flags().BoolVar(ignore, "ignore-not-found", false,
		"exit 0 with nothing written when what is named does not exist (for clean-up scripts run twice); other refusals stay refusals")
}

// orIgnoreAbsent is build, whose refusal of what does not exist
// (absentError) becomes, when ignore is set, a write of nothing (exit 0,
// "no changes") with a note naming what was not found.
func (a *app) orIgnoreAbsent(ignore bool, build buildFunc) buildFunc {
	if !ignore {
		return build
	}
	return func(ctx context.Context, cur *store.State) (*store.Plan, error) {
		p, err := build(ctx, cur)
		var absent absentError
		if errors.As(err, &absent) {
			a.attemptNotes = append(a.attemptNotes, fmt.Sprintf("%s does not exist: nothing to remove (--ignore-not-found)", absent.what))
			return &store.Plan{}, nil
		}
		return p, err
	}
}

// allowResidencyFlag is the flag that lets a write take countries out of
// their residency class. It is read from the command line alone (see
// commandLineOnly), and --force does not stand for it.
const allowResidencyFlag = "allow-residency-change"

// addResidencyFlag adds --allow-residency-change, to the verbs that may
// write the residency policy (apply, rollback) and to diff.
func addResidencyFlag(cmd *cobra.Command, allow *bool) {
	cmd.Flags().BoolVar(allow, allowResidencyFlag, false,
		"write even if the residency policy written takes a country out of the class the stored policy (or, with none stored, the built-in one) puts it in, so that its viewers may be sent to pools of another residency (--force does not allow it; not read from the environment)")
}

// writeResult is the JSON/YAML output of a write.
type writeResult struct {
	PrevEpoch int64            `json:"prev_epoch"`
	Epoch     int64            `json:"epoch"`
	Revision  int64            `json:"revision"`
	DryRun    bool             `json:"dry_run"`
	NoOp      bool             `json:"noop"`
	Diff      []string         `json:"diff"`
	Changes   []routing.Change `json:"changes"`
	Converged *bool            `json:"converged,omitempty"`
	// ConvergedAgents is how many live agents confirmed the revision
	// (also when the wait failed: how many had).
	ConvergedAgents int `json:"converged_agents,omitempty"`
	// NotConverged, when the wait failed, counts the agents it names by
	// why they are not converged (the keys of store.Reasons: behind,
	// refused_values, snapshot_not_written, other_history,
	// invalid_status, lost, vanished), and NotConvergedNodes names the
	// first store.MaxNamedAgents of each, by node: what stderr says, for
	// scripts (the scale review: only "converged": false).
	NotConverged      map[string]int      `json:"not_converged,omitempty"`
	NotConvergedNodes map[string][]string `json:"not_converged_nodes,omitempty"`
	Notes             []string            `json:"notes,omitempty"`
	// Forced names the countries a --force write leaves with no eligible
	// pool, which a write without it refuses.
	Forced string `json:"forced,omitempty"`
	// ResidencyChanged names the codes an --allow-residency-change write
	// takes out of their residency class, which a write without it
	// refuses.
	ResidencyChanged string `json:"residency_changed,omitempty"`
}

// afterReadHook is a context key for tests: a func() run after each read
// of a write, before its Txn (to provoke a conflict deterministically).
type afterReadHook struct{}

// afterCommitHook is a context key for tests: a func() run once a write
// committed, before it waits and prints (to cut etcd off at that moment).
type afterCommitHook struct{}

// buildFunc builds the proposed change from the current state.
type buildFunc func(ctx context.Context, cur *store.State) (*store.Plan, error)

// committedError is any failure after a write's Txn committed: waiting for
// convergence, printing the result. It exits 5, never 1 or 4, so that no
// automation re-runs a write that is in etcd (a re-run boost would be a
// second boost).
type committedError struct {
	prevEpoch, epoch, revision int64
	err                        error
}

// Error says the write is committed, then what failed.
func (e *committedError) Error() string {
	return fmt.Sprintf("the write is committed (epoch %d → %d at revision %d; do not re-run it), but %v",
		e.prevEpoch, e.epoch, e.revision, e.err)
}

// Unwrap returns what failed.
func (e *committedError) Unwrap() error { return e.err }

// runWrite sends one write through the store, prints the diff and the new
// epoch, and waits for convergence when asked.
func (a *app) runWrite(ctx context.Context, w writeOpts, build buildFunc) error {
	if w.wait < 0 {
		return usagef("--wait-converged=%s: want a timeout above 0 (the bare flag waits %s)", w.wait, defaultConvergeWait)
	}
	if w.retry < 0 {
		return usagef("--retry %d: want 0 (the default: no retry) or more", w.retry)
	}
	if w.expect < 0 {
		return usagef("--expect-agents %d: want the fleet's number of agents (0, the default: any number, at least one)", w.expect)
	}
	if off := routing.InvalidUTF8At([]byte(w.reason)); off < len(w.reason) {
		return usagef("--reason: byte 0x%02x at offset %d (counting from 0) begins no UTF-8 character: the audit record is JSON, which would hold U+FFFD in its place; give the reason in UTF-8", w.reason[off], off)
	}
	a.writing(w)
	st, err := a.store(ctx)
	if err != nil {
		return store.NothingWritten(err) // etcd not reached: no Txn sent
	}
	host, _ := os.Hostname()
	res, err := st.Write(ctx, store.WriteRequest{
		Command: a.command(), Reason: w.reason, User: a.userName(), Host: host,
		DryRun: w.dryRun, Retry: w.retry,
		Build: func(ctx context.Context, cur *store.State) (*store.Plan, error) {
			if hook, ok := ctx.Value(afterReadHook{}).(func()); ok {
				hook()
			}
			a.attemptWarnings = nil // this attempt's view, not an earlier one's
			a.attemptNotes = nil
			p, err := build(ctx, cur)
			if p != nil {
				p.Force = p.Force || w.force
				p.AllowResidencyChange = p.AllowResidencyChange || w.allowResidency
				if p.Config != nil && !w.ownWarnings {
					// What validate warns of in the config this write
					// makes (a route set's fallback that can never
					// serve its country), refused or not.
					for _, msg := range routing.Warnings(p.Config) {
						a.warnAttempt("the config after this write: %s", msg)
					}
				}
			}
			return p, err
		},
	})
	// The warnings of the attempt that committed, or of the last one
	// when the write failed: a retried build saw a newer state than the
	// first attempt's.
	for _, msg := range a.attemptWarnings {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", msg)
	}
	a.attemptWarnings = nil
	w.notes = append(slices.Clip(w.notes), a.attemptNotes...)
	a.attemptNotes = nil
	if err != nil {
		return err
	}
	a.warnForced(res.Forced)
	a.warnResidencyChanged(res.ResidencyChanged)
	if res.Limits != "" {
		fmt.Fprintf(a.stderr, "regionctl: warning: this commit would hold %s: a cluster at those defaults refuses it (raise them on every member, or apply in parts: apply without --prune keeps what a file does not name)\n", res.Limits)
	}
	if w.warning != nil && !res.NoOp {
		if msg := w.warning(); msg != "" {
			fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", msg)
		}
	}
	if w.changesWarning != nil && !res.NoOp {
		if msg := w.changesWarning(res.Changes); msg != "" {
			fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", msg)
		}
	}
	if res.DryRun {
		return a.printWrite(writeResultOf(res))
	}
	if res.NoOp {
		return a.afterNoOp(ctx, st, res, w)
	}
	if hook, ok := ctx.Value(afterCommitHook{}).(func()); ok {
		hook()
	}
	return a.afterCommit(ctx, st, res, w)
}

// warnAttempt queues a warning of the build running now (a buildFunc's
// view of the state it was given): runWrite prints those of the attempt
// that commits, or of the last attempt when the write fails, once.
func (a *app) warnAttempt(format string, args ...any) {
	a.attemptWarnings = append(a.attemptWarnings, fmt.Sprintf(format, args...))
}

// warnForced says on stderr, whatever the output format, what a forced
// write does that one without --force refuses (forced: Result.Forced;
// nothing when ""): --force, or a REGIONCTL_FORCE left set in the shell,
// skips the refusal, not the news.
func (a *app) warnForced(forced string) {
	if forced == "" {
		return
	}
	from := "--force"
	if env, ok := a.envFlags["force"]; ok {
		from = env + " set in the environment"
	}
	fmt.Fprintf(a.stderr, "regionctl: warning: forced (%s): %s\n", from, forced)
}

// warnResidencyChanged says on stderr, whatever the output format, what
// an --allow-residency-change write does that one without the flag
// refuses (changed: Result.ResidencyChanged; nothing when "").
func (a *app) warnResidencyChanged(changed string) {
	if changed != "" {
		fmt.Fprintf(a.stderr, "regionctl: warning: residency change allowed (--%s): %s\n", allowResidencyFlag, changed)
	}
}

// writing makes a refused probe name what a write needs (a dry run only
// reads): set before the first a.store of a write verb.
func (a *app) writing(w writeOpts) {
	if !w.dryRun {
		a.probeNeeds = store.Roles.CommitNeeds
	}
}

// afterCommit waits for convergence when asked and prints the result of a
// committed write; any failure is a *committedError.
func (a *app) afterCommit(ctx context.Context, st *store.Store, res *store.Result, w writeOpts) error {
	out := writeResultOf(res)
	out.Notes = w.notes
	var waitErr error
	if w.wait > 0 {
		waitErr = a.waitConverged(ctx, st, res.Revision, w.wait, w.expect, &out, true)
	} else {
		a.warnNoAgents(ctx, st)
	}
	var printErr error
	if err := a.printWrite(out); err != nil {
		printErr = fmt.Errorf("printing the result failed: %w", err)
	}
	if err := errors.Join(waitErr, printErr); err != nil {
		return &committedError{prevEpoch: res.PrevEpoch, epoch: res.Epoch, revision: res.Revision, err: err}
	}
	return nil
}

// warnNoAgents warns when no live agent's status key is under the
// prefix written to: nothing serves the write (a mistyped --prefix or
// REGIONCTL_PREFIX makes every drain a silent no-op; a new fleet's first
// apply, before its agents start, is told so too). A count that cannot be
// read says nothing (the role may not read agents/).
func (a *app) warnNoAgents(ctx context.Context, st *store.Store) {
	if n, err := st.LiveAgents(ctx); err == nil && n == 0 {
		fmt.Fprintf(a.stderr, "regionctl: warning: no live agent under %s: nothing serves this change yet (is --prefix the agents' --prefix, and are they running? regionctl status)\n",
			st.Keyspace().AgentsPrefix())
	}
}

// afterNoOp prints a write that found nothing to change: what it asked
// for is in etcd already (a re-run after exit 5, a second operator's same
// drain). Asked to wait, it still waits for the fleet to serve that state
// (the revision of its newest change): a script that drains, waits and
// reboots must not be told converged by a drain that had nothing to do
// while agents still send viewers to the pool. Nothing was written, so a
// failed wait exits 5 without "do not re-run".
func (a *app) afterNoOp(ctx context.Context, st *store.Store, res *store.Result, w writeOpts) error {
	out := writeResultOf(res)
	out.Notes = w.notes
	var waitErr error
	if w.wait > 0 {
		// No skew warnings: agents already at the revision put their
		// status keys before the wait began (synced_at refreshed once a
		// minute), not for this write, so their times say nothing of
		// their clocks.
		if err := a.waitConverged(ctx, st, out.Revision, w.wait, w.expect, &out, false); err != nil {
			waitErr = fmt.Errorf("nothing to write (etcd holds what was asked; the state's newest change is at revision %d), but %w", out.Revision, err)
		}
	}
	return errors.Join(waitErr, a.printWrite(out))
}

// warnViaProxy warns on stderr when --endpoints are etcd's grpc-proxy
// (store.ViaProxy), which only agents' watches should go through: why,
// what goes wrong through it; fix, what to do.
func (a *app) warnViaProxy(ctx context.Context, st *store.Store, why, fix string) {
	if proxies, ok := st.ViaProxy(ctx); ok {
		fmt.Fprintf(a.stderr, "regionctl: warning: --endpoints are etcd's grpc-proxy (its member list names %s, not etcd's members): %s; %s (docs/operations.md, \"etcd and its grpc-proxy\": only agents' watches go through it)\n",
			strings.Join(proxies, ", "), why, fix)
	}
}

// waitConverged waits up to wait for every live agent to serve rev,
// records the outcome in out and, with skews, warns about each agent
// whose clock is off this host's (judged by status puts for a write
// committed as the wait began).
func (a *app) waitConverged(ctx context.Context, st *store.Store, rev int64, wait time.Duration, expect int, out *writeResult, skews bool) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	a.warnViaProxy(wctx, st, "a wait through it can miss the agents' status puts and wait out --wait-converged (etcd issue 19296)", "point regionctl at the members")
	conv, err := st.WaitConvergedExpecting(wctx, rev, expect)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) { // a signal, not the timeout
		err = fmt.Errorf("interrupted: %w", err)
	}
	ok := err == nil
	out.Converged = &ok
	out.ConvergedAgents = conv.Agents
	var nce *store.NotConvergedError
	if errors.As(err, &nce) {
		out.NotConverged, out.NotConvergedNodes = nce.ByReason()
	}
	if !skews { // not judged (see afterNoOp)
		return err
	}
	for _, sk := range conv.Skews {
		way := "ahead of"
		if sk.Ahead < 0 {
			way = "behind"
		}
		fmt.Fprintf(a.stderr, "regionctl: warning: agent %s's clock is %s %s this host's: boosts end at their expires_at by the agents' clocks (this host's clock + --ttl), so one ends early or late there, or is over on arrival; keep the clocks in sync (NTP)\n",
			sk.Node, sk.Ahead.Abs().Round(time.Second), way)
	}
	return err
}

// writeResultOf is what a write prints. A write that found nothing to
// change gives the revision of the state's newest change as its revision:
// agents at it serve what was asked, as after a write at its commit.
func writeResultOf(res *store.Result) writeResult {
	rev := res.Revision
	if res.NoOp && res.State != nil {
		rev = res.State.NewestChange()
	}
	return writeResult{PrevEpoch: res.PrevEpoch, Epoch: res.Epoch, Revision: rev,
		DryRun: res.DryRun, NoOp: res.NoOp, Changes: res.Changes, Diff: diffLines(res.Changes), Forced: res.Forced,
		ResidencyChanged: res.ResidencyChanged}
}

func (a *app) printWrite(out writeResult) error {
	return a.printer().print(out, func(tw io.Writer) { printWriteTable(tw, out) })
}

func diffLines(changes []routing.Change) []string {
	out := make([]string, len(changes))
	for i, c := range changes {
		out[i] = describeChange(c)
	}
	return out
}

func printWriteTable(w io.Writer, r writeResult) {
	for _, line := range r.Diff {
		fmt.Fprintln(w, line)
	}
	switch {
	case r.NoOp:
		fmt.Fprintf(w, "no changes; epoch stays %d\n", r.Epoch)
	case r.DryRun:
		fmt.Fprintf(w, "dry run: would write epoch %d (%d key(s)); nothing written\n", r.Epoch, len(r.Changes))
	default:
		fmt.Fprintf(w, "epoch %d → %d at revision %d (%d key(s))\n", r.PrevEpoch, r.Epoch, r.Revision, len(r.Changes))
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, n)
	}
	if r.Converged != nil && *r.Converged {
		fmt.Fprintf(w, "converged: every live agent (%d) serves revision %d or later\n", r.ConvergedAgents, r.Revision)
	}
}
