package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/regiond/regiond/internal/didyoumean"
	"github.com/regiond/regiond/internal/flagerr"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// usageError marks bad flags or arguments (exit 2).
type usageError struct{ err error }

// Error returns the underlying message.
func (e usageError) Error() string { return e.err.Error() }

// Unwrap returns the underlying error.
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// refusedError is a refusal found by the CLI itself (a config file that
// does not parse, an unknown pool): exit 1, printed like store refusals.
type refusedError struct{ errs routing.Errors }

// Error lists the problems, one per line.
func (e refusedError) Error() string { return e.errs.Error() }

func refusef(key, format string, args ...any) error {
	return refusedError{routing.Errors{{Key: key, Msg: fmt.Sprintf(format, args...)}}}
}

// absentError refuses a removal (pool rm, route rm, boost cancel) of what
// does not exist: exit 1, or, with --ignore-not-found, nothing to write
// (orIgnoreAbsent).
type absentError struct {
	refusedError
	what string // what was not found, as the note names it: "pool eu-old"
}

// Unwrap returns the refusal, which exitCode maps.
func (e absentError) Unwrap() error { return e.refusedError }

// absentf is refusef of what (as a note names it: "pool eu-old"), which
// does not exist.
func absentf(key, what, format string, args ...any) error {
	return absentError{refusedError{routing.Errors{{Key: key, Msg: fmt.Sprintf(format, args...)}}}, what}
}

// interruptedError is a signal (Ctrl-C, SIGTERM) that ended a run before
// it wrote anything, saying where it stood: exit 1, as every interrupt
// before a commit.
type interruptedError struct{ msg string }

// Error says what was interrupted.
func (e interruptedError) Error() string { return e.msg }

// Unwrap returns context.Canceled.
func (e interruptedError) Unwrap() error { return context.Canceled }

// exitCode prints err for the operator and maps it to an exit code.
func (a *app) exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if a.errStderr != nil {
		a.stderr = a.errStderr // what follows is the error the run ends with
	}
	var (
		committed *committedError
		refused   *store.RefusedError
		local     refusedError
		conflict  *store.ConflictError
		unknown   *store.OutcomeUnknownError
		unreach   *store.UnreachableError
		notConv   *store.NotConvergedError
		usage     usageError
		differs   differsError
		intr      interruptedError
	)
	switch {
	case errors.As(err, &committed): // first: whatever failed after the commit
		fmt.Fprintf(a.stderr, "regionctl: %v\n", committed)
		return ExitNotConverged
	case errors.As(err, &notConv): // before unreach: it may wrap one
		fmt.Fprintf(a.stderr, "regionctl: %v\n", err) // with what wraps it (a write with nothing to write)
		return ExitNotConverged
	case errors.As(err, &refused):
		// What it proposed, on stderr beside why it was refused, with
		// -o json too (stderr is the operator's): stdout holds only what
		// was written (a log of stdout alone shows no change that never
		// happened).
		for _, line := range diffLines(refused.Changes) {
			fmt.Fprintf(a.stderr, "PROPOSED %s\n", line)
		}
		a.printRefused(refused.Errs)
		return ExitRefused
	case errors.As(err, &local):
		a.printRefused(local.errs)
		return ExitRefused
	case errors.As(err, &differs): // the diff on stdout says it all
		return ExitDiffers
	case errors.As(err, &conflict):
		fmt.Fprintf(a.stderr, "CONFLICT %v\n", conflict)
		return ExitConflict
	case errors.As(err, &unknown): // before unreach: it may wrap one
		fmt.Fprintf(a.stderr, "regionctl: %v\n", unknown)
		return ExitUnreachable
	case errors.As(err, &unreach):
		fmt.Fprintf(a.stderr, "regionctl: %v\n", unreach)
		return ExitUnreachable
	case errors.As(err, &usage) || !a.ran:
		fmt.Fprintf(a.stderr, "regionctl: %v\nRun '%s --help' for usage.\n", err, a.usagePath())
		return ExitUsage
	case errors.As(err, &intr):
		fmt.Fprintf(a.stderr, "regionctl: %v\n", intr)
		return ExitRefused
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(a.stderr, "regionctl: interrupted")
		return ExitRefused
	}
	fmt.Fprintf(a.stderr, "regionctl: %v\n", err)
	return ExitRefused
}

func (a *app) printRefused(errs routing.Errors) {
	for _, e := range errs {
		for _, line := range strings.Split(e.Error(), "\n") {
			fmt.Fprintf(a.stderr, "REFUSED %s\n", line)
		}
	}
	if a.cmd != nil && a.cmd.Flags().Lookup("wait-converged") != nil { // a write verb (addWriteFlags)
		fmt.Fprintf(a.stderr, "refused: %d problem(s); nothing was written\n", len(errs))
		return
	}
	fmt.Fprintf(a.stderr, "refused: %d problem(s)\n", len(errs)) // validate, diff, resolve -f: reads
}

