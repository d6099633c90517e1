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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := newRootCommand()
	cmd.SetArgs(os.Args[1:])
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "regiond:", err)
		os.Exit(exitCode(err))
	}
}
