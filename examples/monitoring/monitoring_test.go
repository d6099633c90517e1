// Package monitoring_test checks the example alert rules (prometheus/) and
// the Grafana dashboard (grafana/) against the metrics a real agent
// exports, and runs promtool over the rules and their unit tests.
package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/regiond/regiond/internal/docsection"
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

// ruleExprs returns the expression of every alert rule, by alert name, and
// the names of the fleet group's alerts.
func ruleExprs(t *testing.T) (exprs map[string]string, fleet []string) {
	t.Helper()
	var rules ruleFile
	readYAML(t, rulesFile, &rules)
	exprs = map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
			if g.Name == "regiond-fleet" {
				fleet = append(fleet, r.Alert)
			}
		}
	}
	if len(fleet) == 0 {
		t.Fatalf("%s: no group regiond-fleet", rulesFile)
	}
	return exprs, fleet
}

// panelExprs is dashboardExprs without the variables' queries.
func panelExprs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for where, e := range dashboardExprs(t) {
		if !strings.HasPrefix(where, "variable ") {
			out[where] = e
		}
	}
	return out
}

// Signals the alert rules use that no panel needs to show. Add a metric
// here only with a comment saying where the operator sees it instead.
var notOnDashboard = map[string]string{
	// An info reminder about the config, alike on every agent, not a
	// node's health: regionctl get pools lists the pools out with who
	// took each out, when and why.
	"regiond_table_pools_out": "regionctl get pools",
}

// Every metric an alert rule uses has a panel: what pages can be seen.
func TestDashboardShowsEveryAlertSignal(t *testing.T) {
	rules, _ := ruleExprs(t)
	onDashboard := map[string]bool{}
	for _, e := range panelExprs(t) {
		for _, m := range metricRE.FindAllString(e, -1) {
			onDashboard[m] = true
		}
	}
	for alert, e := range rules {
		for _, m := range metricRE.FindAllString(e, -1) {
			if !onDashboard[m] && notOnDashboard[m] == "" {
				t.Errorf("alert %s uses %s, which no dashboard panel shows (add a panel, or list it in notOnDashboard saying why)", alert, m)
			}
		}
	}
}

// Every alert is named in docs/operations.md's Alerting section, where an
// operator looks up what pages them (the docs review found one that was
// not).
func TestEveryAlertIsDocumented(t *testing.T) {
	section, err := docsection.Read("../../docs/operations.md", "## Alerting")
	if err != nil {
		t.Fatal(err)
	}
	rules, _ := ruleExprs(t)
	for alert := range rules {
		if !regexp.MustCompile(`\b` + alert + `\b`).MatchString(section) {
			t.Errorf("alert %s is not named in docs/operations.md's Alerting section", alert)
		}
	}
}

// selectorRE finds each metric of an expression with its label matchers,
// if any.
var selectorRE = regexp.MustCompile(`(` + metricRE.String() + `)(\{[^}]*\})?`)

// jobMatcherRE finds a matcher on the job label.
var jobMatcherRE = regexp.MustCompile(`\bjob\s*(=~|!~|!=|=)\s*"[^"]*"`)

// filterProblems says what keeps a panel's expression from following the
// dashboard's variables: each selector filters by job and fleet, one at
// least by instance (a fleet's side of a comparison takes every instance
// of it), and none names a job.
func filterProblems(expr string) []string {
	var out []string
	for _, m := range selectorRE.FindAllStringSubmatch(expr, -1) {
		if !strings.Contains(m[2], `job=~"$job"`) || !strings.Contains(m[2], `fleet=~"$fleet"`) {
			out = append(out, fmt.Sprintf(`%s%s: want {job=~"$job",fleet=~"$fleet",…}`, m[1], m[2]))
		}
	}
	if !strings.Contains(expr, `instance=~"$instance"`) {
		out = append(out, `no selector filters by instance=~"$instance"`)
	}
	for _, j := range jobMatcherRE.FindAllString(expr, -1) {
		if j != `job=~"$job"` {
			out = append(out, "names a job: "+j)
		}
	}
	return out
}

