package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// printer writes a verb's result as a table (for people) or as JSON or
// YAML (for scripts); v is what JSON and YAML show.
type printer struct {
	format string
	w      io.Writer
}

func (a *app) printer() printer { return printer{format: a.output, w: a.stdout} }

// print writes v as JSON or YAML, or calls table with a tab writer.
func (p printer) print(v any, table func(w io.Writer)) error {
	switch p.format {
	case "json":
		var b bytes.Buffer
		enc := json.NewEncoder(&b) // Encode ends the line
		enc.SetEscapeHTML(false)   // a reason "drain & reboot" as written, not \u0026
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("encode JSON output: %w", err)
		}
		_, err := p.w.Write(b.Bytes())
		return err
	case "yaml":
		b, err := yamlOf(v)
		if err != nil {
			return fmt.Errorf("encode YAML output: %w", err)
		}
		_, err = p.w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// yamlOf encodes v as YAML. The YAML encoder refuses a string holding a
// control character (a value from etcd: a health key's addr, a reason),
// which failed the whole output: such characters are written escaped, as
// termSafe writes them (\x1b), in the text of the string.
func yamlOf(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if firstControl(js) < 0 && !bytes.Contains(js, []byte(`\u00`)) {
		return yaml.JSONToYAML(js)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	return yaml.Marshal(escapeStrings(doc))
}

// escapeStrings returns v (decoded JSON) with its strings, map keys
// included, escaped as termSafe escapes text.
func escapeStrings(v any) any {
	switch x := v.(type) {
	case string:
		var b bytes.Buffer
		termSafe{&b}.Write([]byte(x))
		return b.String()
	case []any:
		for i := range x {
			x[i] = escapeStrings(x[i])
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[escapeStrings(k).(string)] = escapeStrings(e)
		}
		return out
	}
	return v
}

// row writes one tab-separated table row. A cell's control characters
// are escaped as termSafe escapes them (\x1b, \u007f, \u0085, \u202e),
// newline and tab as \n and \t (a --reason of several lines): raw, they
// would break the table's rows and columns, or drive the terminal.
func row(w io.Writer, cols ...any) {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = cellText(fmt.Sprint(c))
	}
	fmt.Fprintln(w, strings.Join(parts, "\t"))
}

// cellText returns s as a table cell shows it: escaped as termSafe
// escapes text, and newline and tab as \n and \t; other text, quotes and
// backslashes included, as it is.
func cellText(s string) string {
	if firstControl([]byte(s)) < 0 && !strings.ContainsAny(s, "\n\t") {
		return s
	}
	var b strings.Builder
	termSafe{&b}.Write([]byte(strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(s)))
	return b.String()
}

// kvList renders a map as "k=v,k=v" in key order ("-" when empty).
func kvList(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// orDash returns s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
