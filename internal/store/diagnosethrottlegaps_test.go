package store

import (
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/poll"
)

// TestHeartbeatDiagnosesOncePerOutage proves the throttle of the running
// heartbeat's diagnosis (diagnoseEvery): of its retries while etcd stays
// unreachable (an expired client certificate), only the first within
// 30 s dials each endpoint to say why; the next retries' warnings carry
// the bare error. TestRunningHeartbeatNamesAnExpiredCertificate tests
// that one names it, so diagnosing at every retry passed.
func TestHeartbeatDiagnosesOncePerOutage(t *testing.T) {
	t.Parallel()
	logs, _ := heartbeatPastItsCertificate(t, 1500*time.Millisecond, 300*time.Millisecond)
	warnings := func() []string {
		var w []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "heartbeat: cannot write marker, retrying") {
				w = append(w, l)
			}
		}
		return w
	}
	if _, ok := poll.Until(15*time.Second, func() bool { return len(warnings()) >= 3 }); !ok {
		t.Fatalf("fewer than 3 retry warnings:\n%s", logs)
	}
	named := 0
	for _, w := range warnings() {
		if strings.Contains(w, "expired certificate") {
			named++
		}
	}
	if named != 1 || !strings.Contains(warnings()[0], "expired certificate") {
		t.Fatalf("%d retry warnings diagnosed (want the first only, once per %s):\n%s", named, diagnoseEvery, strings.Join(warnings(), "\n"))
	}
}
