package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/reaper"
	"github.com/maxq-dev/maxq/internal/store"
	"github.com/maxq-dev/maxq/internal/worker"
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
	handler := api.New(api.Config{Store: store.New(db.Pool), Catalog: catalog, Logger: logger, MaxBodyBytes: cfg.MaxBodyBytes,
		MaxArtifactBytes: cfg.MaxArtifactBytes, Tokens: auth.New(cfg.APIToken)})
	apiURL := cmp.Or(cfg.APIURL, LocalAPIURL(ln.Addr()))
	logger.Info("MaxQ is up", "api", apiURL, "flows_root", catalog.Root, "auth", authMode(cfg))

	// The API outlives the worker, whose scripts may call it while it
	// shuts down gracefully.
	apiCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAPI()
	served := make(chan error, 1)
	go func() { served <- Serve(apiCtx, ln, handler, 10*time.Second) }()
	err = runWorker(ctx, cfg, store.New(db.Pool), catalog, logger, apiURL)
	stopAPI()
	return errors.Join(err, <-served)
}

// LocalAPIURL is the API's base URL for scripts of a worker in the same
// process as the server listening on addr: loopback when it listens on all
// interfaces.
func LocalAPIURL(addr net.Addr) string {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + api.Prefix
}

// WorkerConfig is the worker's configuration from MaxQ's.
func WorkerConfig(cfg config.Config, st *store.Store, catalog flow.Catalog, logger *slog.Logger, apiURL string) worker.Config {
	return worker.Config{
		Store:         st,
		Catalog:       catalog,
		Logger:        logger,
		APIURL:        apiURL,
		MaxSteps:      cfg.MaxConcurrentSteps,
		MaxFlows:      cfg.MaxConcurrentFlows,
		StepTimeout:   cfg.StepTimeout,
		FlowTimeout:   cfg.FlowTimeout,
		MaxLogBytes:   cfg.MaxLogBytes,
		PassEnv:       cfg.PassEnv,
		PollInterval:  cfg.PollInterval,
		Listen:        &cfg.Listen,
		LeaseTTL:      cfg.LeaseTTL,
		ShutdownGrace: cfg.ShutdownGrace,
		Tokens:        auth.New(cfg.APIToken),
	}
}

// ReaperConfig is the reaper's configuration from MaxQ's.
func ReaperConfig(cfg config.Config, st *store.Store, logger *slog.Logger) reaper.Config {
	return reaper.Config{Store: st, Logger: logger, LeaseTTL: cfg.LeaseTTL, Interval: cfg.ReaperInterval}
}

// runWorker runs a worker and its reaper until ctx is done and the worker
// has stopped.
func runWorker(ctx context.Context, cfg config.Config, st *store.Store, catalog flow.Catalog, logger *slog.Logger, apiURL string) error {
	rctx, stopReaper := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- reaper.New(ReaperConfig(cfg, st, logger)).Run(rctx) }()
	wc := WorkerConfig(cfg, st, catalog, logger, apiURL)
	binDir, removeBinDir := CLIBinDir(logger)
	defer removeBinDir()
	wc.BinDir = binDir
	err := worker.New(wc).Run(ctx)
	stopReaper()
	return errors.Join(err, <-done)
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
