// Package docsection reads one section of a Markdown file, for the tests
// that check the docs (the contract) against the code: a flags table, the
// metrics list, the alerts an operator is told of.
package docsection

import (
	"fmt"
	"os"
	"strings"
)

// Read returns the body of the section of the Markdown file at path whose
// heading line is heading ("## Flags"), up to the next heading of the same
// level or the end of the file.
func Read(path, heading string) (string, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("docsection: %w", err)
	}
	return Cut(string(doc), heading)
}

// Cut is Read of a document already read.
func Cut(doc, heading string) (string, error) {
	level, _, _ := strings.Cut(heading, " ")
	_, body, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return "", fmt.Errorf("docsection: no %q section", heading)
	}
	body, _, _ = strings.Cut(body, "\n"+level+" ")
	return body, nil
}
