package routing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// yamlToJSON converts a YAML 1.2 document to JSON. YAML 1.2 is used on
// purpose: under YAML 1.1 a bare NO (Norway) is the boolean false.
func yamlToJSON(data []byte) ([]byte, error) {
	// A UTF-16 byte order mark: the parser reads UTF-16.
	utf16 := bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff})
	if !utf16 && !utf8.Valid(data) { // the parser's own error names no place of the byte
		off := InvalidUTF8At(data)
		line := bytes.Count(data[:off], []byte("\n")) + 1
		col := off - (bytes.LastIndexByte(data[:off], '\n') + 1) + 1
		return nil, fmt.Errorf("the file is not valid UTF-8: byte 0x%02x at line %d, column %d (byte %d, counting from 0) begins no UTF-8 character", data[off], line, col, off)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return []byte("null"), nil
		}
		return nil, parserError(err, data)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, errors.New("the file holds more than one YAML document")
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return []byte("null"), nil
	}
	v, err := nodeToJSON(doc.Content[0], 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

const maxYAMLDepth = 64

// yamlParserErr matches go-yaml's parser errors, which name the line of
// the collection they were parsing counted from 0 (its scanner errors,
// "found …", "mapping values are not allowed …", and the scanner's own
// "did not find expected comment or line break" and the like, count from
// 1 and are left as they are, but for the hint below).
var yamlParserErr = regexp.MustCompile(`^yaml: line (\d+): (did not find expected (key|node content|'-' indicator|',' or '\]'|',' or '\}'|<document start>))$`)

// yamlScannerErr matches go-yaml's scanner errors, which name a line
// counted from 1: the line of the token it met, or of the quoted value it
// was reading.
var yamlScannerErr = regexp.MustCompile(`^yaml: line (\d+): ([a-z][^:]*)$`)

// yamlParserOther are go-yaml's parser errors yamlParserErr leaves out
// (directives and tags): their line is counted from 0, so scannerError
// leaves them as they are.
var yamlParserOther = map[string]bool{
	"found duplicate %TAG directive":   true,
	"found duplicate %YAML directive":  true,
	"found incompatible YAML document": true,
	"found undefined tag handle":       true,
}

// scannerError rewrites a go-yaml scanner error to show its line's text
// and, for the usual causes, what is wrong: a tab in the indentation (named
// on the line that holds it, which for "violates indentation" go-yaml
// counts as the line before), a value starting with a character YAML
// reserves, a quoted value not closed, ": " inside a plain value, a
// backslash in a "…" value. Other errors are returned as they are.
func scannerError(err error, data []byte) error {
	m := yamlScannerErr.FindStringSubmatch(err.Error())
	if m == nil || yamlParserOther[m[2]] || bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff}) {
		return err // a UTF-16 file's lines are not its bytes' lines
	}
	n, _ := strconv.Atoi(m[1])
	line, ok := lineText(data, n)
	if !ok {
		return err
	}
	tabbed := func(n int) bool {
		l, ok := lineText(data, n)
		return ok && strings.ContainsRune(l[:len(l)-len(strings.TrimLeft(l, " \t"))], '\t')
	}
	out := fmt.Sprintf("yaml: line %d: %s: %q", n, m[2], line)
	switch value := strings.TrimLeft(line, " -\t"); {
	case m[2] == "found character that cannot start any token" && tabbed(n):
		return fmt.Errorf("%s (line %d is indented with a tab: YAML indents with spaces only)", out, n)
	case m[2] == "found a tab character that violates indentation":
		for _, t := range []int{n + 1, n} {
			if tabbed(t) {
				l, _ := lineText(data, t)
				return fmt.Errorf("yaml: line %d: %s: %q (indented with a tab: YAML indents with spaces only)", t, m[2], l)
			}
		}
	case m[2] == "found character that cannot start any token":
		if _, v, ok := strings.Cut(value, ": "); ok {
			value = strings.TrimLeft(v, " ")
		}
		if value != "" && strings.ContainsRune("@`%", rune(value[0])) {
			return fmt.Errorf("%s (YAML reserves %c at the start of a value: quote the value, %q)", out, value[0], strings.TrimRight(value, " "))
		}
	case m[2] == "found unexpected end of stream" && strings.ContainsAny(line, `'"`):
		return fmt.Errorf("%s (a quoted value not closed on this line: the rest of the file was read into it)", out)
	case m[2] == "mapping values are not allowed in this context":
		return fmt.Errorf("%s (a value holding \": \" is quoted, or the line above lacks the ':' after its key)", out)
	case m[2] == "found unknown escape character":
		return fmt.Errorf("%s (in a \"…\" value a backslash starts an escape such as \\n: write \\\\ for a backslash, or quote the value with '…')", out)
	}
	return errors.New(out)
}

