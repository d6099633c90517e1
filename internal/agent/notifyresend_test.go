package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStatusLineSentAgainAfterAFailedSend: a STATUS= line whose send
// failed (the notify socket away for a moment: systemd re-executing) is
// sent again once the socket is back. It was kept as sent, so systemctl
// status showed the line from before until the line changed, though the
// agent logged "notifying systemd again".
func TestStatusLineSentAgainAfterAFailedSend(t *testing.T) {
	a, logs := seededAgent(nil, time.Time{}, "etcd unreachable: first")
	path := filepath.Join(t.TempDir(), "notify")
	got := notifyListen(t, path)
	runNotify(t, a, path, 150*time.Millisecond) // ticks every 50 ms
	if m := next(t, got, "READY=1"); !strings.HasPrefix(m, "READY=1\n") {
		t.Fatalf("first notification %q", m)
	}
	// systemd away: the socket gone.
	closeNotify(t, path)
	why := "etcd unreachable: second"
	a.etcdErr.Store(&why)
	time.Sleep(300 * time.Millisecond) // the changed line's send fails
	got = notifyListen(t, path)        // systemd back
	deadline := time.After(1500 * time.Millisecond)
	for {
		select {
		case m := <-got:
			if strings.HasPrefix(m, "STATUS=") && strings.HasSuffix(m, "second") {
				return
			}
			continue
		case <-deadline:
		}
		break
	}
	t.Fatalf("the notify socket back for 1.5 s: the current status line never sent again (systemd shows the one before); log:\n%s", logs.String())
}

// closeNotify takes systemd's notify socket at path away.
func closeNotify(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
