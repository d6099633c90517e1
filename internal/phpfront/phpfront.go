// Package phpfront runs a PHP front door under a real php-fpm (pm = static)
// behind a real nginx, on a unix socket, as the current user, for tests and
// benchmarks. The configurations are examples/php/php-fpm-front.conf and
// examples/php/nginx-front.conf with their paths replaced (the script, the
// socket, the snapshot, the listen address), so what runs is what the
// examples say. nginx listens on 127.0.0.1 only.
//
//	s, err := phpfront.Start(ctx, phpfront.Config{Dir: t.TempDir(), Script: abs, Snapshot: path})
//	defer s.Close()
//	http.Get(s.URL + "/watch/1")
package phpfront

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/logbuf"
)

// Config says what to serve. Dir, Script and Snapshot are required.
type Config struct {
	// Dir holds the configurations, the socket, the pid files and the
	// logs; it must exist.
	Dir string
	// Script is the absolute path of the front controller (SCRIPT_FILENAME).
	Script string
	// Snapshot is the REGIOND_SNAPSHOT the script is given.
	Snapshot string
	// Children is pm.max_children; default 2.
	Children int
	// PHPFPM and Nginx are the binaries; default FindPHPFPM and FindNginx.
	PHPFPM, Nginx string
	// ReadyPath is requested until it answers (any status) when starting;
	// default "/".
	ReadyPath string
	// OpenBasedir enables the pool's commented-out open_basedir (the
	// script's and the snapshot's directories).
	OpenBasedir bool
	// Defines are php-fpm's -d options ("apc.enabled=0").
	Defines []string
	// Params are more fastcgi_param lines of the nginx server (name to
	// value).
	Params map[string]string
}

// Server is a running nginx and php-fpm.
type Server struct {
	// URL is nginx's address, http://127.0.0.1:<port>.
	URL string
	dir string
	fpm *exec.Cmd
	ngx *exec.Cmd
	// exited holds, for each started process, a channel closed once it
	// has exited (its Wait returned).
	exited map[*exec.Cmd]chan struct{}
}

// FindPHPFPM returns the php-fpm binary: php-fpm in PATH, else Debian's
// /usr/sbin/php-fpm<version>.
func FindPHPFPM() (string, error) {
	if p, err := exec.LookPath("php-fpm"); err == nil {
		return p, nil
	}
	for _, dir := range append(filepath.SplitList(os.Getenv("PATH")), "/usr/sbin") {
		if m, _ := filepath.Glob(filepath.Join(dir, "php-fpm8.*")); len(m) > 0 {
			return m[len(m)-1], nil
		}
	}
	return "", errors.New("phpfront: php-fpm not found (in PATH or /usr/sbin/php-fpm8.*)")
}

// FindNginx returns the nginx binary: in PATH, else /usr/sbin/nginx.
func FindNginx() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx", nil
	}
	return "", errors.New("phpfront: nginx not found (in PATH or /usr/sbin/nginx)")
}

// ExampleDir returns the directory of the examples (examples/php).
func ExampleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "php")
}

// Start renders the configurations into cfg.Dir, starts php-fpm and nginx
// and waits (at most 20 s, or until ctx ends) until nginx answers. On error
// nothing is left running.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" || !filepath.IsAbs(cfg.Script) || cfg.Snapshot == "" {
		return nil, errors.New("phpfront: Config needs Dir, an absolute Script and Snapshot")
	}
	if cfg.Children <= 0 {
		cfg.Children = 2
	}
	if cfg.ReadyPath == "" {
		cfg.ReadyPath = "/"
	}
	var err error
	if cfg.PHPFPM == "" {
		if cfg.PHPFPM, err = FindPHPFPM(); err != nil {
			return nil, err
		}
	}
	if cfg.Nginx == "" {
		if cfg.Nginx, err = FindNginx(); err != nil {
			return nil, err
		}
	}
	// nginx binds the port freeport found free a moment before, which
	// another test may take meanwhile: start again on another.
	for attempt := 1; ; attempt++ {
		s, err := start(ctx, cfg)
		if err == nil || attempt == 3 || !errors.Is(err, errPortTaken) {
			return s, err
		}
	}
}

// errPortTaken says nginx exited because its port was taken.
var errPortTaken = errors.New("phpfront: nginx's port was taken")