// groupRun is the RunE of a command that only holds sub-commands.
func groupRun(cmd *cobra.Command, args []string) error {
	names := make([]string, 0, len(cmd.Commands()))
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if len(args) > 0 {
		if err := subcommandTypo(cmd, args[0]); err != nil {
			return err
		}
		return usagef("unknown %s command %q (want one of: %s)", cmd.Name(), args[0], strings.Join(names, ", "))
	}
	return usagef("%s needs a command: %s", cmd.Name(), strings.Join(names, ", "))
}

// exactArgs is cobra.ExactArgs with a usage error naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			if len(args) > 0 {
				if err := subcommandTypo(cmd, args[0]); err != nil {
					return err
				}
			}
			return usagef("%s takes %s (got %d argument(s))%s", cmd.CommandPath(), names, len(args), argsHint(cmd, args))
		}
		return nil
	}
}

// argsHint says what a stray argument most likely meant, or "": the value
// of a flag whose value is optional, typed after a space (such a flag
// takes its value only after '='), or a config file given without -f.
func argsHint(cmd *cobra.Command, args []string) string {
	hint := ""
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if hint != "" || f.NoOptDefVal == "" || !f.Changed || f.Value.Type() != "duration" {
			return
		}
		for _, a := range args {
			if _, err := time.ParseDuration(a); err == nil {
				hint = fmt.Sprintf("; --%s takes its value after '=' (--%s=%s): %q was taken as an argument", f.Name, f.Name, a, a)
				return
			}
		}
	})
	if hint == "" && cmd.Flags().Lookup("file") != nil {
		for _, a := range args {
			if ext := filepath.Ext(a); ext == ".yaml" || ext == ".yml" || ext == ".json" || a == "-" {
				return fmt.Sprintf("; give the config file with -f: %s -f %s", cmd.CommandPath(), a)
			}
		}
	}
	return hint
}

// subcommandTypo returns a usage error when word looks like a misspelt
// subcommand of cmd (boost cancle, boost list), else nil. A country code
// (a route: boost PL) never does: every two letters are near "ls".
func subcommandTypo(cmd *cobra.Command, word string) error {
	if !cmd.HasSubCommands() || strings.ToLower(word) != word || routing.IsCountry(strings.ToUpper(word)) {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only when it looks itself
	}
	if s := cmd.SuggestionsFor(word); len(s) > 0 {
		return usagef("unknown %s command %q; did you mean %s %s?", cmd.CommandPath(), word, cmd.CommandPath(), strings.Join(s, " or "))
	}
	return nil
}

// unknownVerb adds to cobra's error for an unknown top-level command
// (regionctl drain eu-west) the commands, at any depth, whose name is
// near the word typed: did you mean regionctl pool drain? Other errors,
// and a word near no command, are returned as they are.
func unknownVerb(root *cobra.Command, err error) error {
	var word string
	if err == nil || !strings.HasPrefix(err.Error(), "unknown command ") {
		return err
	}
	if _, serr := fmt.Sscanf(err.Error(), "unknown command %q", &word); serr != nil {
		return err
	}
	lower := strings.ToLower(word)
	var same, near []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() {
				continue
			}
			// Two edits, but at most half the word: "rn" is near rm,
			// not near ls.
			switch d := didyoumean.Distance(lower, sub.Name()); {
			case d == 0:
				same = append(same, sub.CommandPath())
			case d <= 2 && 2*d <= len(lower):
				near = append(near, sub.CommandPath())
			}
			walk(sub)
		}
	}
	walk(root)
	if len(same) > 0 { // drain: pool drain, not also pool undrain
		near = same
	}
	if len(near) == 0 {
		return err
	}
	slices.Sort(near)
	return usagef("unknown command %q; did you mean %s?", word, strings.Join(slices.Compact(near), " or "))
}

// usagePath is the command a usage error is about, as typed up to its
// verb ("regionctl pool drain"), for its --help; "regionctl" when no verb
// was found.
func (a *app) usagePath() string {
	if a.root != nil {
		if c, _, err := a.root.Find(a.args); err == nil && c != nil {
			return c.CommandPath()
		}
	}
	return "regionctl"
}

// flagError is cobra's FlagErrorFunc: every flag error is a usage error,
// and an unknown flag close to one the command has (or inherits) names
// it, as a mistyped command does.
func flagError(cmd *cobra.Command, err error) error {
	err = flagerr.Value(err)
	near := flagerr.Near(cmd, err)
	if len(near) == 0 {
		return usageError{err}
	}
	return usagef("%v; did you mean %s?", err, strings.Join(near, " or "))
}
