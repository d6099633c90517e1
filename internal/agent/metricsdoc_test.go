package agent_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/regiond/regiond/internal/docsection"
)

// TestMetricsDocumented: every regiond_* metric a running agent exposes
// is named in docs/agent.md, whole, or in its Metrics section as `name`
// under its subsystem's `regiond_<subsystem>_*` item (the docs are the
// contract; a metric added without a word would be one no one alerts on).
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/agent.md")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := docsection.Cut(string(doc), "## Metrics")
	if err != nil {
		t.Fatal(err)
	}
	// Each list item: its subsystem prefix, if it is a regiond_<sub>_* one.
	items := map[string]string{} // prefix → item text
	for _, item := range strings.Split(metrics, "\n- ") {
		if m := regexp.MustCompile("^`(regiond_[a-z]+_)\\*`").FindStringSubmatch(item); m != nil {
			items[m[1]] += item
		}
	}
	h, _ := startExampleAgent(t)
	mfs, err := h.a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "regiond_") {
			continue
		}
		n++
		// Named whole anywhere in agent.md: the API's blocking-query and
		// connection metrics are with what they measure.
		if strings.Contains(string(doc), "`"+name) || strings.Contains(string(doc), name+"`") {
			continue
		}
		found := false
		for prefix, text := range items {
			if rest, ok := strings.CutPrefix(name, prefix); ok && (strings.Contains(text, "`"+rest+"`") || strings.Contains(text, "`"+rest+"{")) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s is exposed but not in docs/agent.md's Metrics", name)
		}
	}
	if n < 30 {
		t.Fatalf("only %d regiond_* metrics gathered", n)
	}
}
