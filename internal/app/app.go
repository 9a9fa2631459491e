// Package app is the wiring MaxQ's binaries share: logging, the database
// (configured, or an embedded PostgreSQL for development), migrations, and
// the HTTP server with graceful shutdown. cmd/*/main.go stay a few lines.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/migrate"
	"github.com/maxq-dev/maxq/internal/pglocal"
)

// Logger returns the process logger: text on stderr at the configured level.
func Logger(cfg config.Config) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
}

// Database is an open, migrated database, and what to do to close it.
type Database struct {
	Pool  *pgxpool.Pool
	URL   string
	close func()
}

// Close closes the pool and stops an embedded server.
func (d *Database) Close() {
	if d.close != nil {
		d.close()
	}
}

// defaultPoolSize is the connection pool size unless the database URL sets
// pool_max_conns. In Lambda, where a container serves one request or invocation at a
// time and reserved concurrency × pool size must stay under the server's
// max_connections, it is smaller.
const (
	defaultPoolSize = 20
	lambdaPoolSize  = 5
)

// idleInTransactionTimeout (ms) ends sessions idle inside a transaction for
// longer; MaxQ's own transactions never are.
const idleInTransactionTimeout = "10000"

// embeddedDBName is the database cmd/local keeps its state in.
const embeddedDBName = "maxq"

// OpenDatabase connects to cfg.DatabaseURL, or, when it is empty and
// embeddedDir is set, starts (and first creates) a private PostgreSQL in
// embeddedDir. Either way it applies the migrations before returning.
func OpenDatabase(ctx context.Context, cfg config.Config, logger *slog.Logger, embeddedDir string) (*Database, error) {
	db := &Database{URL: cfg.DatabaseURL}
	var cluster *pglocal.Cluster
	if db.URL == "" {
		if embeddedDir == "" {
			return nil, errors.New("MAXQ_DATABASE_URL is not set")
		}
		var err error
		cluster, err = pglocal.Start(ctx, pglocal.Options{Dir: embeddedDir, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("embedded PostgreSQL: %w", err)
		}
		if err := createDatabase(ctx, cluster.URL("postgres"), embeddedDBName); err != nil {
			stopCluster(cluster, logger)
			return nil, err
		}
		db.URL = cluster.URL(embeddedDBName)
		logger.Info("embedded PostgreSQL started", "data_dir", cluster.Dir(), "url", db.URL,
			"hint", "set MAXQ_DATABASE_URL to use your own server")
	}
	pool, err := Connect(ctx, db.URL)
	if err != nil {
		stopCluster(cluster, logger)
		return nil, err
	}
	applied, err := migrate.Apply(ctx, pool)
	if err != nil {
		pool.Close()
		stopCluster(cluster, logger)
		return nil, err
	}
	if applied > 0 {
		logger.Info("database migrated", "migrations_applied", applied)
	}
	db.Pool = pool
	db.close = func() {
		pool.Close()
		stopCluster(cluster, logger)
	}
	return db, nil
}

// Connect opens a pool on url and checks that the server answers.
func Connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("MAXQ_DATABASE_URL: %w", err)
	}
	// A session that stays idle inside a transaction — a worker frozen or
	// cut off mid-transaction — would hold its row locks, and with them
	// the reaper, for as long as it lives; the server ends it instead.
	if _, set := pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = idleInTransactionTimeout
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgx's default (the number of CPUs, at least 4) is too few for a
		// worker's LISTEN, heartbeat, log writer and results plus the API.
		pcfg.MaxConns = defaultPoolSize
		if InLambda() {
			pcfg.MaxConns = lambdaPoolSize
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %w", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, err)
	}
	return pool, nil
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to embedded PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

func stopCluster(c *pglocal.Cluster, logger *slog.Logger) {
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		logger.Error("stop embedded PostgreSQL", "err", err)
	}
}

// EmbeddedDir is where cmd/local keeps its embedded PostgreSQL: .maxq/pgdata
// under the working directory, so runs survive a restart.
func EmbeddedDir() string {
	return filepath.Join(".maxq", "pgdata")
}

// Serve serves handler on ln until ctx is done, then shuts down gracefully,
// giving requests in flight up to grace to finish.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, grace time.Duration) error {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down HTTP server: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
