// Package reaper recovers work that its worker lost. Every worker runs one;
// the sweeps themselves take a PostgreSQL advisory lock, so one reaper
// sweeps at a time however many run.
//
// A sweep (store.Sweep) fails the running steps of workers whose lease
// expired with reason worker_lost (they retry or fail per maxRetries),
// queues their flow calls again a bounded number of times, settles runs
// that have nothing left to do but are not terminal (which should never
// happen, and is logged loudly when it does), and forgets long-dead workers.
//
// A reaper reaps nothing until it has been connected for one lease TTL: after
// a database restart every heartbeat looks stale, and live workers need
// that long to renew theirs.
package reaper

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/maxq-dev/maxq/internal/store"
)

// Config configures a Reaper; New fills zero values with defaults.
type Config struct {
	Store  *store.Store
	Logger *slog.Logger
	// LeaseTTL is how stale a worker's heartbeat may get before its work
	// is taken from it (default 15 s).
	LeaseTTL time.Duration
	// Interval is the time between sweeps, whole seconds (default 5 s).
	Interval time.Duration
	// MaxFlowAttempts bounds calls of flow.sh lost with their worker
	// (default 3).
	MaxFlowAttempts int
}

// Reaper sweeps on a schedule.
type Reaper struct {
	cfg    Config
	logger *slog.Logger

	mu           sync.Mutex
	healthySince time.Time // zero while the database is unreachable
}

// New returns a reaper; call Run, or Sweep for a single pass.
func New(cfg Config) *Reaper {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With("component", "reaper")
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, 15*time.Second)
	cfg.Interval = max(cmp.Or(cfg.Interval, 5*time.Second).Round(time.Second), time.Second)
	cfg.MaxFlowAttempts = cmp.Or(cfg.MaxFlowAttempts, 3)
	return &Reaper{cfg: cfg, logger: cfg.Logger}
}

// Run sweeps every Interval until ctx is done.
func (r *Reaper) Run(ctx context.Context) error {
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	if _, err := c.AddFunc("@every "+r.cfg.Interval.String(), func() {
		if _, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			r.logger.Warn("sweep failed", "err", err)
		}
	}); err != nil {
		return err
	}
	c.Start()
	<-ctx.Done()
	<-c.Stop().Done()
	return nil
}

// Sweep runs one pass now. Until the reaper has reached the database for a
// whole lease TTL it only checks the connection.
func (r *Reaper) Sweep(ctx context.Context) (store.SweepResult, error) {
	r.mu.Lock()
	if r.healthySince.IsZero() {
		r.healthySince = time.Now()
	}
	warm := time.Since(r.healthySince) >= r.cfg.LeaseTTL
	r.mu.Unlock()
	if !warm {
		if err := r.cfg.Store.Pool().Ping(ctx); err != nil {
			r.unhealthy()
			return store.SweepResult{}, err
		}
		return store.SweepResult{Skipped: true}, nil
	}
	res, err := r.cfg.Store.Sweep(ctx, store.SweepParams{LeaseTTL: r.cfg.LeaseTTL, MaxFlowAttempts: r.cfg.MaxFlowAttempts})
	if err != nil {
		r.unhealthy()
		return res, err
	}
	if res.StepsLost > 0 || res.FlowCallsLost > 0 {
		r.logger.Warn("recovered work of lost workers", "steps", res.StepsLost, "flow_calls", res.FlowCallsLost)
	}
	if res.RunsSettled > 0 {
		r.logger.Error("settled runs that had nothing left to do but had not ended; this is a bug in MaxQ, please report it",
			"runs", res.RunsSettled)
	}
	return res, nil
}

// Warm makes the reaper treat the database as reachable for a whole TTL
// already; for a process that has just proven it (a Lambda invocation
// after a heartbeat) and for tests.
func (r *Reaper) Warm() {
	r.mu.Lock()
	r.healthySince = time.Now().Add(-r.cfg.LeaseTTL)
	r.mu.Unlock()
}

func (r *Reaper) unhealthy() {
	r.mu.Lock()
	r.healthySince = time.Time{}
	r.mu.Unlock()
}
