// Command api serves MaxQ's HTTP API against PostgreSQL (MAXQ_DATABASE_URL)
// with flows from MAXQ_FLOWS_ROOT: as an AWS Lambda function behind an API
// Gateway HTTP API when AWS_LAMBDA_RUNTIME_API is set, else as an HTTP
// server on MAXQ_HOST:MAXQ_PORT. It keeps no state: run as many as you like.
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
		fmt.Fprintln(os.Stderr, "maxq-api: bad configuration:", err)
		os.Exit(2)
	}
	run := app.RunAPI
	if app.InLambda() {
		run = app.StartAPILambda
	}
	if err := run(ctx, cfg, app.Logger(cfg)); err != nil {
		fmt.Fprintln(os.Stderr, "maxq-api:", err)
		os.Exit(1)
	}
}
