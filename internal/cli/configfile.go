package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// readConfigFile reads and strictly parses a config file. A missing file is
// a usage error; a file that does not parse is refused (exit 1). It warns
// of nothing: a file taken as the whole config is warned of as such
// (warnConfig), one merged into the stored config as the config it makes
// (mergedWarnings).
func (a *app) readConfigFile(path string) (*routing.Config, error) {
	if path == "" {
		return nil, usagef("-f FILE is required (- reads standard input)")
	}
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(a.stdin)
		path = configFileName(path)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, usageError{fmt.Errorf("read config file: %w", err)}
	}
	cfg, err := routing.ParseConfig(data)
	if err != nil {
		var errs routing.Errors
		if errors.As(err, &errs) {
			if slices.ContainsFunc(errs, func(e *routing.FieldError) bool {
				return strings.HasPrefix(e.Key, "pools/") && e.Field == "host" && e.Msg == "must not be empty"
			}) {
				// The CLI review: a file of one field ({status: draining}),
				// written as for kubectl apply, which merges.
				fmt.Fprintln(a.stderr, "regionctl: a config file's objects are whole: apply replaces each stored object by the file's, it merges no fields (regionctl export writes a file to edit; regionctl pool drain|set and route set change one field)")
			}
			return nil, refusedError{errs}
		}
		return nil, refusef(path, "%v", err)
	}
	return cfg, nil
}

// configFileName is how messages name the config file path ("-":
// standard input).
func configFileName(path string) string {
	if path == "-" {
		return "(standard input)"
	}
	return path
}

// warnConfig prints, on stderr, what in cfg is valid but likely not meant
// (routing.Warnings: a part of the EU in no class while its member state
// is in one, fallbacks on _default), for where (a file, or the stored
// config): warnings, not refusals.
func (a *app) warnConfig(cfg *routing.Config, where string) {
	for _, w := range routing.Warnings(cfg) {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s: %s\n", where, w)
	}
}

// mergedWarnings returns the warnings of cfg, the config that applying
// the file path to the stored config makes (with prune, the file alone),
// each saying where: a file applied in parts (pools first, then routes,
// as a config over etcd's limits must be) was warned of as if it were the
// whole config (a route file's fallback named no pool of its class,
// though the pools stored were).
func mergedWarnings(cfg *routing.Config, path string, prune bool) []string {
	where := path
	if !prune {
		where = path + " with the stored config"
	}
	ws := routing.Warnings(cfg)
	for i, w := range ws {
		ws[i] = where + ": " + w
	}
	return ws
}

// filePlan is the build step of apply: the file's objects replace the
// stored ones; with prune, stored config keys absent from the file go.
// What the merged config warns of is queued with the attempt.
func (a *app) filePlan(file *routing.Config, path string, prune bool) buildFunc {
	return func(_ context.Context, cur *store.State) (*store.Plan, error) {
		cfg := mergeConfig(cur.Config, file, prune)
		for _, w := range mergedWarnings(cfg, path, prune) {
			a.warnAttempt("%s", w)
		}
		return &store.Plan{Config: cfg, Prune: prune}, nil
	}
}

// mergeConfig returns cur with the file's objects set; with prune, the
// result is exactly the file.
func mergeConfig(cur, file *routing.Config, prune bool) *routing.Config {
	f := cloneConfig(file)
	keepExtras(cur, f)
	if prune {
		return f
	}
	cfg := cloneConfig(cur)
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

// keepExtras gives the objects of file the fields their stored values have
// and this regionctl does not know (routing.Extra: written by a newer
// version), where file has none: a config file cannot hold them (it is
// strict), so applying one, or what export printed, keeps them instead of
// dropping them.
func keepExtras(cur, file *routing.Config) {
	if r, c := file.Policy.Residency, cur.Policy.Residency; r != nil && c != nil && len(r.Extra) == 0 {
		r.Extra = maps.Clone(c.Extra)
	}
	for id, p := range file.Pools {
		if c, ok := cur.Pools[id]; ok && len(p.Extra) == 0 && len(c.Extra) > 0 {
			p.Extra = maps.Clone(c.Extra)
			file.Pools[id] = p
		}
	}
	for name, r := range file.Routes {
		c, ok := cur.Routes[name]
		if !ok {
			continue
		}
		if len(r.Extra) == 0 {
			r.Extra = maps.Clone(c.Extra)
		}
		for i, tg := range r.Targets {
			for _, ct := range c.Targets {
				if ct.Pool == tg.Pool && len(tg.Extra) == 0 {
					r.Targets[i].Extra = maps.Clone(ct.Extra)
				}
			}
		}
		file.Routes[name] = r
	}
}

// withoutExtras returns a copy of cfg without the fields this regionctl
// does not know, and names the objects that had some.
func withoutExtras(cfg *routing.Config) (*routing.Config, []string) {
	out := cloneConfig(cfg)
	var had []string
	note := func(what string, x routing.Extra) {
		if len(x) > 0 {
			had = append(had, fmt.Sprintf("%s (%s)", what, strings.Join(slices.Sorted(maps.Keys(x)), ", ")))
		}
	}
	if r := out.Policy.Residency; r != nil {
		note(routing.PolicyKey, r.Extra)
		r.Extra = nil
	}
	for _, id := range slices.Sorted(maps.Keys(out.Pools)) {
		p := out.Pools[id]
		note(routing.PoolKey(id), p.Extra)
		p.Extra = nil
		out.Pools[id] = p
	}
	for _, name := range slices.Sorted(maps.Keys(out.Routes)) {
		r := out.Routes[name]
		note(routing.RouteKey(name), r.Extra)
		r.Extra = nil
		for i := range r.Targets {
			note(routing.RouteKey(name)+" target "+r.Targets[i].Pool, r.Targets[i].Extra)
			r.Targets[i].Extra = nil
		}
		out.Routes[name] = r
	}
	return out, had
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
