package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/docsection"
)

// TestHelpShowsTheCaps: the API's caps are flags, shown in regiond --help
// with their defaults; so is --snapshot-group.
func TestHelpShowsTheCaps(t *testing.T) {
	out := helpShowsTheCaps(t, "--help")
	if !strings.Contains(out, "--snapshot-group string") {
		t.Errorf("regiond --help lacks --snapshot-group:\n%s", out)
	}
}

// helpShowsTheCaps runs regiond with args, checks the caps' flags and
// defaults in its output, and returns it.
func helpShowsTheCaps(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("regiond %v: %v", args, err)
	}
	for _, want := range []string{"--max-blocking-queries int", "(default 128)", "--max-connections int", "(default 256)",
		"--fd-reserve int", "(default 64)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("regiond %v lacks %q:\n%s", args, want, out.String())
		}
	}
	return out.String()
}

// TestRefusesASnapshotDirectoryNotItsOwn: regiond does not start (exit 1)
// with a world-writable snapshot directory, naming it and what is wrong,
// and writes nothing there; an unknown --snapshot-group is a usage error
// (exit 2) naming the flag.
func TestRefusesASnapshotDirectoryNotItsOwn(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "shm")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) error {
		cmd := newRootCommand()
		cmd.SetArgs(append([]string{"--endpoints=127.0.0.1:1", "--socket=", "--listen=127.0.0.1:0", "--log-level=error"}, args...))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		return cmd.Execute()
	}
	err := run("--snapshot=" + filepath.Join(open, "table.json"))
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "snapshot directory "+open+" is writable by group and others") {
		t.Fatalf("regiond with a 0777 snapshot directory: %v (exit %d), want exit 1 naming %s", err, exitCode(err), open)
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Fatalf("regiond wrote into the refused directory: %v", ents)
	}
	err = run("--snapshot="+filepath.Join(base, "new", "table.json"), "--snapshot-group=no-such-group-regiond")
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "--snapshot-group") {
		t.Fatalf("regiond with an unknown --snapshot-group: %v (exit %d), want exit 2 naming the flag", err, exitCode(err))
	}
}

// TestRefusesBadEndpointsAndTLS: before anything starts, a malformed
// --endpoints, a plaintext endpoint beside TLS flags, a --cacert without a
// certificate and a stray argument are usage errors (exit 2) naming what
// is wrong; a bare host:port is taken as http://, or https:// with TLS.
func TestRefusesBadEndpointsAndTLS(t *testing.T) {
	t.Setenv("REGIOND_PASSWORD", "")
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoints=htps://127.0.0.1:2379"}, `--endpoints "htps://127.0.0.1:2379": unknown scheme "htps"`},
		{[]string{"--endpoints=http://127.0.0.1"}, `--endpoints "http://127.0.0.1": want scheme://host:port`},
		{[]string{"--endpoints=http://127.0.0.1:2379/v3"}, `want scheme://host:port`},
		{[]string{"--endpoints=http://127.0.0.1:2379", "--cacert=" + notPEM}, "--cacert " + notPEM + ": no PEM certificate found"},
		{[]string{"stray"}, `unexpected argument "stray"`},
		{[]string{"--endpoint=http://127.0.0.1:2379"}, "unknown flag: --endpoint; did you mean --endpoints?"},
		{[]string{"--max-stale=15"}, `invalid value "15" for --max-stale: want a duration such as 30s, 5m or 1h30m`},
		// REGIOND_PASSWORD is empty (t.Setenv below): the client would not
		// log in, and run as no user.
		{[]string{"--user=node-1"}, "--user node-1: REGIOND_PASSWORD is empty"},
		// etcd's own words name no flag: these do.
		{[]string{"--endpoints=https://127.0.0.1:2379", "--cert=c.pem"}, "--cert c.pem without --key: give the client certificate's key too"},
		{[]string{"--endpoints=https://127.0.0.1:2379", "--key=k.pem"}, "--key k.pem without --cert: give the client certificate too"},
		{[]string{"--endpoints=https://127.0.0.1:2379", "--cert=" + notPEM, "--key=" + notPEM}, "TLS flags (--cert " + notPEM + ", --key " + notPEM + "): "},
	} {
		cmd := newRootCommand()
		cmd.SetArgs(append([]string{"--socket=", "--listen=127.0.0.1:0", "--snapshot=", "--log-level=error"}, tc.args...))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("regiond %v: %v (exit %d), want exit 2 with %q", tc.args, err, exitCode(err), tc.want)
		}
	}

	certs := devetcd.NewTestCerts(t)
	tlsFlags := []string{"--cacert=" + certs.CAFile, "--cert=" + certs.ClientCertFile, "--key=" + certs.ClientKeyFile}
	var f agentFlags
	fs := pflag.NewFlagSet("regiond", pflag.ContinueOnError)
	f.register(fs, false)
	if err := fs.Parse(append([]string{"--endpoints=http://127.0.0.1:2379"}, tlsFlags...)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.finish(); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "is plaintext, but --cacert, --cert or --key ask for TLS: write https://") {
		t.Errorf("http:// with TLS flags: %v, want a usage error saying to write https://", err)
	}
	f = agentFlags{}
	fs = pflag.NewFlagSet("regiond", pflag.ContinueOnError)
	f.register(fs, false)
	if err := fs.Parse(append([]string{"--endpoints=127.0.0.1:2379,https://etcd-2:2379,unixs://etcd.sock"}, tlsFlags...)); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.finish()
	if want := []string{"https://127.0.0.1:2379", "https://etcd-2:2379", "unixs://etcd.sock"}; err != nil || strings.Join(cfg.Endpoints, ",") != strings.Join(want, ",") {
		t.Errorf("endpoints with TLS: %v, %v; want %v", cfg.Endpoints, err, want)
	}
}

