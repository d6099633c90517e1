package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// readConfigFile reads and strictly parses a config file. A missing file is
// a usage error; a file that does not parse is refused (exit 1).
func readConfigFile(path string) (*routing.Config, error) {
	if path == "" {
		return nil, usagef("-f FILE is required")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("read config file: %w", err)}
	}
	cfg, err := routing.ParseConfig(data)
	if err != nil {
		var errs routing.Errors
		if errors.As(err, &errs) {
			return nil, refusedError{errs}
		}
		return nil, refusef(path, "%v", err)
	}
	return cfg, nil
}

// filePlan is the build step of apply: the file's objects replace the
// stored ones; with prune, stored config keys absent from the file go.
func filePlan(file *routing.Config, prune bool) buildFunc {
	return func(_ context.Context, cur *store.State) (*store.Plan, error) {
		return &store.Plan{Config: mergeConfig(cur.Config, file, prune), Prune: prune}, nil
	}
}

// mergeConfig returns cur with the file's objects set; with prune, the
// result is exactly the file.
func mergeConfig(cur, file *routing.Config, prune bool) *routing.Config {
	if prune {
		return file.Clone()
	}
	cfg := cur.Clone()
	f := file.Clone()
	if f.Policy.Residency != nil {
		cfg.Policy.Residency = f.Policy.Residency
	}
	for id, p := range f.Pools {
		cfg.Pools[id] = p
	}
	for name, r := range f.Routes {
		cfg.Routes[name] = r
	}
	return cfg
}
