// Package agent wires the node agent: the etcd mirror, the HTTP API on a
// unix socket and loopback TCP, the snapshot file and the fleet status key.
package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/safedir"
	"github.com/regiond/regiond/internal/snapshot"
)

// Config is the agent's configuration. Start from DefaultConfig.
type Config struct {
	// Endpoints are the etcd client URLs.
	Endpoints []string
	// StatusEndpoints, when set, are the etcd client URLs of the status
	// key, its lease and the node record, instead of Endpoints: the
	// members themselves when Endpoints is an etcd grpc-proxy and etcd's
	// authentication is on. The proxy (v3.7.3) renews a client's lease
	// with no login of its own, which etcd refuses: the status key's
	// lease ends at each TTL behind it.
	StatusEndpoints []string
	// TLS is used to dial etcd when non-nil.
	TLS *tls.Config
	// Username and Password authenticate to etcd when Username is set.
	Username, Password string
	// DialTimeout bounds the first connection attempt.
	DialTimeout time.Duration
	// Prefix is the root prefix ("/regiond/v1").
	Prefix string
	// Node names this agent in <root>/agents/<node>.
	Node string
	// Socket is the unix socket of the API ("" disables it).
	Socket string
	// Listen is an optional loopback TCP address of the API.
	Listen string
	// Snapshot is the snapshot file path ("" disables it). Its directory
	// must be the agent's own (see SnapshotGroup); the agent creates it
	// when missing.
	Snapshot string
	// SnapshotGroup is the group (a name or a gid) the front doors that
	// read the snapshot run as, e.g. www-data: the snapshot directory is
	// created 0750 of that group, and must have it. Empty: it is created
	// 0755, of the agent's group.
	SnapshotGroup string
	// SnapshotCopy is a copy of the snapshot file on persistent disk ("":
	// none), refreshed every minute when it changed and at shutdown, and
	// loaded at start when the snapshot file is missing (a reboot empties
	// /run and /dev/shm): the front doors get the last table, marked by
	// its synced_at, even when etcd does not answer at boot. Its
	// directory must be the agent's own; the agent creates it when
	// missing.
	SnapshotCopy string
	// HealthGrace is the health grace window.
	HealthGrace time.Duration
	// MaxStale: /readyz fails once the table is older than this.
	MaxStale time.Duration
	// StatusTTL is the TTL of the lease behind the agent status key.
	StatusTTL time.Duration
	// ProgressInterval is how often the mirror asks etcd for a progress
	// notification (zero: the mirror's default, 5s).
	ProgressInterval time.Duration
	// MaxBlockingQueries caps the blocking queries (min_revision) waiting
	// at once; one more is refused with 429.
	MaxBlockingQueries int
	// MaxConnections caps the open API connections of each listener; at
	// the cap, idle keep-alive connections are closed to make room and new
	// connections wait in the kernel's backlog. It is lowered to fit the
	// process's file descriptor limit less FDReserve.
	MaxConnections int
	// WriteTimeout bounds the writing of one API answer: a client that
	// stops reading its answers (a hung front-door worker pipelining
	// requests) has its connection closed after it; a blocking query's
	// answer gets as long again after its wait. Zero:
	// api.DefaultWriteTimeout.
	WriteTimeout time.Duration
	// FDReserve is how many file descriptors the API never takes: the
	// snapshot writer and the etcd client need them.
	FDReserve int
	// Version is reported in the agent status key.
	Version string
	// Logger receives the agent's logs.
	Logger *slog.Logger
}

// DefaultConfig returns production defaults.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Endpoints:   []string{"http://127.0.0.1:2379"},
		DialTimeout: 5 * time.Second,
		Prefix:      keyspace.DefaultRoot,
		Node:        host,
		Socket:      "/run/regiond/regiond.sock",
		Snapshot:    "/dev/shm/regiond/table.json",
		HealthGrace: 5 * time.Second,
		MaxStale:    15 * time.Minute,
		StatusTTL:   10 * time.Second,
		Version:     "dev",

		MaxBlockingQueries: 128,
		MaxConnections:     256,
		FDReserve:          64,
	}
}

// snapshotGID returns the gid of SnapshotGroup, or safedir.NoGroup.
func (c Config) snapshotGID() (int, error) {
	if c.SnapshotGroup == "" {
		return safedir.NoGroup, nil
	}
	name := c.SnapshotGroup
	if _, err := strconv.Atoi(name); err != nil {
		g, err := user.LookupGroup(name)
		if err != nil {
			return 0, fmt.Errorf("--snapshot-group %q: %w", name, err)
		}
		name = g.Gid
	}
	gid, err := strconv.Atoi(name)
	if err != nil || gid < 0 {
		return 0, fmt.Errorf("--snapshot-group %q: not a group name or gid", c.SnapshotGroup)
	}
	return gid, nil
}

// snapshotDirMode is the mode the snapshot directory is created with: 0755,
// or 0750 with a SnapshotGroup.
func (c Config) snapshotDirMode() os.FileMode {
	if c.SnapshotGroup != "" {
		return 0o750
	}
	return 0o755
}

