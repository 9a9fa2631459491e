package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/migrate"
	"github.com/maxq-dev/maxq/internal/pglocal"
	"github.com/maxq-dev/maxq/internal/store"
)

// dbName is the database the benchmark works in on its private server.
const dbName = "maxq_bench"

// stack is what the scenarios run on: a database, the API served by this
// process, and a FLOWS_ROOT of generated flows. Workers are started per
// scenario, as child processes.
type stack struct {
	dir     string // working directory
	flows   string // FLOWS_ROOT
	cluster *pglocal.Cluster
	dbURL   string
	// pool is the benchmark's own: reading results, seeding, floors. The
	// API has a pool of its own, sized as in production.
	pool       *pgxpool.Pool
	apiPool    *pgxpool.Pool
	apiURL     string
	client     *http.Client
	stopAPI    func()
	workerCmd  []string
	profileDir string
	// statements: pg_stat_statements is loaded (private server, profiling).
	statements bool
	keep       bool
}

// startStack starts PostgreSQL (unless opts names a database), migrates it
// and serves the API on a loopback port.
func startStack(ctx context.Context, opts Options) (_ *stack, err error) {
	dir, err := os.MkdirTemp("", "maxq-bench-")
	if err != nil {
		return nil, err
	}
	s := &stack{dir: dir, flows: filepath.Join(dir, "flows"), workerCmd: opts.WorkerCommand,
		profileDir: opts.ProfileDir, keep: opts.Keep, stopAPI: func() {}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	// The server may run as user postgres (when we are root): let it in.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.flows, 0o755); err != nil {
		return nil, err
	}
	if len(s.workerCmd) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find this executable to run workers: %w", err)
		}
		s.workerCmd = []string{exe}
	}

	s.dbURL = opts.DatabaseURL
	if s.dbURL == "" {
		settings := map[string]string{}
		if opts.ProfileDir != "" {
			settings["shared_preload_libraries"] = "pg_stat_statements"
			s.statements = true
		}
		// Fast stays false but for the smoke test: fsync and
		// synchronous_commit on, as in production.
		s.cluster, err = pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(dir, "pgdata"), Fast: opts.Fast, Settings: settings})
		if err != nil {
			return nil, fmt.Errorf("start PostgreSQL: %w", err)
		}
		if err := createDatabase(ctx, s.cluster.URL("postgres"), dbName); err != nil {
			return nil, err
		}
		s.dbURL = s.cluster.URL(dbName)
	}

	s.apiPool, err = app.Connect(ctx, s.dbURL)
	if err != nil {
		return nil, err
	}
	if _, err := migrate.Apply(ctx, s.apiPool); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(s.dbURL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 4
	if s.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, err
	}
	if s.statements {
		if _, err := s.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			return nil, fmt.Errorf("pg_stat_statements: %w", err)
		}
	}
	if _, err := s.pool.Exec(ctx, scratchTableSQL); err != nil {
		return nil, fmt.Errorf("create scratch table: %w", err)
	}

	cfg := config.Defaults()
	handler := api.New(api.Config{Store: store.New(s.apiPool), Catalog: flow.Catalog{Root: s.flows}, Logger: slog.New(slog.DiscardHandler),
		MaxBodyBytes: cfg.MaxBodyBytes, MaxArtifactBytes: cfg.MaxArtifactBytes, Tokens: auth.New("")})
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	apiCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- app.Serve(apiCtx, ln, handler, 5*time.Second) }()
	s.stopAPI = func() { cancel(); <-served }
	s.apiURL = app.LocalAPIURL(ln.Addr())
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}
	return s, nil
}

// close stops what startStack started and removes the working directory.
func (s *stack) close() {
	s.stopAPI()
	if s.client != nil {
		s.client.CloseIdleConnections()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.apiPool != nil {
		s.apiPool.Close()
	}
	if s.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = s.cluster.Stop(ctx)
		cancel()
	}
	if !s.keep {
		_ = os.RemoveAll(s.dir)
	}
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// truncate empties MaxQ's tables (and the scratch table) so that every
// scenario starts from an empty database.
func (s *stack) truncate(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `TRUNCATE run, worker, bench_scratch CASCADE`); err != nil {
		return fmt.Errorf("empty the tables: %w", err)
	}
	return nil
}

// postmasterPID is the server's process id, or 0 when the server is not
// ours.
func (s *stack) postmasterPID() int {
	if s.cluster == nil {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(s.cluster.Dir(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// statementsReset clears pg_stat_statements, when loaded.
func (s *stack) statementsReset(ctx context.Context) {
	if s.statements {
		_, _ = s.pool.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	}
}

// statementsCheckpoint writes the statements of a part of a scenario to
// pgstat-<name>.txt and starts counting afresh, when profiling.
func (s *suite) statementsCheckpoint(ctx context.Context, name string) {
	if s.opts.ProfileDir != "" {
		s.st.statementsDump(ctx, filepath.Join(s.opts.ProfileDir, "pgstat-"+name+".txt"))
		s.st.statementsReset(ctx)
	}
}

// statementsDump writes the statements that took the most time since the
// last reset.
func (s *stack) statementsDump(ctx context.Context, path string) {
	if !s.statements {
		return
	}
	rows, err := s.pool.Query(ctx, `SELECT calls, total_exec_time, mean_exec_time, rows,
		    regexp_replace(query, '\s+', ' ', 'g')
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC LIMIT 25`)
	if err != nil {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%10s %12s %10s %10s  %s\n", "calls", "total ms", "mean ms", "rows", "query")
	var calls, nrows int64
	var total, mean float64
	var query string
	_, err = pgx.ForEachRow(rows, []any{&calls, &total, &mean, &nrows, &query}, func() error {
		if len(query) > 160 {
			query = query[:160] + "…"
		}
		fmt.Fprintf(&b, "%10d %12.1f %10.3f %10d  %s\n", calls, total, mean, nrows, query)
		return nil
	})
	if err == nil {
		_ = os.WriteFile(path, []byte(b.String()), 0o644)
	}
}
