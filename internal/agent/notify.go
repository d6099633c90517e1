package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifyInterval is how often the agent compares its systemd status line
// with the last it sent (and sends it when it differs).
const notifyInterval = time.Second

// maxWhy bounds the etcd error quoted in the status line: systemctl
// status shows one line.
const maxWhy = 200

// notifySystemd speaks systemd's notify protocol (sd_notify(3), through
// go-systemd, etcd's own) under a unit of Type=notify ($NOTIFY_SOCKET
// set; nothing is sent otherwise): READY=1 once the agent's listeners
// accept connections (a table may still be missing, and etcd away, which
// the status line says), sent again each tick until one send succeeds; a
// STATUS= line kept current while ctx lives; WATCHDOG=1 under a unit with
// WatchdogSec= (every third of it, at most a notifyInterval apart), each
// after the API answered a /v1/status from memory in this goroutine (a
// wedged serving path stops the pings, and systemd restarts the agent;
// etcd away does not); and STOPPING=1 when ctx ends. Failures to notify
// are logged once; the agent serves regardless.
func (a *Agent) notifySystemd(ctx context.Context) {
	failed := false
	send := func(state string) bool {
		sent, err := daemon.SdNotify(false, state)
		switch {
		case err != nil && !failed:
			a.log.Warn("cannot notify systemd (systemctl status shows an old status)", "err", err)
		case err == nil && failed:
			a.log.Info("notifying systemd again")
		}
		failed = err != nil
		return sent
	}
	status := func(line string) string { return "STATUS=" + strings.ReplaceAll(line, "\n", " ") }
	last := a.statusLine()
	ready := send(daemon.SdNotifyReady + "\n" + status(last))
	if !ready && !failed {
		return // not under systemd's notify
	}
	interval := notifyInterval
	watchdog, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		a.log.Warn("systemd's watchdog settings do not parse; no WATCHDOG=1 is sent", "err", err)
	}
	if watchdog > 0 {
		interval = min(interval, watchdog/3)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			send(daemon.SdNotifyStopping + "\n" + status("stopping: closing the API, revoking the status key"))
			return
		case <-tick.C:
			line := a.statusLine()
			switch {
			case !ready: // the first send failed: systemd would wait for it until TimeoutStartSec
				if ready = send(daemon.SdNotifyReady + "\n" + status(line)); ready {
					last = line
				}
			case line != last:
				// Kept as sent only once it got through: a line whose
				// send failed (systemd's socket away for a moment) is
				// sent again at the next tick.
				if send(status(line)) {
					last = line
				}
			}
			if watchdog > 0 && a.servesStatus() {
				send(daemon.SdNotifyWatchdog)
			}
		}
	}
}

// servesStatus reports whether the API answers GET /v1/status, served in
// memory by the caller's goroutine: what the watchdog's pings stand for.
func (a *Agent) servesStatus() bool {
	req, err := http.NewRequest(http.MethodGet, "/v1/status", nil)
	if err != nil {
		return false
	}
	w := &discardResponse{header: http.Header{}}
	a.api.Handler(false).ServeHTTP(w, req)
	return w.code == 0 || w.code == http.StatusOK
}

// discardResponse is an http.ResponseWriter that keeps the status code
// alone.
type discardResponse struct {
	header http.Header
	code   int
}

func (d *discardResponse) Header() http.Header { return d.header }

func (d *discardResponse) Write(b []byte) (int, error) {
	if d.code == 0 {
		d.code = http.StatusOK
	}
	return len(b), nil
}

func (d *discardResponse) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}

// statusLine says in one line what the agent serves and whether etcd
// confirms it: what systemctl status shows under STATUS=. It changes only
// when the table, the connection or the reason etcd is away changes.
func (a *Agent) statusLine() string {
	src := source{a}
	st := src.Status()
	why := src.EtcdError()
	if why == "" {
		why = st.Refused
	}
	if why == "" && st.Unreachable != "" {
		why = "etcd unreachable: " + st.Unreachable
	}
	if r := []rune(why); len(r) > maxWhy {
		why = string(r[:maxWhy]) + "…"
	}
	t := src.Table()
	if t == nil {
		if why == "" {
			return "no routing table yet: listing etcd"
		}
		return "no routing table yet (no snapshot): " + why
	}
	line := fmt.Sprintf("serving epoch %d (revision %d)", st.Epoch, st.Revision)
	switch {
	case st.Connected && why == "":
		line += ", following etcd"
	case st.SyncedAt.IsZero():
		line += ", never confirmed by etcd"
	default:
		line += ", last confirmed by etcd " + st.SyncedAt.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	if why != "" {
		line += "; " + why
	}
	if t.NumPools() == 0 {
		line += "; the table has no pools, nothing routes (is --prefix right? was a config applied?)"
	}
	if n := len(t.Skipped()); n > 0 {
		line += fmt.Sprintf("; %d keys skipped, their values refused (/v1/status names them)", n)
	}
	return line
}
