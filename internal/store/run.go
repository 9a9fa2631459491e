package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/maxq-dev/maxq/internal/core"
)

const runColumns = `id, flow_name, status, input, output, error, metadata, created_at, started_at, completed_at, duration_ms`

func scanRun(row pgx.Row) (core.Run, error) {
	var r core.Run
	err := row.Scan(&r.ID, &r.FlowName, &r.Status, &r.Input, &r.Output, &r.Error, &r.Metadata,
		&r.CreatedAt, &r.StartedAt, &r.CompletedAt, &r.DurationMs)
	return r, err
}

// RunCreateParams describes a trigger.
type RunCreateParams struct {
	FlowName string
	Input    json.RawMessage
	Metadata json.RawMessage
	// IdempotencyKey, when set, makes a repeated trigger of the same flow
	// with the same key return the first run instead of creating another.
	IdempotencyKey string
}

const runCreateSQL = `
WITH r AS (
    INSERT INTO run (id, flow_name, status, input, metadata, created_at, idempotency_key, flow_ready, flow_ready_at)
    VALUES ($1, $2, 'pending', $3, $4, $5, NULLIF($6, ''), true, $5)
    ON CONFLICT (flow_name, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING ` + runColumns + `
), c AS (
    INSERT INTO flow_call (id, run_id, status, created_at)
    SELECT $7, id, 'pending', created_at FROM r
)
SELECT ` + runColumns + ` FROM r`

// RunCreate inserts a pending run and its first pending flow call in one
// transaction and wakes the workers. created is false when the idempotency
// key matched an earlier run, which is returned instead.
func (s *Store) RunCreate(ctx context.Context, p RunCreateParams) (run core.Run, created bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		run, err = scanRun(tx.QueryRow(ctx, runCreateSQL, newID(), p.FlowName, nullJSON(p.Input), nullJSON(p.Metadata),
			s.nowMillis(), p.IdempotencyKey, newID()))
		if errors.Is(err, pgx.ErrNoRows) && p.IdempotencyKey != "" {
			created = false
			run, err = scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM run WHERE flow_name = $1 AND idempotency_key = $2`,
				p.FlowName, p.IdempotencyKey))
			return err
		}
		if err != nil {
			return err
		}
		created = true
		return notify(ctx, tx)
	})
	if err != nil {
		return core.Run{}, false, fmt.Errorf("create run: %w", err)
	}
	return run, created, nil
}

// RunGet returns a run and its stages in the order they were scheduled.
func (s *Store) RunGet(ctx context.Context, id string) (core.Run, []core.Stage, error) {
	if !validID(id) {
		return core.Run{}, nil, fmt.Errorf("run %q: %w", id, core.ErrNotFound)
	}
	run, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM run WHERE id = $1`, id))
	if err != nil {
		return core.Run{}, nil, fmt.Errorf("run %s: %w", id, interpretError(err))
	}
	rows, err := s.pool.Query(ctx, `SELECT id, run_id, name, status, final, created_at, completed_at
		FROM stage WHERE run_id = $1 ORDER BY created_at, id`, id)
	if err != nil {
		return core.Run{}, nil, fmt.Errorf("get stages: %w", interpretError(err))
	}
	stages, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (core.Stage, error) {
		var g core.Stage
		err := row.Scan(&g.ID, &g.RunID, &g.Name, &g.Status, &g.Final, &g.CreatedAt, &g.CompletedAt)
		return g, err
	})
	if err != nil {
		return core.Run{}, nil, fmt.Errorf("get stages: %w", interpretError(err))
	}
	return run, stages, nil
}

// RunListParams filters and pages the list of runs.
type RunListParams struct {
	FlowName string
	Status   core.RunStatus
	Page
}

var runSortColumns = map[string]string{
	"":            "created_at",
	"createdAt":   "created_at",
	"startedAt":   "started_at",
	"completedAt": "completed_at",
	"flowName":    "flow_name",
	"status":      "status",
}

// RunSortFields are the sortBy values the run list accepts.
func RunSortFields() []string { return sortFields(runSortColumns) }

// RunList returns a page of runs and how many match in all.
func (s *Store) RunList(ctx context.Context, p RunListParams) ([]core.Run, int, error) {
	where, args := filters{}.
		add("flow_name = $%d", p.FlowName, p.FlowName != "").
		add("status = $%d", string(p.Status), p.Status != "").
		build()
	return listPage(ctx, s, listQuery{what: "list runs", columns: runColumns, from: " FROM run" + where,
		orderBy: p.orderBy(runSortColumns), args: args}, p.Page,
		func(row pgx.CollectableRow, total *int) (core.Run, error) {
			var r core.Run
			err := row.Scan(&r.ID, &r.FlowName, &r.Status, &r.Input, &r.Output, &r.Error, &r.Metadata,
				&r.CreatedAt, &r.StartedAt, &r.CompletedAt, &r.DurationMs, total)
			return r, err
		})
}

func nullJSON(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}
