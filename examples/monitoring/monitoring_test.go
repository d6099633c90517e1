// Package monitoring_test checks the example alert rules (prometheus/) and
// the Grafana dashboard (grafana/) against the metrics a real agent
// exports, and runs promtool over the rules and their unit tests.
package monitoring_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/testprog"
)

const (
	rulesFile     = "prometheus/regiond.rules.yml"
	rulesTestFile = "prometheus/regiond.rules.test.yml"
	dashboardFile = "grafana/regiond.json"
)

// exportedMetrics runs an agent against an embedded etcd holding the
// example fleet, with every part on (API, snapshot writer, watch), and
// returns the names of the series its /metrics serves: each family's name,
// and _sum, _count (and _bucket) for summaries and histograms.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	fleettest.Load(t, cli, "/regiond/v1/routing/")
	dir := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.Endpoints, cfg.Node = srv.Endpoints, "monitoring-test"
	cfg.Socket, cfg.Listen = filepath.Join(dir, "run", "regiond.sock"), "127.0.0.1:0"
	cfg.Snapshot = filepath.Join(dir, "shm", "table.json")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	// The snapshot file exists once the mirror has a table and the writer runs.
	for i := 0; ; i++ {
		if _, err := os.Stat(cfg.Snapshot); err == nil {
			break
		}
		if i == 400 {
			t.Fatal("the agent wrote no snapshot file")
		}
		time.Sleep(25 * time.Millisecond)
	}
	// Vectors show once they have a series: a decision, and one with a
	// reason (an unknown viewer, served by _default past a residency block).
	for _, cc := range []string{"DE", "XX"} {
		resp, err := http.Get("http://" + a.Addr() + "/v1/resolve?country=" + cc + "&key=k")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	fams, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{"up": true} // Prometheus's own, per target
	for _, f := range fams {
		names[f.GetName()] = true
		switch f.GetType().String() {
		case "SUMMARY":
			names[f.GetName()+"_sum"], names[f.GetName()+"_count"] = true, true
		case "HISTOGRAM":
			names[f.GetName()+"_sum"], names[f.GetName()+"_count"], names[f.GetName()+"_bucket"] = true, true, true
		}
	}
	return names
}

// metricRE finds the metric names of a PromQL expression: the agent's
// (regiond_), the Go runtime's and the process's, and up.
var metricRE = regexp.MustCompile(`\b(?:regiond|go|process)_[a-zA-Z0-9_]+\b|\bup\b`)

// unknownMetrics returns the metrics expr names that are not in exported.
func unknownMetrics(expr string, exported map[string]bool) []string {
	var out []string
	for _, m := range metricRE.FindAllString(expr, -1) {
		if !exported[m] {
			out = append(out, m)
		}
	}
	return out
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert  string            `yaml:"alert"`
			Expr   string            `yaml:"expr"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// dashboardExprs returns every PromQL expression of the dashboard, by
// where it is, after checking the panels' structure.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title, UID string
		Panels     []struct {
			ID      int
			Title   string
			Type    string
			GridPos struct{ X, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			}
		}
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s does not parse: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: title %q, uid %q, %d panels", dashboardFile, d.Title, d.UID, len(d.Panels))
	}
	exprs, ids := map[string]string{}, map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos x=%d w=%d h=%d outside Grafana's 24 columns", p.Title, p.GridPos.X, p.GridPos.W, p.GridPos.H)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: query %d is empty", p.Title, i)
			}
			exprs[p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			exprs["variable "+v.Name], _ = q["query"].(string)
		}
	}
	return exprs
}

// The dashboard parses and every query names only metrics the agent
// exports; the alert rules too, and each alert has a unit test in which it
// fires.
func TestMonitoringNamesOnlyExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	for where, expr := range dashboardExprs(t) {
		if bad := unknownMetrics(expr, exported); len(bad) > 0 {
			t.Errorf("dashboard %s: %v not exported by the agent (expr %s)", where, bad, expr)
		}
	}
	var rules ruleFile
	readYAML(t, rulesFile, &rules)
	var tests ruleTests
	readYAML(t, rulesTestFile, &tests)
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if bad := unknownMetrics(r.Expr, exported); len(bad) > 0 {
				t.Errorf("alert %s: %v not exported by the agent (expr %s)", r.Alert, bad, r.Expr)
			}
			if r.Labels["severity"] == "" {
				t.Errorf("alert %s has no severity label", r.Alert)
			}
			if !fires[r.Alert] {
				t.Errorf("alert %s has no unit test in %s in which it fires", r.Alert, rulesTestFile)
			}
		}
	}
	if n < 6 {
		t.Fatalf("%s: %d alerts, want at least the six of issue 14", rulesFile, n)
	}
}

// unknownMetrics is live: a name the agent does not export is caught.
func TestUnknownMetricsCatchesTypos(t *testing.T) {
	exported := map[string]bool{"regiond_watch_connected": true, "up": true}
	got := unknownMetrics(`regiond_watch_conected == 0 and on(instance) up{job="regiond"} and regiond_watch_connected`, exported)
	sort.Strings(got)
	if strings.Join(got, ",") != "regiond_watch_conected" {
		t.Fatalf("unknownMetrics = %v, want the misspelt name only", got)
	}
}

// promtool accepts the rules and their unit tests pass.
func TestPromtool(t *testing.T) {
	promtool := testprog.Need(t, "promtool", "apt-get install -y prometheus")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		args[len(args)-1] = filepath.Base(args[len(args)-1])
		cmd.Args = append([]string{promtool}, args...)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
