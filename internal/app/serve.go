package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/store"
)

// RunAPI serves the HTTP API alone until ctx is done (cmd/api outside
// Lambda). It needs MAXQ_DATABASE_URL and MAXQ_FLOWS_ROOT.
func RunAPI(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	catalog, err := OpenCatalog(cfg, logger)
	if err != nil {
		return err
	}
	db, err := OpenDatabase(ctx, cfg, logger, "")
	if err != nil {
		return err
	}
	defer db.Close()
	ln, err := net.Listen("tcp", cfg.ListenAddr())
	if err != nil {
		return fmt.Errorf("listen on %s (MAXQ_HOST, MAXQ_PORT): %w", cfg.ListenAddr(), err)
	}
	logger.Info("MaxQ API is up", "api", "http://"+ln.Addr().String()+api.Prefix, "flows_root", catalog.Root, "auth", authMode(cfg))
	return Serve(ctx, ln, api.New(api.Config{Store: store.New(db.Pool), Catalog: catalog, Logger: logger,
		MaxBodyBytes: cfg.MaxBodyBytes, MaxArtifactBytes: cfg.MaxArtifactBytes, Tokens: auth.New(cfg.APIToken)}), 10*time.Second)
}

// RunWorker runs a worker alone until ctx is done (cmd/worker outside
// Lambda). Scripts call the API at MAXQ_API_URL, by default the API on
// this machine's MAXQ_PORT.
func RunWorker(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	catalog, err := OpenCatalog(cfg, logger)
	if err != nil {
		return err
	}
	db, err := OpenDatabase(ctx, cfg, logger, "")
	if err != nil {
		return err
	}
	defer db.Close()
	apiURL := cfg.APIURL
	if apiURL == "" {
		apiURL = "http://127.0.0.1:" + strconv.Itoa(cfg.Port) + api.Prefix
		logger.Warn("MAXQ_API_URL is not set; scripts will call the API on this machine", "api", apiURL)
	}
	return runWorker(ctx, cfg, store.New(db.Pool), catalog, logger, apiURL)
}

// authMode says in the start-up log whether the API is open.
func authMode(cfg config.Config) string {
	if cfg.APIToken == "" {
		return "none: the API is open (set MAXQ_API_TOKEN to require a bearer token)"
	}
	return "bearer token (MAXQ_API_TOKEN)"
}
