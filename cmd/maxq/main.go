// Command maxq is MaxQ's command-line client: it triggers and follows runs,
// reads their steps, logs and artifacts, and gives flow.sh and step.sh the
// API without curl or jq. It speaks only the HTTP API (MAXQ_URL). Run
// "maxq --help" for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/maxq-dev/maxq/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
