package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/regiond/regiond/internal/version"
)

// regionctl version prints the build's version without reaching etcd, as
// text and as JSON.
func TestVersionVerb(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v1.2.3-4-gabcdef0"
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"--endpoints", "127.0.0.1:1", "version"}, &out, &errb); code != ExitOK {
		t.Fatalf("version: exit %d: %s", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "regionctl v1.2.3-4-gabcdef0 (go") {
		t.Errorf("version printed %q", out.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"version", "-o", "json"}, &out, &errb); code != ExitOK {
		t.Fatalf("version -o json: exit %d: %s", code, errb.String())
	}
	var v versionInfo
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Version != "v1.2.3-4-gabcdef0" || v.Go == "" {
		t.Errorf("version -o json: %q (%v)", out.String(), err)
	}
}