// Every panel follows the job, fleet and instance variables, and no query
// names a job: the agents' jobs are named as the operator likes.
func TestDashboardFollowsItsVariables(t *testing.T) {
	for where, e := range panelExprs(t) {
		for _, p := range filterProblems(e) {
			t.Errorf("dashboard %s: %s (expr %s)", where, p, e)
		}
	}
	vars := dashboardExprs(t)
	for _, v := range []string{"job", "fleet", "instance"} {
		if vars["variable "+v] == "" {
			t.Errorf("dashboard: no variable %s", v)
		}
	}
	rules, _ := ruleExprs(t)
	for alert, e := range rules {
		if j := jobMatcherRE.FindString(e); j != "" {
			t.Errorf("alert %s names a job (%s): the agents' jobs are named as the operator likes", alert, j)
		}
	}
}

// groupingRE finds the label lists of by, without, on and ignoring.
var groupingRE = regexp.MustCompile(`\b(by|without|on|ignoring)\s*\(([^)]*)\)`)

func labelSet(list string) string {
	var ls []string
	for _, l := range strings.Split(list, ",") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	sort.Strings(ls)
	return strings.Join(ls, ",")
}

// fleetGrouping returns the labels the fleet rules compare agents by, after
// checking every fleet rule groups by that same set.
func fleetGrouping(t *testing.T) string {
	t.Helper()
	rules, fleet := ruleExprs(t)
	key := ""
	for _, alert := range fleet {
		for _, m := range groupingRE.FindAllStringSubmatch(rules[alert], -1) {
			ls := labelSet(m[2])
			if strings.Contains(","+ls+",", ",instance,") || strings.Contains(","+ls+",", ",version,") {
				continue // per agent (count by (job, fleet, version) lists versions)
			}
			if key == "" {
				key = ls
			} else if ls != key {
				t.Errorf("alert %s groups by (%s), another fleet rule by (%s)", alert, ls, key)
			}
		}
	}
	if !strings.Contains(","+key+",", ",job,") {
		t.Fatalf("the fleet rules group by (%s), without job", key)
	}
	return key
}

// groupingProblems says where expr groups agents into fleets otherwise
// than by key: a by/on list naming job or fleet but not instance (nor
// version: agents counted by version) must be key, and so must the on of
// a group_left/group_right (an agent against its fleet).
func groupingProblems(expr, key string) []string {
	var out []string
	has := func(ls, l string) bool { return strings.Contains(","+ls+",", ","+l+",") }
	for _, m := range groupingRE.FindAllStringSubmatch(expr, -1) {
		ls := labelSet(m[2])
		if (m[1] == "by" || m[1] == "on") && (has(ls, "job") || has(ls, "fleet")) && !has(ls, "instance") && ls != key {
			out = append(out, fmt.Sprintf("%s (%s), not the fleet rules' (%s)", m[1], ls, key))
		}
	}
	if strings.Contains(expr, "group_left") || strings.Contains(expr, "group_right") {
		ok := false
		for _, m := range groupingRE.FindAllStringSubmatch(expr, -1) {
			ok = ok || (m[1] == "on" && labelSet(m[2]) == key)
		}
		if !ok {
			out = append(out, fmt.Sprintf("compares an agent with its fleet but not on (%s)", key))
		}
	}
	return out
}

// A panel that compares an agent with its fleet groups agents as the fleet
// rules do (job and fleet): two fleets in one job are not one fleet.
func TestDashboardGroupsFleetsAsTheRules(t *testing.T) {
	key := fleetGrouping(t)
	n := 0
	for where, e := range panelExprs(t) {
		for _, p := range groupingProblems(e, key) {
			t.Errorf("dashboard %s: %s (expr %s)", where, p, e)
		}
		if strings.Contains(e, "group_right") {
			n++
		}
	}
	if n < 2 {
		t.Errorf("dashboard: %d panels compare an agent with its fleet (group_right), want the epoch and revision lags", n)
	}
}

