// Command regionctl is the operator CLI of regiond: it reads and changes
// the routing policy in etcd through validated, guarded, audited writes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/regiond/regiond/internal/cli"
	"github.com/regiond/regiond/internal/journalfmt"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, journalfmt.Stderr())
	stop()
	os.Exit(code)
}
