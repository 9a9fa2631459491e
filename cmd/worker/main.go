// Command worker runs a MaxQ worker: it claims ready steps and flow calls
// from PostgreSQL (MAXQ_DATABASE_URL) and runs the scripts under
// MAXQ_FLOWS_ROOT. Any number of workers may share one database. Under AWS
// Lambda (AWS_LAMBDA_RUNTIME_API set) each scheduled invocation sweeps once
// and drains work until close to its deadline; otherwise it runs until
// SIGTERM, with a reaper on a schedule.
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
	if app.InLambda() {
		defaults = app.LambdaDefaults()
	}
	cfg, err := config.Parse(os.Getenv, defaults)
	if err != nil {
		fmt.Fprintln(os.Stderr, "maxq-worker: bad configuration:", err)
		os.Exit(2)
	}
	run := app.RunWorker
	if app.InLambda() {
		run = app.StartWorkerLambda
	}
	if err := run(ctx, cfg, app.Logger(cfg)); err != nil {
		fmt.Fprintln(os.Stderr, "maxq-worker:", err)
		os.Exit(1)
	}
}