// The checks above are live: the dashboard's past mistakes are caught.
func TestDashboardChecksCatchPastMistakes(t *testing.T) {
	if p := filterProblems(`up{job="regiond",instance=~"$instance"}`); len(p) != 2 {
		t.Errorf("filterProblems of a hard-coded job = %q, want the missing fleet filter and the job named", p)
	}
	if p := filterProblems(`regiond_watch_epoch{instance=~"$instance"}`); len(p) != 1 {
		t.Errorf("filterProblems of an instance-only selector = %q, want one", p)
	}
	if p := filterProblems(`max by (job, fleet) (regiond_watch_epoch{job=~"$job",fleet=~"$fleet"}) - on (job, fleet) group_right regiond_watch_epoch{job=~"$job",fleet=~"$fleet",instance=~"$instance"}`); len(p) != 0 {
		t.Errorf("filterProblems of a good comparison = %q, want none", p)
	}
	if p := groupingProblems(`max by (job) (regiond_watch_epoch) - on (job) group_right regiond_watch_epoch{instance=~"$instance"}`, "fleet,job"); len(p) != 3 {
		t.Errorf("groupingProblems of the epoch lag by job only = %q, want by, on and the comparison", p)
	}
	if p := groupingProblems(`sum by (instance, reason) (x) or count by (version) (y) or count by (job, fleet) (z)`, "fleet,job"); len(p) != 0 {
		t.Errorf("groupingProblems of per-agent and per-fleet groupings = %q, want none", p)
	}
}

// substituteVars replaces the dashboard's variables by what Grafana sends
// with every value (All) selected.
func substituteVars(expr string) string {
	return strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$__interval", "30s",
		"$job", ".*", "$fleet", ".*", "$instance", ".*").Replace(expr)
}

// promtool parses every expression of the dashboard (as recording rules),
// and the panels comparing agents with their fleets compute, on two fleets
// in one job and a job without fleet label, each agent's lag within its
// own fleet.
func TestPromtoolDashboard(t *testing.T) {
	promtool := testprog.Need(t, "promtool", "apt-get install -y prometheus")
	exprs := dashboardExprs(t)
	wheres := make([]string, 0, len(exprs))
	for w := range exprs {
		wheres = append(wheres, w)
	}
	sort.Strings(wheres)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rs []rule
	var lags []string
	for i, w := range wheres {
		e := exprs[w]
		if strings.HasPrefix(w, "variable ") {
			// label_values(selector, label) is Grafana's: parse its selector.
			m := regexp.MustCompile(`^label_values\((.*), *[a-z_]+\)$`).FindStringSubmatch(e)
			if m == nil {
				t.Errorf("dashboard %s: %q is not label_values(selector, label)", w, e)
				continue
			}
			e = m[1]
		} else if strings.Contains(e, "group_right") {
			lags = append(lags, substituteVars(e))
		}
		rs = append(rs, rule{Record: fmt.Sprintf("dashboard:expr_%d", i), Expr: substituteVars(e)})
	}
	dir := t.TempDir()
	write := func(name string, v any) {
		b, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("dashboard.rules.yml", map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rs}}})

	// Agents of fleets prod and staging in job regiond, and of job other
	// without fleet label: lags within each.
	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type sample struct {
		Labels string  `yaml:"labels"`
		Value  float64 `yaml:"value"`
	}
	type exprTest struct {
		Expr       string   `yaml:"expr"`
		EvalTime   string   `yaml:"eval_time"`
		ExpSamples []sample `yaml:"exp_samples"`
	}
	agents := []struct {
		labels     string
		value, lag float64
	}{
		{`job="regiond",fleet="prod",instance="p1"`, 42, 0},
		{`job="regiond",fleet="prod",instance="p2"`, 41, 1},
		{`job="regiond",fleet="staging",instance="s1"`, 3, 0},
		{`job="regiond",fleet="staging",instance="s2"`, 1, 2},
		{`job="other",instance="o1"`, 7, 0},
	}
	var in []series
	var tests []exprTest
	for _, e := range lags {
		names := map[string]bool{}
		for _, m := range metricRE.FindAllString(e, -1) {
			names[m] = true
		}
		if len(names) != 1 {
			t.Fatalf("dashboard comparison %s: metrics %v, want one", e, names)
		}
		var samples []sample
		for name := range names {
			for _, a := range agents {
				in = append(in, series{Series: name + "{" + a.labels + "}", Values: fmt.Sprintf("%gx5", a.value)})
				samples = append(samples, sample{Labels: "{" + a.labels + "}", Value: a.lag})
			}
		}
		tests = append(tests, exprTest{Expr: e, EvalTime: "2m", ExpSamples: samples})
	}
	write("dashboard.test.yml", map[string]any{
		"rule_files": []string{"dashboard.rules.yml"}, "evaluation_interval": "1m",
		"tests": []any{map[string]any{"interval": "1m", "input_series": in, "promql_expr_test": tests}},
	})
	for _, args := range [][]string{{"check", "rules", "dashboard.rules.yml"}, {"test", "rules", "dashboard.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s on the dashboard's expressions: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
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