// start is one attempt of Start, on a port freeport finds.
func start(ctx context.Context, cfg Config) (*Server, error) {
	port, err := freeport.Get()
	if err != nil {
		return nil, fmt.Errorf("phpfront: %w", err)
	}
	s := &Server{URL: "http://127.0.0.1:" + strconv.Itoa(port), dir: cfg.Dir, exited: map[*exec.Cmd]chan struct{}{}}
	fpmConf, ngxConf, err := render(cfg, port)
	if err != nil {
		return nil, err
	}
	args := []string{"--nodaemonize", "--fpm-config", fpmConf}
	for _, d := range cfg.Defines {
		args = append(args, "-d", d)
	}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-to-run-as-root")
	}
	s.fpm = exec.Command(cfg.PHPFPM, args...)
	s.ngx = exec.Command(cfg.Nginx, "-p", cfg.Dir, "-e", filepath.Join(cfg.Dir, "nginx-error.log"), "-c", ngxConf)
	for _, c := range []*exec.Cmd{s.fpm, s.ngx} {
		// Read by Logs while the servers run (a failure message): a
		// buffer safe for its copier's writes meanwhile.
		c.Stdout, c.Stderr = &logbuf.Buffer{}, &logbuf.Buffer{}
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			s.Close()
			return nil, fmt.Errorf("phpfront: start %s: %w", c.Path, err)
		}
		done := make(chan struct{})
		s.exited[c] = done
		go func() { c.Wait(); close(done) }()
	}
	if err := s.waitReady(ctx, cfg.ReadyPath); err != nil {
		logs := s.Logs()
		s.Close()
		if strings.Contains(logs, "Address already in use") {
			err = fmt.Errorf("%w (%w)", errPortTaken, err)
		}
		return nil, fmt.Errorf("%w\n%s", err, logs)
	}
	return s, nil
}

