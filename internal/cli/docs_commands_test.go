package cli

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/docsection"
)

// docCommand matches a regionctl invocation in a piece of code: from
// "regionctl " to the end, or to a shell separator.
var docCommand = regexp.MustCompile(`(?:^|[\s($])regionctl ((?:[^|;&#)\n]|\\\|)+)`)

// codeSpan is a Markdown code span.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// docCode returns the code of a Markdown file, by line: the lines of
// fenced blocks whole, and the code spans of the others.
func docCode(text string) [][]string {
	lines := strings.Split(text, "\n")
	out := make([][]string, len(lines))
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			out[i] = []string{l}
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(l, -1) {
			out[i] = append(out[i], m[1])
		}
	}
	return out
}

// TestDocsCommandsExist: every regionctl invocation in the docs and the
// README names a verb that exists, and flags that verb takes: the docs are
// the contract, and a renamed verb or flag (history --touching was almost
// --key) must not leave them behind.
func TestDocsCommandsExist(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../examples/php/README.md", "../../examples/js/README.md", "../../bench/README.md")
	a := &app{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	root := a.rootCmd()
	root.InitDefaultCompletionCmd() // cobra adds it at Execute; the docs name it
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == "regionctl.md" {
			checked += checkVerbsTable(t, root, f, string(b))
		}
		for n, codes := range docCode(string(b)) {
			for _, code := range codes {
				for _, m := range docCommand.FindAllStringSubmatch(code, -1) {
					if msg := checkDocCommand(root, m[1]); msg != "" {
						t.Errorf("%s:%d: regionctl %s: %s", f, n+1, strings.TrimSpace(m[1]), msg)
					}
					checked++
				}
			}
		}
	}
	if checked < 100 { // 120 on 2026-12-06
		t.Fatalf("only %d regionctl invocations found in the docs: is the pattern broken?", checked)
	}
}

// checkVerbsTable checks the first column of the "## Verbs" table of
// docs/regionctl.md, each a verb with its flags, and returns how many
// rows it checked.
func checkVerbsTable(t *testing.T, root *cobra.Command, f, text string) int {
	t.Helper()
	verbs, err := docsection.Cut(text, "## Verbs")
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	n := 0
	for _, line := range strings.Split(verbs, "\n") {
		cell, ok := strings.CutPrefix(line, "| `")
		if !ok {
			continue
		}
		// `pool drain\|undrain\|rm ID`: each alternative verb.
		code, _, _ := strings.Cut(cell, "`")
		words := strings.Fields(code)
		alts := []string{code}
		if len(words) > 1 && strings.Contains(words[1], `\|`) {
			alts = nil
			for _, v := range strings.Split(words[1], `\|`) {
				alts = append(alts, strings.Join(append([]string{words[0], v}, words[2:]...), " "))
			}
		}
		for _, cmdline := range alts {
			if msg := checkDocCommand(root, cmdline); msg != "" {
				t.Errorf("%s, verbs table: %s: %s", f, cmdline, msg)
			}
			n++
		}
	}
	if n < 20 {
		t.Fatalf("%s: only %d rows in the verbs table", f, n)
	}
	return n
}

// checkDocCommand says what is wrong with one invocation ("" when
// nothing): a verb that does not exist, a flag its verb does not take.
func checkDocCommand(root *cobra.Command, cmdline string) string {
	var words []string
	for _, w := range strings.Fields(strings.ReplaceAll(cmdline, `\|`, " ")) {
		w = strings.Trim(w, "[]{}.,:*\"'")
		if w != "" {
			words = append(words, w)
		}
	}
	if len(words) > 0 && words[0] == "…" {
		return "" // any verb: "regionctl … --wait-converged"
	}
	// The verb: the longest run of leading words that names commands.
	cmd, i := root, 0
	for ; i < len(words); i++ {
		if strings.HasPrefix(words[i], "-") {
			continue // a global flag before the verb (--user root auth apply)
		}
		var next *cobra.Command
		for _, c := range cmd.Commands() {
			if c.Name() == words[i] || c.HasAlias(words[i]) {
				next = c
			}
		}
		if next == nil {
			break
		}
		cmd = next
	}
	if cmd == root && i < len(words) && isVerbLike(words[i]) {
		return "no such verb " + words[i]
	}
	for _, w := range words {
		name, ok := strings.CutPrefix(w, "--")
		if !ok || name == "" {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		name = strings.TrimRight(name, "…")
		if cmd.Flags().Lookup(name) == nil && cmd.InheritedFlags().Lookup(name) == nil && root.PersistentFlags().Lookup(name) == nil && name != "help" {
			return "no flag --" + name + " on " + cmd.CommandPath()
		}
	}
	return ""
}

// isVerbLike tells a word that is meant as a verb from prose that
// follows "regionctl " in a sentence ("regionctl's", "regionctl writes").
func isVerbLike(w string) bool {
	return regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(w)
}
