package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

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
		return cloneConfig(file)
	}
	cfg := cloneConfig(cur)
	f := cloneConfig(file)
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

// cloneConfig returns a deep copy of cfg, safe to change; it is
// routing.Config.Clone without the JSON round trip (writes under
// contention build a proposal on every attempt).
func cloneConfig(cfg *routing.Config) *routing.Config {
	out := &routing.Config{
		Pools:  make(map[string]routing.Pool, len(cfg.Pools)),
		Routes: make(map[string]routing.Route, len(cfg.Routes)),
	}
	if r := cfg.Policy.Residency; r != nil {
		cp := *r
		cp.Classes = make(map[string][]string, len(r.Classes))
		for c, ccs := range r.Classes {
			cp.Classes[c] = slices.Clone(ccs)
		}
		cp.Extra = maps.Clone(r.Extra)
		out.Policy.Residency = &cp
	}
	for id, p := range cfg.Pools {
		p.Attrs, p.Extra = maps.Clone(p.Attrs), maps.Clone(p.Extra)
		out.Pools[id] = p
	}
	for name, r := range cfg.Routes {
		r.Targets, r.Fallback = slices.Clone(r.Targets), slices.Clone(r.Fallback)
		r.Attrs, r.Extra = maps.Clone(r.Attrs), maps.Clone(r.Extra)
		out.Routes[name] = r
	}
	return out
}
