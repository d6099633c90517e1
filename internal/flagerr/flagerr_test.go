package flagerr

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// rejectAll is a flag of the project's own kind: its Set's words stand.
type rejectAll struct{}

func (rejectAll) String() string   { return "" }
func (rejectAll) Set(string) error { return errors.New("want one of a, b") }
func (rejectAll) Type() string     { return "int" }

// TestValueSaysWhatTheFlagTakes: a value that does not parse as its
// flag's Go type is named with what the flag takes, not strconv's or
// time's words; a flag's own refusal, and any other error, is left as it
// is.
func TestValueSaysWhatTheFlagTakes(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Int("n", 0, "")
	fs.Uint("u", 0, "")
	fs.Duration("d", 0, "")
	fs.Bool("b", false, "")
	fs.Float64("f", 0, "")
	fs.Var(rejectAll{}, "own", "")
	for arg, want := range map[string]string{
		"--n=N":                    `invalid value "N" for --n: want a whole number`,
		"--n=99999999999999999999": `invalid value "99999999999999999999" for --n: want a whole number (this one is out of range)`,
		"--u=-1":                   `invalid value "-1" for --u: want a whole number, 0 or more`,
		"--d=5":                    `invalid value "5" for --d: want a duration such as 30s, 5m or 1h30m`,
		"--b=yes":                  `invalid value "yes" for --b: want true or false`,
		"--f=x":                    `invalid value "x" for --f: want a number`,
		"--own=c":                  `invalid argument "c" for "--own" flag: want one of a, b`,
		"--nope=1":                 `unknown flag: --nope`,
	} {
		err := fs.Parse([]string{arg})
		if err == nil {
			t.Fatalf("%s parsed", arg)
		}
		if got := Value(err).Error(); !strings.HasPrefix(got, want) || strings.Contains(got, "strconv") {
			t.Errorf("%s: %q; want %q", arg, got, want)
		}
	}
}