// TestLogFlagsTakeAnyCase: --log-format takes JSON as --log-level takes
// WARN (it refused "JSON").
func TestLogFlagsTakeAnyCase(t *testing.T) {
	var f agentFlags
	fs := pflag.NewFlagSet("regiond", pflag.ContinueOnError)
	f.register(fs, false)
	if err := fs.Parse([]string{"--log-format=JSON", "--log-level=WARN"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.finish(); err != nil {
		t.Fatalf("--log-format=JSON --log-level=WARN: %v", err)
	}
}

// TestDocsFlagsExist: every flag of docs/agent.md's flags table is one of
// regiond's, and every flag of regiond is in the table (the docs are the
// contract): with the default it says, for those that give one.
func TestDocsFlagsExist(t *testing.T) {
	table, err := docsection.Read("../../docs/agent.md", "## Flags")
	if err != nil {
		t.Fatal(err)
	}
	fs := newRootCommand().Flags()
	documented := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `--") || len(cells) < 2 {
			continue
		}
		for _, span := range strings.Split(cells[0], "`") {
			name, ok := strings.CutPrefix(span, "--")
			if !ok {
				continue
			}
			documented[name] = true
			f := fs.Lookup(name)
			if f == nil && name == "version" {
				continue // cobra's, added when regiond runs
			}
			if f == nil {
				t.Errorf("docs/agent.md documents --%s, which regiond does not have", name)
				continue
			}
			// A default in backticks must be the flag's.
			if def := strings.Trim(strings.TrimSpace(cells[1]), "`"); def != "" && !strings.Contains(cells[0], ",") &&
				!strings.ContainsAny(def, " (") && !sameDefault(def, f.DefValue) && def != "the host name" {
				t.Errorf("docs/agent.md: --%s's default %q, regiond's %q", name, def, f.DefValue)
			}
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if !documented[f.Name] && f.Name != "help" {
			t.Errorf("regiond --%s is not in docs/agent.md's flags table", f.Name)
		}
	})
}

// sameDefault compares a default as the docs write it with pflag's: a
// list without its brackets, a duration in any spelling.
func sameDefault(doc, flag string) bool {
	flag = strings.Trim(flag, "[]")
	if doc == flag {
		return true
	}
	d1, err1 := time.ParseDuration(doc)
	d2, err2 := time.ParseDuration(flag)
	return err1 == nil && err2 == nil && d1 == d2
}

