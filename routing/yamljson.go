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
// 1 and are left as they are).
var yamlParserErr = regexp.MustCompile(`^yaml: line (\d+): (did not find expected (key|node content|'-' indicator|',' or '\]'|',' or '\}'|<document start>))$`)

// parserError rewrites a go-yaml parser error to name its line counted
// from 1 (the line of the collection it was parsing, or of the token it
// met: the problem is there or below), with that line's text and what
// usually is wrong; other errors are returned as they are.
func parserError(err error, data []byte) error {
	m := yamlParserErr.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	n, _ := strconv.Atoi(m[1])
	n++
	hint := "a line indented wrong, or a list item where a key belongs"
	switch m[3] {
	case "',' or '}'", "',' or ']'":
		hint = "a {…} or […] not closed, or two items without a comma between them"
	case "'-' indicator":
		hint = "a list item without its '- ', or a line indented wrong"
	}
	lines := strings.Split(string(data), "\n")
	text := ""
	if n >= 1 && n <= len(lines) {
		text = fmt.Sprintf(": %q", strings.TrimRight(lines[n-1], "\r"))
	}
	return fmt.Errorf("yaml: %s, at line %d%s or below (%s)", m[2], n, text, hint)
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
