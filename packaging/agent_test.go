package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/testprog"
)

// serviceUID stands in for the regiond system user: an unprivileged uid
// that owns nothing else (nobody).
const serviceUID = 65534

// The packaged regiond runs as regiond.service runs it: as an unprivileged
// user, with its socket and snapshot in the runtime directory systemd
// makes (owned by that user, mode 0755: RuntimeDirectory=regiond,
// RuntimeDirectoryMode=0755), which the agent accepts; it serves the API
// and the status page there, the socket mode 0660, and stops cleanly on
// SIGTERM, leaving the snapshot's copy in its state directory
// (StateDirectory=regiond). It needs root (to run the agent as that user): without it, it
// skips, or fails under CI=true.
func TestPackagedAgentInRuntimeDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package (-short)")
	}
	testprog.NeedRoot(t, "to run the agent as another user (uid 65534), as systemd does")
	_, root := installed(t)
	srv := devetcd.NewTest(t)
	fleettest.Load(t, devetcd.NewTestClient(t, srv), "/regiond/v1/routing/")

	// /run/regiond as systemd makes it, in a directory the user can reach.
	base, err := os.MkdirTemp("", "regiond-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	run := filepath.Join(base, "regiond")
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	unit := unitSettings(t, filepath.Join(root, "usr/lib/systemd/system/regiond.service"))
	mode, err := strconv.ParseUint(unit["Service.RuntimeDirectoryMode"], 8, 32)
	if err != nil {
		t.Fatalf("RuntimeDirectoryMode %q: %v", unit["Service.RuntimeDirectoryMode"], err)
	}
	if err := os.Chmod(run, os.FileMode(mode)); err != nil { // as systemd sets it, whatever the umask
		t.Fatal(err)
	}
	if err := os.Chown(run, serviceUID, serviceUID); err != nil {
		t.Fatal(err)
	}
	// /var/lib/regiond as systemd makes it (StateDirectory=regiond).
	state := filepath.Join(base, "state")
	stateMode, err := strconv.ParseUint(unit["Service.StateDirectoryMode"], 8, 32)
	if err != nil {
		t.Fatalf("StateDirectoryMode %q: %v", unit["Service.StateDirectoryMode"], err)
	}
	if err := os.Mkdir(state, os.FileMode(stateMode)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, os.FileMode(stateMode)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, serviceUID, serviceUID); err != nil {
		t.Fatal(err)
	}
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// The unit's own command line, its /run/regiond here, and the settings
	// an operator would put in REGIOND_ARGS.
	args := strings.Fields(strings.NewReplacer("/run/regiond/", run+"/", "/var/lib/regiond/", state+"/").Replace(unit["Service.ExecStart"]))
	if args[len(args)-1] != "$REGIOND_ARGS" {
		t.Fatalf("ExecStart %q does not end with $REGIOND_ARGS", unit["Service.ExecStart"])
	}
	args = append(args[1:len(args)-1], "--endpoints="+strings.Join(srv.Endpoints, ","), "--listen="+addr, "--node=pkg-test")
	cmd := exec.Command(filepath.Join(root, "usr/bin/regiond"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: serviceUID, Gid: serviceUID}}
	// Type=notify: systemd's notify socket, which any user may write to.
	if unit["Service.Type"] != "notify" || unit["Service.NotifyAccess"] != "main" {
		t.Fatalf("Type=%s NotifyAccess=%s; want notify and main: the agent says READY=1 itself", unit["Service.Type"], unit["Service.NotifyAccess"])
	}
	notifyPath := filepath.Join(base, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	if err := os.Chmod(notifyPath, 0o777); err != nil {
		t.Fatal(err)
	}
	notified := func(what string) string {
		t.Helper()
		notify.SetReadDeadline(time.Now().Add(15 * time.Second))
		b := make([]byte, 4096)
		for {
			n, err := notify.Read(b)
			if err != nil {
				logText, _ := os.ReadFile(filepath.Join(base, "regiond.log"))
				t.Fatalf("no %s on the notify socket: %v\n%s", what, err, logText)
			}
			if m := string(b[:n]); strings.HasPrefix(m, what) {
				return m
			}
		}
	}
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notifyPath)
	logs, err := os.Create(filepath.Join(base, "regiond.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	}()
	// systemd takes the unit as started at READY=1: the API answers then.
	notified("READY=1")
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/v1/status"); code != 200 {
		t.Fatalf("GET /v1/status after READY=1: %d", code)
	}
	ready := false
	for i := 0; i < 400 && !ready; i++ {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logs.Name())
			t.Fatalf("the packaged regiond exited (%v):\n%s", err, b)
		case <-time.After(25 * time.Millisecond):
		}
		code, _ := get("/readyz")
		ready = code == 200
	}
	if !ready {
		b, _ := os.ReadFile(logs.Name())
		t.Fatalf("the packaged regiond never got ready:\n%s", b)
	}
	if code, body := get("/ui/"); code != 200 || !strings.Contains(body, "regiond status") {
		t.Errorf("GET /ui/ of the packaged agent: %d", code)
	}
	// /readyz says a table is served; the snapshot file follows it from
	// the writer's goroutine, so wait for the file (bounded) before
	// checking its mode.
	snap := filepath.Join(run, "table.json")
	for i := 0; i < 400; i++ {
		if _, err := os.Lstat(snap); err == nil {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	for name, want := range map[string]os.FileMode{"regiond.sock": os.ModeSocket | 0o660, "table.json": 0o644} {
		fi, err := os.Lstat(filepath.Join(run, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != want || st.Uid != serviceUID {
			t.Errorf("%s: mode %v, owner %d; want %v owned by the service user", name, fi.Mode(), st.Uid, want)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	notified("STOPPING=1")
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("regiond after SIGTERM: %v, want a clean exit", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("regiond did not stop within 15s of SIGTERM")
	}
	// At its stop the agent left the snapshot's copy in its state
	// directory, its own, for a start after a reboot.
	fi, err := os.Lstat(filepath.Join(state, "table.json"))
	if err != nil || fi.Mode() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != serviceUID {
		t.Errorf("the snapshot's copy after SIGTERM: %v %v; want a file 0600 owned by the service user", fi, err)
	}
}
