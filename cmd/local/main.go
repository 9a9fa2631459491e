// Command local runs MaxQ for development in one process: the HTTP API, the
// worker and the reaper, on an embedded PostgreSQL kept in .maxq/ unless
// MAXQ_DATABASE_URL names a server. Flows come from MAXQ_FLOWS_ROOT
// (default examples/).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defaults := config.Defaults()
	defaults.FlowsRoot = "examples"
	defaults.Host = "127.0.0.1"
	cfg, err := config.Parse(os.Getenv, defaults)
	if err != nil {
		fmt.Fprintln(os.Stderr, "maxq: bad configuration:", err)
		os.Exit(2)
	}
	if err := app.RunLocal(ctx, cfg, app.Logger(cfg)); err != nil {
		fmt.Fprintln(os.Stderr, "maxq:", err)
		os.Exit(1)
	}
}
