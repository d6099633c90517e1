package php_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// TestReaderUnderOpenBasedirSaysWhy: with an owner and open_basedir
// excluding the snapshot's directory, load() throws its own message (the
// directory and the restriction) and PHP warns of nothing before it
// (realpath()'s open_basedir warning is the reader's to suppress).
func TestReaderUnderOpenBasedirSaysWhy(t *testing.T) {
	bin := php(t)
	now := time.Now()
	snapshot := filepath.Join(shmTempDir(t), "table.json")
	writeSnapshotAt(t, snapshot, compile(t, fleet(t), routing.CompileOptions{Now: now}))
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	code := `require 'RegiondTable.php';
try { \Regiond\RegiondTable::load($argv[1], owner: (int) $argv[2]); echo "loaded\n"; }
catch (\Regiond\TableException $e) { echo $e->getMessage(), "\n"; }`
	cmd := exec.Command(bin, "-d", "display_errors=stderr", "-d", "log_errors=0", "-d", "error_reporting=-1",
		"-d", "open_basedir="+here+"/", "-r", code, "--", snapshot, strconv.Itoa(os.Geteuid()))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("php: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "snapshot directory "+filepath.Dir(snapshot)) || !strings.Contains(stdout.String(), "open_basedir") {
		t.Errorf("load() outside open_basedir said %q, want the directory and the open_basedir restriction", stdout.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("PHP wrote before the reader's message: %s", stderr.String())
	}
}