// waitReady requests path until nginx answers through php-fpm (a 502 or
// 504 means php-fpm is not listening yet); a server that exits meanwhile
// ends the wait.
func (s *Server) waitReady(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c := &http.Client{Timeout: 2 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway && resp.StatusCode != http.StatusGatewayTimeout {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("phpfront: nginx at %s with php-fpm did not answer: %v (last: %v)", s.URL, ctx.Err(), err)
		case <-s.exited[s.ngx]:
			return fmt.Errorf("phpfront: nginx exited before it answered at %s: %v", s.URL, s.ngx.ProcessState)
		case <-s.exited[s.fpm]:
			return fmt.Errorf("phpfront: php-fpm exited before nginx answered at %s: %v", s.URL, s.fpm.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Dir returns Config.Dir: the configurations and the logs (fpm.log,
// nginx-error.log).
func (s *Server) Dir() string { return s.dir }

// FPMPid returns the process id of php-fpm's master.
func (s *Server) FPMPid() int { return s.fpm.Process.Pid }

// Logs returns the servers' output and error logs, for a failure message.
func (s *Server) Logs() string {
	var b strings.Builder
	for _, name := range []string{"fpm.log", "nginx-error.log"} {
		if log, err := os.ReadFile(filepath.Join(s.dir, name)); err == nil {
			fmt.Fprintf(&b, "--- %s\n%s", name, log)
		}
	}
	for _, c := range []*exec.Cmd{s.fpm, s.ngx} {
		if c != nil {
			fmt.Fprintf(&b, "--- %s output\n%s%s", filepath.Base(c.Path), c.Stdout, c.Stderr)
		}
	}
	return b.String()
}

// Close stops nginx and php-fpm (SIGQUIT: graceful; SIGKILL after 5 s) and
// waits for them.
func (s *Server) Close() error {
	for _, c := range []*exec.Cmd{s.ngx, s.fpm} {
		if c == nil || c.Process == nil {
			continue
		}
		c.Process.Signal(syscall.SIGQUIT)
		done := s.exited[c]
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.Process.Kill()
			<-done
		}
	}
	return nil
}

// render writes the php-fpm and nginx configurations for cfg into cfg.Dir
// and returns their paths.
func render(cfg Config, port int) (fpmConf, ngxConf string, err error) {
	pool, err := os.ReadFile(filepath.Join(ExampleDir(), "php-fpm-front.conf"))
	if err != nil {
		return "", "", fmt.Errorf("phpfront: %w", err)
	}
	server, err := os.ReadFile(filepath.Join(ExampleDir(), "nginx-front.conf"))
	if err != nil {
		return "", "", fmt.Errorf("phpfront: %w", err)
	}
	sock := filepath.Join(cfg.Dir, "fpm.sock")
	scriptDir := filepath.Dir(cfg.Script)
	snapDir := filepath.Dir(cfg.Snapshot)
	u, err := user.Current()
	if err != nil {
		return "", "", fmt.Errorf("phpfront: current user: %w", err)
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		return "", "", fmt.Errorf("phpfront: current group: %w", err)
	}
	paths := strings.NewReplacer(
		"/run/php/regiond-front.sock", sock,
		"/srv/regiond-front/example.php", cfg.Script,
		"/srv/regiond-front/", scriptDir+"/",
		"/srv/regiond-front", scriptDir,
		"/run/regiond/table.json", cfg.Snapshot,
		"/run/regiond/", snapDir+"/",
		"127.0.0.1:8080", "127.0.0.1:"+strconv.Itoa(port),
		"pm.max_children = 4", "pm.max_children = "+strconv.Itoa(cfg.Children),
		"= www-data", "= "+u.Username,
		"REGIOND_OWNER regiond", "REGIOND_OWNER "+u.Username, // the test's files are its own
		"/var/log/nginx/regiond-front.log", filepath.Join(cfg.Dir, "nginx-access.log"),
	)
	poolText := paths.Replace(string(pool))
	if cfg.OpenBasedir {
		if !strings.Contains(poolText, ";php_admin_value[open_basedir]") {
			return "", "", errors.New("phpfront: php-fpm-front.conf has no ;php_admin_value[open_basedir] line to enable")
		}
		poolText = strings.ReplaceAll(poolText, ";php_admin_value[open_basedir]", "php_admin_value[open_basedir]")
	}
	if os.Geteuid() != 0 { // an unprivileged php-fpm cannot switch users or chown its socket
		var keep []string
		for _, line := range strings.Split(poolText, "\n") {
			if !strings.HasPrefix(line, "user =") && !strings.HasPrefix(line, "group =") &&
				!strings.HasPrefix(line, "listen.owner =") && !strings.HasPrefix(line, "listen.group =") {
				keep = append(keep, line)
			}
		}
		poolText = strings.Join(keep, "\n")
	} else {
		poolText = strings.ReplaceAll(poolText, "group = "+u.Username, "group = "+g.Name)
		poolText = strings.ReplaceAll(poolText, "listen.group = "+u.Username, "listen.group = "+g.Name)
	}
	fpm := fmt.Sprintf("[global]\npid = %s\nerror_log = %s\ndaemonize = no\n\n%s\ncatch_workers_output = yes\n",
		filepath.Join(cfg.Dir, "fpm.pid"), filepath.Join(cfg.Dir, "fpm.log"), poolText)
	fpmConf = filepath.Join(cfg.Dir, "php-fpm.conf")
	if err := os.WriteFile(fpmConf, []byte(fpm), 0o644); err != nil {
		return "", "", fmt.Errorf("phpfront: %w", err)
	}
	serverText := paths.Replace(string(server))
	if len(cfg.Params) > 0 {
		const pass = "        fastcgi_pass regiond_front;"
		if !strings.Contains(serverText, pass) {
			return "", "", errors.New("phpfront: nginx-front.conf has no fastcgi_pass line to add parameters before")
		}
		var lines strings.Builder
		for _, name := range slices.Sorted(maps.Keys(cfg.Params)) {
			fmt.Fprintf(&lines, "        fastcgi_param %s %q;\n", name, cfg.Params[name])
		}
		serverText = strings.Replace(serverText, pass, lines.String()+pass, 1)
	}
	serverConf := filepath.Join(cfg.Dir, "nginx-front.conf")
	if err := os.WriteFile(serverConf, []byte(serverText), 0o644); err != nil {
		return "", "", fmt.Errorf("phpfront: %w", err)
	}
	userLine := ""
	if os.Geteuid() == 0 {
		userLine = fmt.Sprintf("user %s %s;\n", u.Username, g.Name) // workers as the current user, who owns Dir
	}
	tmp := filepath.Join(cfg.Dir, "nginx-tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", "", fmt.Errorf("phpfront: %w", err)
	}
	ngx := fmt.Sprintf(`%sdaemon off;
worker_processes 1;
pid %s;
error_log %s warn;
events { worker_connections 512; }
http {
    access_log off;
    client_body_temp_path %[4]s/body;
    fastcgi_temp_path %[4]s/fastcgi;
    proxy_temp_path %[4]s/proxy;
    uwsgi_temp_path %[4]s/uwsgi;
    scgi_temp_path %[4]s/scgi;
    include %s;
}
`, userLine, filepath.Join(cfg.Dir, "nginx.pid"), filepath.Join(cfg.Dir, "nginx-error.log"), tmp, serverConf)
	ngxConf = filepath.Join(cfg.Dir, "nginx.conf")
	if err := os.WriteFile(ngxConf, []byte(ngx), 0o644); err != nil {
		return "", "", fmt.Errorf("phpfront: %w", err)
	}
	return fpmConf, ngxConf, nil
}
