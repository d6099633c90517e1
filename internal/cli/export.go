package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/regiond/regiond/routing"
)

func (a *app) exportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print the stored config as a config file (YAML; -o json for JSON)",
		Long: `export prints pools, routes and policy in the format apply reads;
applying the output unchanged is a no-op. Boosts and health keys are
runtime state and are not exported.

A stored value that does not decode (a hand edit: regionctl validate says
what is wrong) cannot be exported: it is left out and named on stderr,
and apply --prune of the output deletes it, while agents serve its last
good value until then. Fix it first (pool set, route set), or leave
--prune out. Stored fields this regionctl does not know are left out
too, named on stderr, and kept by apply.`,
		Example: `  regionctl export > fleet.yaml
  regionctl export -o json | jq '.routes.PL'
  regionctl export kv --out kv.json   # per-country values for an edge KV store`,
		Args: exactArgs(0, "no arguments"),
	}
	cmd.AddCommand(a.exportKVCmd())
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		return a.runExport(ctx)
	})
	return cmd
}

func (a *app) runExport(ctx context.Context) error {
	cur, err := a.load(ctx)
	if err != nil {
		return err
	}
	for _, k := range cur.InvalidConfigKeys() {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s: the stored value does not decode, so it is not exported: apply --prune of this output deletes it "+
			"(agents serve its last good value until then); fix it first (regionctl validate says what is wrong)\n", k)
	}
	cfg, extras := withoutExtras(cur.Config)
	for _, x := range extras {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s: stored fields this regionctl does not know are not exported (a config file is strict); apply keeps them\n", x)
	}
	if a.output == "json" {
		return a.printer().print(cfg, nil)
	}
	b, err := configYAML(cfg)
	if err != nil {
		return fmt.Errorf("encode config as YAML: %w (regionctl export -o json writes it as JSON)", err)
	}
	_, err = a.stdout.Write(b)
	return err
}

// configYAML returns cfg as a config file, as routing.Config.YAML writes
// it, but for the strings (map keys included) holding a character the
// YAML encoder refuses (DEL, U+0085: the whole export failed), changes on
// the way back (U+0085 read as a line break) or writes raw (an ESC, a
// right-to-left override U+202E): those are written double-quoted, with
// the characters escaped (yamlQuote), which the config reader reads back
// to the same string. Export then apply stays a no-op.
func configYAML(cfg *routing.Config) ([]byte, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	// Each such string is encoded as a stand-in, a plain scalar the
	// encoder writes as it is, then replaced by its quoted form. The
	// stand-ins are distinct, none is in another, and none is in the
	// config.
	base := "regionctl-quoted-"
	for bytes.Contains(js, []byte(base)) {
		base += "x-"
	}
	standIn := map[string]string{}
	var pairs []string
	doc = replaceStrings(doc, func(s string) string {
		if !needsYAMLQuote(s) {
			return s
		}
		si, ok := standIn[s]
		if !ok {
			si = fmt.Sprintf("%s%d-end", base, len(standIn))
			standIn[s] = si
			pairs = append(pairs, si, yamlQuote(s))
		}
		return si
	})
	if len(pairs) == 0 {
		return cfg.YAML()
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	for i := 0; i < len(pairs); i += 2 {
		if !bytes.Contains(b, []byte(pairs[i])) {
			return nil, fmt.Errorf("the YAML encoder changed the stand-in for the string %s", pairs[i+1])
		}
	}
	return []byte(strings.NewReplacer(pairs...).Replace(string(b))), nil
}

// replaceStrings returns v (decoded JSON) with each string, map keys
// included, replaced by f's result.
func replaceStrings(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case []any:
		for i := range x {
			x[i] = replaceStrings(x[i], f)
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[f(k)] = replaceStrings(e, f)
		}
		return out
	}
	return v
}

// needsYAMLQuote reports whether s holds a character that yamlQuote
// escapes but newline and tab, which the YAML encoder writes well.
func needsYAMLQuote(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r != '\n' && r != '\t' && yamlEscaped(r) })
}

// yamlEscaped reports whether yamlQuote writes r as an escape: the ASCII
// controls, DEL, the C1 controls and Unicode's format characters (what
// termSafe escapes), the line and paragraph separators (go-yaml reads
// them as line breaks) and the noncharacters U+FFFE and U+FFFF (YAML
// does not allow them raw).
func yamlEscaped(r rune) bool {
	return r < 0x20 || r >= 0x7f && r <= 0x9f || unicode.Is(unicode.Cf, r) ||
		r == 0x2028 || r == 0x2029 || r == 0xfffe || r == 0xffff
}

// yamlQuote returns s as a YAML double-quoted scalar holding no raw
// control character: \n, \t, other ASCII controls as \x1b, DEL, C1
// and format characters as \u007f, \u0085, \u202e (as termSafe writes
// them; YAML reads them back as the same characters), " and \ escaped.
func yamlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"', r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			fmt.Fprintf(&b, `\x%02x`, r)
		case yamlEscaped(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
