package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The benchmark reads its results from MaxQ's rows: times there are epoch
// milliseconds taken by the process that made the transition (the worker
// for claims and completions, the API for triggers and schedules), all on
// this machine's clock.

type runRow struct {
	ID          string `db:"id"`
	Status      string `db:"status"`
	CreatedAt   int64  `db:"created_at"`
	StartedAt   *int64 `db:"started_at"`
	CompletedAt *int64 `db:"completed_at"`
}

type stageRow struct {
	RunID       string `db:"run_id"`
	Name        string `db:"name"`
	CreatedAt   int64  `db:"created_at"`
	CompletedAt *int64 `db:"completed_at"`
}

type stepRow struct {
	ID          string `db:"id"`
	RunID       string `db:"run_id"`
	Name        string `db:"name"`
	Status      string `db:"status"`
	CreatedAt   int64  `db:"created_at"`
	StartedAt   *int64 `db:"started_at"`
	CompletedAt *int64 `db:"completed_at"`
}

type flowCallRow struct {
	RunID          string  `db:"run_id"`
	CompletedStage *string `db:"completed_stage"`
	CreatedAt      int64   `db:"created_at"`
	StartedAt      *int64  `db:"started_at"`
	CompletedAt    *int64  `db:"completed_at"`
}

func (st *stack) runs(ctx context.Context, ids []string) ([]runRow, error) {
	return collect[runRow](ctx, st, `SELECT id, status, created_at, started_at, completed_at FROM run WHERE id = ANY($1)`, ids)
}

func (st *stack) stages(ctx context.Context, runIDs []string) ([]stageRow, error) {
	return collect[stageRow](ctx, st, `SELECT run_id, name, created_at, completed_at FROM stage WHERE run_id = ANY($1)`, runIDs)
}

func (st *stack) steps(ctx context.Context, runIDs []string) ([]stepRow, error) {
	return collect[stepRow](ctx, st, `SELECT id, run_id, name, status, created_at, started_at, completed_at
		FROM step WHERE run_id = ANY($1)`, runIDs)
}

func (st *stack) flowCalls(ctx context.Context, runIDs []string) ([]flowCallRow, error) {
	return collect[flowCallRow](ctx, st, `SELECT run_id, completed_stage, created_at, started_at, completed_at
		FROM flow_call WHERE run_id = ANY($1)`, runIDs)
}

func collect[T any](ctx context.Context, st *stack, sql string, args ...any) ([]T, error) {
	rows, err := st.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[T])
}

// waitRuns waits until every run has ended and fails unless all completed.
func (st *stack) waitRuns(ctx context.Context, ids []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var open int
		var failed []string
		err := st.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE completed_at IS NULL),
			    coalesce(array_agg(id || ' ' || status || ' ' || coalesce(error::text, ''))
			        FILTER (WHERE completed_at IS NOT NULL AND status <> 'completed'), '{}')
			FROM run WHERE id = ANY($1)`, ids).Scan(&open, &failed)
		if err != nil {
			return fmt.Errorf("wait for runs: %w", err)
		}
		if len(failed) > 0 {
			return fmt.Errorf("%d of %d runs did not complete: %s", len(failed), len(ids), strings.Join(failed[:min(len(failed), 3)], "; "))
		}
		if open == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d runs still open after %s", open, len(ids), timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runningSteps counts the steps running now.
func (st *stack) runningSteps(ctx context.Context) (int, error) {
	var n int
	err := st.pool.QueryRow(ctx, `SELECT count(*) FROM step WHERE status = 'running'`).Scan(&n)
	return n, err
}

// waitStepRunning waits until the run's step of that name is running.
func (st *stack) waitStepRunning(ctx context.Context, runID, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var n int
		if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM step WHERE run_id = $1 AND name = $2 AND status = 'running'`,
			runID, name).Scan(&n); err != nil {
			return fmt.Errorf("wait for step %s of run %s: %w", name, runID, err)
		}
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("step %s of run %s not running: %w", name, runID, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