// Validate checks the configuration and names the bad field.
func (c Config) Validate() error {
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("--endpoints: at least one etcd endpoint is required"))
	}
	if _, err := keyspace.New(c.Prefix); err != nil {
		errs = append(errs, fmt.Errorf("--prefix: %w", err))
	}
	if !keyspace.ValidNode(c.Node) {
		errs = append(errs, fmt.Errorf("--node: %q must be a non-empty name without '/' or spaces", c.Node))
	}
	if c.Socket == "" && c.Listen == "" {
		errs = append(errs, errors.New("--socket and --listen are both empty: the API would be unreachable"))
	}
	if c.Listen != "" {
		host, _, err := net.SplitHostPort(c.Listen)
		if err != nil {
			errs = append(errs, fmt.Errorf("--listen %q: %w", c.Listen, err))
		} else if !api.IsLoopbackHost(host) {
			errs = append(errs, fmt.Errorf("--listen %q: must be a loopback address (127.0.0.0/8, ::1 or localhost)", c.Listen))
		}
	}
	if c.Snapshot != "" && !filepath.IsAbs(c.Snapshot) {
		errs = append(errs, fmt.Errorf("--snapshot %q: must be an absolute path", c.Snapshot))
	} else if strings.HasSuffix(c.Snapshot, "/") {
		errs = append(errs, fmt.Errorf("--snapshot %q: names a directory: give the file's path (e.g. %stable.json)", c.Snapshot, c.Snapshot))
	}
	if c.SnapshotGroup != "" && c.Snapshot == "" {
		errs = append(errs, errors.New("--snapshot-group is set but --snapshot is empty: there is no snapshot directory to give the group"))
	} else if _, err := c.snapshotGID(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateSnapshotCopy(); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"--health-grace", c.HealthGrace}, {"--max-stale", c.MaxStale}, {"--dial-timeout", c.DialTimeout}} { // in --help's order, run after run
		if f.d <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %v", f.name, f.d))
		}
	}
	if c.MaxBlockingQueries < 1 {
		errs = append(errs, fmt.Errorf("--max-blocking-queries: must be at least 1, got %d", c.MaxBlockingQueries))
	}
	if c.MaxConnections <= c.MaxBlockingQueries {
		errs = append(errs, fmt.Errorf("--max-connections %d: must exceed --max-blocking-queries %d, or waiting queries could hold every connection",
			c.MaxConnections, c.MaxBlockingQueries))
	}
	if c.FDReserve < 16 {
		errs = append(errs, fmt.Errorf("--fd-reserve: must be at least 16 (the snapshot writer and the etcd client need them), got %d", c.FDReserve))
	}
	if c.StatusTTL < 2*time.Second {
		errs = append(errs, fmt.Errorf("status TTL: must be at least 2s, got %v", c.StatusTTL))
	}
	return errors.Join(errs...)
}

// validateSnapshotCopy refuses a --snapshot-copy the agent would write
// over its own files: at the snapshot's path, its index's or its lock's,
// the copy (0600) took the front doors' file from them, or put table JSON
// in the index. Relative and directory paths are refused as --snapshot's
// are. A copy without --snapshot is ignored, as before (the packaged unit
// passes one, and --snapshot= in REGIOND_ARGS turns the files off), and
// one in the snapshot's directory only warned about (snapshotCopyWarning).
func (c Config) validateSnapshotCopy() error {
	p := c.SnapshotCopy
	switch {
	case p == "" || c.Snapshot == "":
		return nil
	case !filepath.IsAbs(p):
		return fmt.Errorf("--snapshot-copy %q: must be an absolute path", p)
	case strings.HasSuffix(p, "/"):
		return fmt.Errorf("--snapshot-copy %q: names a directory: give the file's path (e.g. %stable.json)", p, p)
	}
	cp, snap := realPath(p), realPath(c.Snapshot)
	for _, own := range []struct{ what, path string }{
		{"--snapshot", snap}, {"the snapshot's index", snapshot.IndexPath(snap)}, {"the snapshot's lock", snapshotLockPath(snap)},
	} {
		if cp == own.path {
			return fmt.Errorf("--snapshot-copy %q: is %s (%s): the copy, mode 0600, would replace the front doors' file; put it on persistent disk (the package: /var/lib/regiond/table.json)", p, own.what, own.path)
		}
	}
	return nil
}

// snapshotCopyWarning says what is likely wrong with a valid
// --snapshot-copy, or "": none without --snapshot, or one in the
// snapshot's directory (/run, /dev/shm: lost in the reboot it is kept
// for, unless that directory is on persistent disk).
func (c Config) snapshotCopyWarning() string {
	switch {
	case c.SnapshotCopy == "":
		return ""
	case c.Snapshot == "":
		return "--snapshot-copy " + c.SnapshotCopy + " is ignored: --snapshot is empty, so there is no snapshot file to copy"
	case filepath.Dir(realPath(c.SnapshotCopy)) == filepath.Dir(realPath(c.Snapshot)):
		return "--snapshot-copy " + c.SnapshotCopy + " is in --snapshot's directory: the copy is kept for a reboot that empties that directory (/run, /dev/shm); put it on persistent disk (the package: /var/lib/regiond/table.json) unless that directory is"
	}
	return ""
}

// realPath is path, cleaned, with its directory's symbolic links resolved
// when the directory exists (/var/run is /run).
func realPath(path string) string {
	path = filepath.Clean(path)
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		return filepath.Join(dir, filepath.Base(path))
	}
	return path
}
