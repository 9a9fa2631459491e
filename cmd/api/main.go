// Command api serves MaxQ's HTTP API on MAXQ_HOST:MAXQ_PORT against
// PostgreSQL (MAXQ_DATABASE_URL), with flows from MAXQ_FLOWS_ROOT. It keeps
// no state: run as many as you like behind a load balancer.
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
		fmt.Fprintln(os.Stderr, "maxq-api: bad configuration:", err)
		os.Exit(2)
	}
	if err := app.RunAPI(ctx, cfg, app.Logger(cfg)); err != nil {
		fmt.Fprintln(os.Stderr, "maxq-api:", err)
		os.Exit(1)
	}
}
