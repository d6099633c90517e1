package cli

import (
	"strconv"
	"strings"

	"github.com/regiond/regiond/routing"
)

// parseTargets parses POOL=WEIGHT arguments.
func parseTargets(specs []string) ([]routing.Target, error) {
	out := make([]routing.Target, 0, len(specs))
	for _, spec := range specs {
		// Pool ids hold no comma: "a=60,b=40" is two targets, as
		// --down a,b is two pools.
		for _, s := range strings.Split(spec, ",") {
			pool, w, ok := strings.Cut(s, "=")
			n, err := strconv.Atoi(w)
			if !ok || pool == "" || err != nil {
				return nil, usagef("--target %q: want POOL=WEIGHT (e.g. eu-central=70), repeated or comma-separated", spec)
			}
			out = append(out, routing.Target{Pool: pool, Weight: n})
		}
	}
	return out, nil
}

// applyAttrs sets k=v attributes on m (an empty value keeps the attribute
// with an empty value) and removes the names in unset.
func applyAttrs(m map[string]string, set, unset []string) (map[string]string, error) {
	out := make(map[string]string, len(m)+len(set))
	for k, v := range m {
		out[k] = v
	}
	for _, s := range set {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, usagef("--attr %q: want KEY=VALUE", s)
		}
		out[k] = v
	}
	for _, k := range unset {
		delete(out, k)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
