package fleettest

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/regiond/regiond/internal/testprog"
)

// NodeInstallHint says how to get the node that runs the JS reader.
const NodeInstallHint = "install Node.js 18+, e.g. `apt-get update && apt-get install -y nodejs`"

var (
	nodeOnce sync.Once
	nodePath string
	nodeErr  error
)

// Node returns the node binary that runs the JS reader's tests (Node 18+:
// Debian bookworm's nodejs; the module uses nothing newer). A missing or
// older node skips the test, naming it, unless CI=true: then it fails.
func Node(t testing.TB) string {
	t.Helper()
	nodeOnce.Do(func() {
		nodePath, nodeErr = exec.LookPath("node")
		if nodeErr != nil {
			nodeErr = fmt.Errorf("node not found in PATH: %w", nodeErr)
			return
		}
		out, err := exec.Command(nodePath, "-p", "process.versions.node").CombinedOutput()
		if err != nil {
			nodeErr = fmt.Errorf("%s does not run: %v: %s", nodePath, err, out)
			return
		}
		major, _, _ := strings.Cut(strings.TrimSpace(string(out)), ".")
		if n, err := strconv.Atoi(major); err != nil || n < 18 {
			nodeErr = fmt.Errorf("%s is Node %s, the reader needs 18+", nodePath, strings.TrimSpace(string(out)))
		}
	})
	if nodeErr != nil {
		testprog.Missing(t, nodeErr.Error(), NodeInstallHint)
	}
	return nodePath
}

// JSDriver returns the path of the JS reader's test driver,
// examples/js/testdata/driver.mjs.
func JSDriver() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "js", "testdata", "driver.mjs")
}

// JSFullKeys is how many keys of a JS sweep go through the whole path per
// decision (a KV get, or an index open and read: 14–380 µs each, see
// examples/js/README.md), besides the decision without a key; the other
// keys go through decideEntry on the header and entry that path read once
// for the header.
const JSFullKeys = 20

// SweepJS runs the JS driver's sweep of headers × (no key, keys) in mode
// (kv, idx, idx-async or idx-cached) on file with max age maxAge seconds, in one node
// process, and decodes it.
func SweepJS(t testing.TB, mode, file string, maxAge int, headers, keys []string) *Sweep {
	t.Helper()
	hx := func(ss []string) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = hex.EncodeToString([]byte(s))
		}
		return out
	}
	in, err := json.Marshal(map[string]any{"headers": hx(headers), "keys": hx(keys), "full": JSFullKeys})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Node(t), JSDriver(), "sweep", mode, file, strconv.Itoa(maxAge))
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node driver.mjs sweep %s %s: %v\nstderr: %s", mode, file, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Fatalf("node driver.mjs sweep %s %s wrote to stderr: %s", mode, file, stderr.String())
	}
	s, err := ReadSweep("JS "+mode, stdout.Bytes(), headers, keys)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
