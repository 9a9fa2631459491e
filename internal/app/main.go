package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/maxq-dev/maxq/internal/config"
)

// Binary describes one of MaxQ's binaries for Main.
type Binary struct {
	Name string // for error messages: "maxq-worker"
	// Defaults adjusts the configuration defaults (nil: the spec's).
	Defaults func(*config.Config)
	// Run runs the binary until ctx is done.
	Run func(ctx context.Context, cfg config.Config, logger *slog.Logger) error
	// Lambda, when set, runs instead of Run inside AWS Lambda.
	Lambda func(ctx context.Context, cfg config.Config, logger *slog.Logger) error
}

// Main is the whole main function of a binary: it acts as the maxq CLI when
// invoked under that name, reads the configuration (exit 2 when it is bad),
// and runs until SIGINT or SIGTERM (exit 1 on failure).
func Main(b Binary) {
	RunAsCLI()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defaults := config.Defaults()
	run := b.Run
	if InLambda() && b.Lambda != nil {
		defaults = LambdaDefaults()
		run = b.Lambda
	}
	if b.Defaults != nil {
		b.Defaults(&defaults)
	}
	cfg, err := config.Parse(os.Getenv, defaults)
	if err != nil {
		fmt.Fprintln(os.Stderr, b.Name+": bad configuration:", err)
		os.Exit(2)
	}
	if err := run(ctx, cfg, Logger(cfg)); err != nil {
		fmt.Fprintln(os.Stderr, b.Name+":", err)
		stop()
		os.Exit(1)
	}
}
