package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

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

// exitCode prints err for the operator and maps it to an exit code.
func (a *app) exitCode(err error) int {
	if err == nil {
		return ExitOK
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
	)
	switch {
	case errors.As(err, &committed): // first: whatever failed after the commit
		fmt.Fprintf(a.stderr, "regionctl: %v\n", committed)
		return ExitNotConverged
	case errors.As(err, &notConv): // before unreach: it may wrap one
		fmt.Fprintf(a.stderr, "regionctl: %v\n", notConv)
		return ExitNotConverged
	case errors.As(err, &refused):
		if a.output == "table" {
			for _, line := range diffLines(refused.Changes) {
				fmt.Fprintf(a.stdout, "%s\n", line)
			}
		}
		a.printRefused(refused.Errs)
		return ExitRefused
	case errors.As(err, &local):
		a.printRefused(local.errs)
		return ExitRefused
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
		fmt.Fprintf(a.stderr, "regionctl: %v\nRun 'regionctl --help' for usage.\n", err)
		return ExitUsage
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
	fmt.Fprintf(a.stderr, "refused: %d problem(s); nothing was written\n", len(errs))
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
			return usagef("%s takes %s (got %d argument(s))", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
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
