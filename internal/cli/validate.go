package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/routing"
)

func (a *app) validateCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "validate [-f FILE]",
		Short: "Check a config file, or the stored config, against every invariant",
		Long: `validate lists every problem (exit 1) or confirms the config is valid
(exit 0); -o json says valid false and the problems too. With -f it
checks the file and needs no etcd; without, it checks the stored config,
including values the agents skip (a refused health key or a key outside
the grammar is warned of: every agent serves it alike). Valid but likely
unintended settings are warned about on stderr, the exit code unchanged:
EEA member states in no residency class while others are in one; a part
of the EU with a code of its own (AX GF GP MF MQ RE YT) in no class while
its member state is in one; a code listed twice in one class; a class
that lists no countries; no EEA member state in a class while pools have
residency eu; fallbacks on _default (only chains that name _default follow
them); a fallback of a country's chain with no pool of the country's
class (it can never serve it).`,
		Example: `  regionctl validate -f fleet.yaml
  regionctl validate --endpoints etcd-1:2379`,
		Args: exactArgs(0, "no arguments"),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "config file (YAML or JSON; - reads standard input); default: the stored config")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		return a.runValidate(ctx, file)
	})
	return cmd
}

// validateResult is the JSON/YAML output of validate.
type validateResult struct {
	Source string `json:"source"`
	Pools  int    `json:"pools"`
	Routes int    `json:"routes"`
	Valid  bool   `json:"valid"`
	// Problems are the refusals' lines (REFUSED … on stderr), when not
	// valid.
	Problems []string `json:"problems,omitempty"`
}

func (a *app) runValidate(ctx context.Context, file string) error {
	cfg, source, errs, err := a.configToValidate(ctx, file)
	var bad refusedError
	if errors.As(err, &bad) && a.output != "table" {
		// A file that does not parse: -o json and yaml say so as diff
		// does (valid false), with no counts to give.
		_ = a.printer().print(struct {
			Source   string   `json:"source"`
			Valid    bool     `json:"valid"`
			Problems []string `json:"problems"`
		}{file, false, problemLines(bad.errs)}, nil)
	}
	if err != nil {
		return err
	}
	if file != "" {
		errs = append(errs, routing.Validate(cfg)...)
	} else {
		// A stored value is measured by its stored bytes, as the agents
		// measure it: one over the limit does not decode and is among
		// errs (skipped); the stored config's encoding as regionctl would
		// write it is not what etcd holds.
		errs = append(errs, routing.ValidateExceptSize(cfg)...)
	}
	out := validateResult{Source: source, Pools: len(cfg.Pools), Routes: len(cfg.Routes), Valid: len(errs) == 0}
	if len(errs) > 0 {
		errs.Sort()
		if a.output != "table" {
			out.Problems = problemLines(errs)
			_ = a.printer().print(out, nil)
		}
		return refusedError{errs}
	}
	return a.printer().print(out, func(w io.Writer) {
		fmt.Fprintf(w, "valid: %s (%d pools, %d routes)\n", source, out.Pools, out.Routes)
	})
}

// configToValidate returns the file's config, or the stored one with its
// undecodable values as problems. Refused keys that every agent serves
// alike (a health key, live whatever its value; a key outside the
// grammar, in no table) are no config's problem, and not the operator's
// role's to delete: they are warned of, the exit code unchanged.
func (a *app) configToValidate(ctx context.Context, file string) (*routing.Config, string, routing.Errors, error) {
	if file != "" {
		cfg, err := a.readConfigFile(file)
		if err == nil {
			a.warnConfig(cfg, configFileName(file))
		}
		return cfg, file, nil, err
	}
	st, err := a.store(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	cur, err := st.Load(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	var errs routing.Errors
	for _, s := range cur.Skipped {
		if routing.ServedAlike(s.Key) {
			why := "a key outside the grammar: in no table, no viewer is decided by it"
			if _, err := routing.ParseKey(s.Key); err == nil {
				why = "a health key: a live instance whatever its value; the origin that wrote it, or root, removes it"
			}
			fmt.Fprintf(a.stderr, "regionctl: warning: %s (served alike by every agent, no problem of the config: %s)\n", s.Error, why)
			continue
		}
		errs = append(errs, &routing.FieldError{Msg: s.Error})
	}
	source := fmt.Sprintf("stored config at epoch %d", cur.Epoch)
	a.warnConfig(cur.Config, "the "+source)
	return cur.Config, source, errs, nil
}
