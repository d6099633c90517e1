package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/regiond/regiond/internal/devetcd"
)

// TestExposedKeyFileIsWarnedAbout: a --key its group or others may read
// is warned about at start, naming it, its mode and the way to close it
// (the auth review: the agent took it silently; only the package's
// postinst warned); a key of mode 0600 is not.
func TestExposedKeyFileIsWarnedAbout(t *testing.T) {
	saved := stderr
	defer func() { stderr = saved }()
	certs := devetcd.NewTestCerts(t)
	for _, mode := range []os.FileMode{0o600, 0o640} {
		if err := os.Chmod(certs.ClientKeyFile, mode); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		stderr = &buf
		var f agentFlags
		fs := pflag.NewFlagSet("regiond", pflag.ContinueOnError)
		f.register(fs, false)
		if err := fs.Parse([]string{"--cacert", certs.CAFile, "--cert", certs.ClientCertFile, "--key", certs.ClientKeyFile, "--endpoints", "https://127.0.0.1:2379"}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.finish(); err != nil {
			t.Fatal(err)
		}
		want := "--key " + certs.ClientKeyFile + " may be read by its group or others (mode 0640): whoever reads it can act as the certificate's etcd user; chown it to the user this runs as and chmod 0400 it"
		if warned := strings.Contains(buf.String(), want); warned != (mode == 0o640) {
			t.Errorf("key of mode %#o: the log %q; want the warning %v", mode, buf.String(), mode == 0o640)
		}
	}
}
