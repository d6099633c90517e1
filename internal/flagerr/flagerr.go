// Package flagerr makes a mistyped flag of regiond or regionctl name the
// flags near it, as a mistyped command does.
package flagerr

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/regiond/regiond/internal/didyoumean"
)

// Near returns, sorted and as "--name", the flags of cmd (its own and
// inherited, not hidden) within an edit distance of 2 of the unknown one
// a flag error from pflag names ("unknown flag: --endpoint"); nil for any
// other error, or when none is near.
func Near(cmd *cobra.Command, err error) []string {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return nil
	}
	var near []string
	seen := map[string]bool{}
	visit := func(f *pflag.Flag) {
		if !f.Hidden && !seen[f.Name] && didyoumean.Distance(name, f.Name) <= 2 {
			seen[f.Name] = true
			near = append(near, "--"+f.Name)
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	slices.Sort(near)
	return near
}

// Value returns pflag's error for a value that does not parse as its
// flag's type ("invalid argument "N" for "--max-lag" flag:
// strconv.ParseInt: parsing "N": invalid syntax") in words, saying what
// the flag takes: `invalid value "N" for --max-lag: want a whole number`.
// Any other error, and a value a flag of the project's own type refused
// (its own words already), is returned as it is.
func Value(err error) error {
	var ive *pflag.InvalidValueError
	var ne *strconv.NumError
	if !errors.As(err, &ive) || !errors.As(err, &ne) && !strings.HasPrefix(ive.Unwrap().Error(), "time: ") {
		return err // not a parse of Go's (strconv, time): the flag's own words
	}
	var want string
	switch t := ive.GetFlag().Value.Type(); {
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		want = "a whole number"
		if strings.HasPrefix(t, "uint") {
			want = "a whole number, 0 or more"
		}
		if ne != nil && errors.Is(ne.Err, strconv.ErrRange) {
			want += " (this one is out of range)"
		}
	case t == "duration":
		want = "a duration such as 30s, 5m or 1h30m"
	case strings.HasPrefix(t, "float"):
		want = "a number"
	case t == "bool":
		want = "true or false"
	default:
		return err
	}
	return fmt.Errorf("invalid value %q for --%s: want %s", ive.GetValue(), ive.GetFlag().Name, want)
}
