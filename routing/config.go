package routing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is the whole operator-owned routing configuration: what `regionctl
// apply -f` reads and `regionctl export` writes. Overrides, health markers
// and the epoch are not part of it.
type Config struct {
	// Policy holds the policy keys (the residency policy).
	Policy PolicySection `json:"policy"`
	// Pools are the pools, keyed by pool id.
	Pools map[string]Pool `json:"pools"`
	// Routes are the routes, keyed by route name.
	Routes map[string]Route `json:"routes"`
}

// PolicySection holds the policy keys of a config file.
type PolicySection struct {
	// Residency is the residency policy; nil when none is set (the
	// built-in one applies: DefaultResidency).
	Residency *Residency `json:"residency,omitempty"`
}

// ResidencyOrDefault returns the configured residency policy, or the
// built-in eu class when none is set.
func (c *Config) ResidencyOrDefault() Residency {
	if c.Policy.Residency != nil {
		return *c.Policy.Residency
	}
	return DefaultResidency()
}

// ParseConfig reads a config file (YAML or JSON). Decoding is strict: an
// unknown field anywhere is an error, as is a wrong type or enum. Every
// problem found is returned, each naming its key and field.
func ParseConfig(data []byte) (*Config, error) {
	js, err := yamlToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, fmt.Errorf("parse config: file is empty")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, fmt.Errorf("parse config: the file must be a mapping with policy, pools and routes: %w", err)
	}
	var errs Errors
	for k := range top {
		if k != "policy" && k != "pools" && k != "routes" {
			errs.add("", k, "unknown top-level section (want policy, pools, routes)")
		}
	}
	cfg := &Config{Pools: map[string]Pool{}, Routes: map[string]Route{}}
	if raw, ok := top["policy"]; ok {
		var pol map[string]json.RawMessage
		if err := json.Unmarshal(raw, &pol); err != nil {
			errs.add("", "policy", "must be a mapping")
		}
		for k, v := range pol {
			if k != "residency" {
				errs.add("", "policy."+k, "unknown policy (want residency)")
				continue
			}
			if val, ok := decodeStrict(&errs, PolicyKey, v); ok {
				cfg.Policy.Residency = val.(*Residency)
			}
		}
	}
	decodeSection(&errs, top["pools"], "pools", func(id string, v Value) { cfg.Pools[id] = *v.(*Pool) })
	decodeSection(&errs, top["routes"], "routes", func(id string, v Value) { cfg.Routes[id] = *v.(*Route) })
	if len(errs) > 0 {
		errs.Sort()
		return nil, errs
	}
	return cfg, nil
}

func decodeSection(errs *Errors, raw json.RawMessage, section string, set func(string, Value)) {
	if raw == nil {
		return
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		errs.add("", section, "must be a mapping of id to object")
		return
	}
	for id, v := range m {
		if val, ok := decodeStrict(errs, section+"/"+id, v); ok {
			set(id, val)
		}
	}
}

// decodeStrict decodes one value of a config file and refuses unknown
// fields, at the top level and inside nested objects. Its size is not
// measured here (decodeFileValue).
func decodeStrict(errs *Errors, rel string, raw []byte) (Value, bool) {
	v, unknown, err := decodeFileValue(rel, raw)
	if err != nil {
		if es, ok := err.(Errors); ok {
			*errs = append(*errs, es...)
			// A misspelt field ("residncy") is often why a check fails
			// (residency missing): name it too.
			for _, k := range unknownFields(rel, raw) {
				errs.add(rel, k, "%s", unknownFieldMsg(rel, k))
			}
		} else {
			// A key error (bad id or name) already names the key.
			errs.add(rel, "", "%s", strings.TrimPrefix(err.Error(), fmt.Sprintf("key %q: ", rel)))
		}
		return nil, false
	}
	var extra Extra
	switch x := v.(type) {
	case *Pool:
		extra = x.Extra
	case *Route:
		extra = x.Extra
	case *Residency:
		extra = x.Extra
	}
	unknown = append(unknown, sortedKeys(extra)...)
	if len(unknown) > 0 {
		for _, k := range unknown {
			errs.add(rel, k, "%s", unknownFieldMsg(rel, k))
		}
		return nil, false
	}
	return v, true
}

// unknownFields returns the unknown fields of a value of key rel, top
// level and nested, whatever its checks say of the rest; nil when it does
// not decode as an object.
func unknownFields(rel string, raw []byte) []string {
	k, err := ParseKey(rel)
	if err != nil {
		return nil
	}
	var v any
	var extra func() Extra
	switch k.Kind {
	case KindPool:
		p := new(Pool)
		v, extra = p, func() Extra { return p.Extra }
	case KindRoute:
		r := new(Route)
		v, extra = r, func() Extra { return r.Extra }
	case KindPolicy:
		r := new(Residency)
		v, extra = r, func() Extra { return r.Extra }
	default:
		return nil
	}
	unknown, _ := unmarshalUnknown(raw, v, false)
	return append(unknown, sortedKeys(extra())...)
}

// Values returns the config as the values stored under <root>/routing/,
// keyed by relative key, each compact JSON (encodeValue: the bytes a
// write puts, which Validate measures). A config without a residency
// policy stores none (the agent then uses the built-in default).
func (c *Config) Values() (map[string][]byte, error) {
	out := make(map[string][]byte, len(c.Pools)+len(c.Routes)+1)
	if c.Policy.Residency != nil {
		b, err := encodeValue(c.Policy.Residency)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", PolicyKey, err)
		}
		out[PolicyKey] = b
	}
	for id, p := range c.Pools {
		b, err := encodeValue(p)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", PoolKey(id), err)
		}
		out[PoolKey(id)] = b
	}
	for name, r := range c.Routes {
		b, err := encodeValue(r)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", RouteKey(name), err)
		}
		out[RouteKey(name)] = b
	}
	return out, nil
}

// encodeValue encodes a config value as regionctl writes it: compact
// JSON, with "&", "<" and ">" in strings escaped as \u0026, \u003c and
// \u003e (json.Marshal's HTML escaping; every value regionctl has written
// is so, and the agents' table JSON copies a pool's unknown fields as stored,
// so the bytes are kept). Validate measures these bytes.
func encodeValue(v any) ([]byte, error) {
	return json.Marshal(v)
}

// YAML returns the config as a config file.
func (c *Config) YAML() ([]byte, error) {
	return yaml.Marshal(c)
}

// Clone returns a deep copy of the config, safe to change.
func (c *Config) Clone() *Config {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("routing: clone config: %v", err))
	}
	out := &Config{}
	if err := json.Unmarshal(b, out); err != nil {
		panic(fmt.Sprintf("routing: clone config: %v", err))
	}
	if out.Pools == nil {
		out.Pools = map[string]Pool{}
	}
	if out.Routes == nil {
		out.Routes = map[string]Route{}
	}
	return out
}

// IsConfigKey reports whether a relative key belongs to the operator config
// (pools, routes, policy) rather than to runtime state (overrides, health,
// epoch).
func IsConfigKey(rel string) bool {
	k, err := ParseKey(rel)
	return err == nil && (k.Kind == KindPool || k.Kind == KindRoute || k.Kind == KindPolicy)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
