// Command worker runs a MaxQ worker: it claims ready steps and flow calls
// from PostgreSQL (MAXQ_DATABASE_URL) and runs the scripts under
// MAXQ_FLOWS_ROOT. Any number of workers may share one database.
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
	cfg, err := config.Parse(os.Getenv, config.Defaults())
	if err != nil {
		fmt.Fprintln(os.Stderr, "maxq-worker: bad configuration:", err)
		os.Exit(2)
	}
	if err := app.RunWorker(ctx, cfg, app.Logger(cfg)); err != nil {
		fmt.Fprintln(os.Stderr, "maxq-worker:", err)
		os.Exit(1)
	}
}
