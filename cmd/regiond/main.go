// Command regiond is the per-node agent of regiond: it mirrors the routing
// policy from etcd into memory with one watch and serves routing decisions
// locally (unix socket, loopback HTTP, snapshot file). `regiond dev` runs the
// whole system on one machine with an embedded etcd.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/regiond/regiond/internal/journalfmt"
)

// stderr is where regiond writes its logs and errors: os.Stderr, each line
// prefixed with its priority when that is systemd's journal.
var stderr = journalfmt.Stderr()

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP, an operator's habit (kill -HUP, systemctl kill -s HUP),
	// killed the agent uncleanly: no log, the socket and the status key
	// left behind. There is nothing to reload: say so and serve on.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			fmt.Fprintln(stderr, "regiond: SIGHUP ignored: regiond has nothing to reload; restart it to change its flags (systemctl restart regiond)")
		}
	}()
	cmd := newRootCommand()
	cmd.SetArgs(os.Args[1:])
	if err := cmd.ExecuteContext(ctx); err != nil {
		printError(stderr, err)
		os.Exit(exitCode(err))
	}
}