// parserError rewrites a go-yaml parser error to name its line counted
// from 1 (the line of the collection it was parsing, or of the token it
// met: the problem is there or below), with that line's text and what
// usually is wrong, and, for a block collection, the line that breaks the
// file when that is another (breakingLine); a character that starts no
// token on a line indented with a tab gets a hint that YAML indents with
// spaces. Other errors are returned as they are.
func parserError(err error, data []byte) error {
	msg := err.Error()
	m := yamlParserErr.FindStringSubmatch(msg)
	if m == nil {
		return scannerError(err, data)
	}
	n, _ := strconv.Atoi(m[1])
	n++
	hint := "a line indented wrong, or a list item where a key belongs"
	block := true // the error of a block collection (indentation), not of a flow one ({…}, […])
	switch m[3] {
	case "',' or '}'", "',' or ']'":
		hint = "a {…} or […] not closed, or two items without a comma between them"
		block = false
	case "'-' indicator":
		hint = "a list item without its '- ', or a line indented wrong"
	}
	text := ""
	if line, ok := lineText(data, n); ok {
		text = fmt.Sprintf(": %q", line)
	}
	out := fmt.Sprintf("yaml: %s, at line %d%s or below (%s)", m[2], n, text, hint)
	if block && !bytes.HasPrefix(data, []byte{0xff, 0xfe}) && !bytes.HasPrefix(data, []byte{0xfe, 0xff}) {
		if b := breakingLine(data, msg, parseYAML); b > 1 && b != n {
			line, _ := lineText(data, b)
			out += fmt.Sprintf("; lines 1 to %d parse, line %d breaks them: %q", b-1, b, line)
		}
	}
	return errors.New(out)
}

// lineText is line n of data (counted from 1) without its line break.
func lineText(data []byte, n int) (string, bool) {
	lines := strings.Split(string(data), "\n")
	if n < 1 || n > len(lines) {
		return "", false
	}
	return strings.TrimRight(lines[n-1], "\r"), true
}

// parseYAML decodes the first YAML document of data as yamlToJSON does,
// for its error.
func parseYAML(data []byte) error {
	var doc yaml.Node
	err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// breakingLine names the line that breaks data, whose parse (by parse,
// as parseYAML) fails with msg: go-yaml names the start of the block
// collection it was parsing (for a line indented one space short, the
// first key of the mapping hundreds of lines above), not the line it met.
// Cut at a line boundary, a prefix of block YAML parses; the first prefix
// that fails with msg names the line. Bisection finds a line k whose
// prefix up to k-1 parses and up to k fails with msg, in about
// log2(lines) parses of at most the whole file (a file of 10,000 lines:
// 14); 0 when none is found (the prefix before it fails otherwise: cut
// inside a flow collection or a quoted string).
func breakingLine(data []byte, msg string, parse func([]byte) error) int {
	ends := []int{0} // ends[k]: the length of the prefix of lines 1 to k
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	// lo's prefix does not fail with msg (the empty one parses), hi's
	// does (the whole file).
	lo, hi := 0, len(ends)-1
	var loErr error
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		err := parse(data[:ends[mid]])
		if err != nil && err.Error() == msg {
			hi = mid
		} else {
			lo, loErr = mid, err
		}
	}
	if loErr != nil {
		return 0
	}
	return hi
}

func nodeToJSON(n *yaml.Node, depth int) (any, error) {
	if depth > maxYAMLDepth {
		return nil, fmt.Errorf("line %d: nested deeper than %d levels", n.Line, maxYAMLDepth)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return nodeToJSON(n.Content[0], depth+1)
	case yaml.AliasNode:
		return nil, fmt.Errorf("line %d: YAML aliases are not supported in config files", n.Line)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping keys must be plain scalars", k.Line)
			}
			if k.Tag == "!!merge" {
				return nil, fmt.Errorf("line %d: YAML merge keys (<<) are not supported in config files", k.Line)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: key %q defined twice", k.Line, k.Value)
			}
			val, err := nodeToJSON(v, depth+1)
			if err != nil {
				return nil, err
			}
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			val, err := nodeToJSON(c, depth+1)
			if err != nil {
				return nil, err
			}
			s = append(s, val)
		}
		return s, nil
	case yaml.ScalarNode:
		return scalarToJSON(n)
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

func scalarToJSON(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return b, nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return json.Number(strconv.FormatInt(i, 10)), nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		b, err := json.Marshal(f)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v is not a JSON number", n.Line, n.Value)
		}
		return json.RawMessage(b), nil
	}
	return n.Value, nil
}
