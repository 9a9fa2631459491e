package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/store"
)

// RunLocal runs MaxQ's development server until ctx is done.
func RunLocal(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	catalog, err := OpenCatalog(cfg, logger)
	if err != nil {
		return err
	}
	db, err := OpenDatabase(ctx, cfg, logger, EmbeddedDir())
	if err != nil {
		return err
	}
	defer db.Close()
	ln, err := net.Listen("tcp", cfg.ListenAddr())
	if err != nil {
		return fmt.Errorf("listen on %s (MAXQ_HOST, MAXQ_PORT): %w", cfg.ListenAddr(), err)
	}
	handler := api.New(api.Config{Store: store.New(db.Pool), Catalog: catalog, Logger: logger, MaxBodyBytes: cfg.MaxBodyBytes})
	logger.Info("MaxQ is up", "api", "http://"+ln.Addr().String()+api.Prefix, "flows_root", catalog.Root,
		"auth", "none (development)")
	return Serve(ctx, ln, handler, 10*time.Second)
}

// OpenCatalog checks FLOWS_ROOT and logs every problem found under it.
func OpenCatalog(cfg config.Config, logger *slog.Logger) (flow.Catalog, error) {
	if cfg.FlowsRoot == "" {
		return flow.Catalog{}, fmt.Errorf("MAXQ_FLOWS_ROOT is not set")
	}
	catalog := flow.Catalog{Root: cfg.FlowsRoot}
	problems, err := catalog.Validate()
	if err != nil {
		return flow.Catalog{}, fmt.Errorf("MAXQ_FLOWS_ROOT: %w", err)
	}
	for _, p := range problems {
		logger.Warn("unusable flow or step", "path", p.Path, "problem", p.Message)
	}
	return catalog, nil
}
