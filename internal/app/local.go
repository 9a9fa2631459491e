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
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/flow"
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
	handler := api.New(api.Config{Store: store.New(db.Pool), Catalog: catalog, Logger: logger, MaxBodyBytes: cfg.MaxBodyBytes})
	apiURL := cmp.Or(cfg.APIURL, LocalAPIURL(ln.Addr()))
	w := worker.New(WorkerConfig(cfg, store.New(db.Pool), catalog, logger, apiURL))
	logger.Info("MaxQ is up", "api", apiURL, "flows_root", catalog.Root, "auth", "none (development)")

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- Serve(ctx, ln, handler, 10*time.Second) }()
	go func() { errc <- w.Run(ctx) }()
	err = <-errc
	cancel()
	return errors.Join(err, <-errc)
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
		Store:        st,
		Catalog:      catalog,
		Logger:       logger,
		APIURL:       apiURL,
		MaxSteps:     cfg.MaxConcurrentSteps,
		MaxFlows:     cfg.MaxConcurrentFlows,
		StepTimeout:  cfg.StepTimeout,
		FlowTimeout:  cfg.FlowTimeout,
		MaxLogBytes:  cfg.MaxLogBytes,
		PassEnv:      cfg.PassEnv,
		PollInterval: cfg.PollInterval,
	}
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