// TestEveryErrorLineIsNamed: several flag errors, one per line, each
// begin with "regiond:" (the docs review: only the first did).
func TestEveryErrorLineIsNamed(t *testing.T) {
	cmd := newRootCommand()
	cmd.SetArgs([]string{"--snapshot", "rel/table.json", "--max-stale", "0", "--endpoints", "http://127.0.0.1:1"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.Execute()
	if err == nil {
		t.Fatal("regiond with two bad flags ran")
	}
	var out bytes.Buffer
	printError(&out, err)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("two bad flags printed as %q, want a line each", out.String())
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "regiond: ") {
			t.Errorf("error line %q does not begin with regiond:", l)
		}
	}
}

// TestAgentPresentsARenewedCertificate: the agent's TLS settings read the
// client certificate from --cert and --key at each new connection to
// etcd (etcd's own client TLS), so a certificate renewed in place is
// presented at the next connection, with no restart (operations.md).
func TestAgentPresentsARenewedCertificate(t *testing.T) {
	certs := devetcd.NewTestCerts(t)
	first, err := certs.IssueClient("node-1")
	if err != nil {
		t.Fatal(err)
	}
	var f agentFlags
	fs := pflag.NewFlagSet("regiond", pflag.ContinueOnError)
	f.register(fs, false)
	if err := fs.Parse([]string{"--endpoints=https://127.0.0.1:2379", "--cacert=" + certs.CAFile, "--cert=" + first.CertFile, "--key=" + first.KeyFile}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.finish()
	if err != nil {
		t.Fatal(err)
	}
	serial := func() int64 {
		t.Helper()
		if cfg.TLS.GetClientCertificate == nil {
			t.Fatal("the agent's TLS settings load the certificate once (no GetClientCertificate)")
		}
		c, err := cfg.TLS.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.Int64()
	}
	before := serial()
	renewed, err := certs.IssueClient("node-1")
	if err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{renewed.CertFile: first.CertFile, renewed.KeyFile: first.KeyFile} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	if after := serial(); after == before {
		t.Fatalf("certificate presented after a renewal in place: serial %d, the first one's", after)
	}
}

// TestLogFlagsMakeTheLogger: the logger finish builds writes to stderr,
// as text at level info by default (the docs' defaults), drops what is
// below --log-level, and writes JSON with --log-format=json. No test
// looked at what the logger wrote. (cfg.Version is not checked here: in a
// test build it is "dev", as agent.Defaults' own, so a check could not fail.)
func TestLogFlagsMakeTheLogger(t *testing.T) {
	saved := stderr
	defer func() { stderr = saved }()
	for _, tc := range []struct {
		args       []string
		json       bool
		debug, inf bool // written
	}{
		{nil, false, false, true},
		{[]string{"--log-level=warn"}, false, false, false},
		{[]string{"--log-level=debug", "--log-format=json"}, true, true, true},
	} {
		var buf bytes.Buffer
		stderr = &buf
		var f agentFlags
		fs := pflag.NewFlagSet("regiond", pflag.ContinueOnError)
		f.register(fs, false)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.finish()
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		cfg.Logger.Debug("d-line")
		cfg.Logger.Info("i-line")
		cfg.Logger.Warn("w-line")
		out := buf.String()
		if strings.Contains(out, "d-line") != tc.debug || strings.Contains(out, "i-line") != tc.inf || !strings.Contains(out, "w-line") {
			t.Errorf("%v: the logger wrote %q; want debug %v, info %v, warn true", tc.args, out, tc.debug, tc.inf)
		}
		first, _, _ := strings.Cut(out, "\n")
		if isJSON := json.Valid([]byte(first)); isJSON != tc.json || !tc.json && !strings.Contains(first, "level=") {
			t.Errorf("%v: the logger's first line %q; want JSON %v (else text)", tc.args, first, tc.json)
		}
	}
}
