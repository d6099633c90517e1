package agent

import (
	"context"
	"fmt"
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
// the status line says), a STATUS= line kept current while ctx lives, and
// STOPPING=1 when ctx ends. Failures to notify are logged once; the agent
// serves regardless.
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
		return sent || err != nil
	}
	status := func(line string) string { return "STATUS=" + strings.ReplaceAll(line, "\n", " ") }
	last := a.statusLine()
	if !send(daemon.SdNotifyReady + "\n" + status(last)) {
		return // not under systemd's notify
	}
	tick := time.NewTicker(notifyInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			send(daemon.SdNotifyStopping + "\n" + status("stopping: closing the API, revoking the status key"))
			return
		case <-tick.C:
			if line := a.statusLine(); line != last {
				send(status(line))
				last = line
			}
		}
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
