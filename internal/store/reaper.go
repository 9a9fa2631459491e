package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/maxq-dev/maxq/internal/core"
)

// reaperLockKey is the pg_try_advisory_xact_lock key that lets one reaper
// sweep at a time ("mxqr").
const reaperLockKey = 0x6d787172

// SweepParams tune one reaper sweep.
type SweepParams struct {
	// LeaseTTL: a worker whose heartbeat is older has lost its work.
	LeaseTTL time.Duration
	// MaxFlowAttempts bounds how often a flow call lost with its worker is
	// called again before the run fails.
	MaxFlowAttempts int
	// Limit bounds the rows one sweep handles of each kind (default 1000).
	Limit int
}

// SweepResult is what a sweep did.
type SweepResult struct {
	Skipped       bool // another reaper held the lock
	StepsLost     int  // running steps of dead workers, failed as worker_lost
	FlowCallsLost int  // running flow calls of dead workers, queued again or failed
	RunsSettled   int  // runs with nothing left to do that were not terminal
	WorkersGone   int  // rows of long-dead workers removed
}

// FlowCallRelease hands a running flow call back as pending — a worker
// shutting down gracefully — so another worker calls flow.sh again.
func (s *Store) FlowCallRelease(ctx context.Context, callID string, attempt int) (bool, error) {
	var released bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		t := newTransition(ctx, tx, s.nowMillis())
		var runID string
		if err := tx.QueryRow(ctx, `SELECT run_id FROM flow_call WHERE id = $1`, callID).Scan(&runID); err != nil {
			return err
		}
		if _, err := t.lockRun(runID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE flow_call SET status = 'pending', worker_id = NULL, started_at = NULL
			WHERE id = $1 AND attempt = $2 AND status = 'running'`, callID, attempt)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		released = true
		if err := t.flowReadyRefresh(runID); err != nil {
			return err
		}
		return t.settle()
	})
	if err != nil {
		return false, fmt.Errorf("release flow call: %w", err)
	}
	return released, nil
}

// Sweep is one pass of the reaper, in one transaction under an advisory
// lock (a transaction lock, so it works behind connection poolers): the
// running steps of workers whose lease expired count as failed attempts
// with reason worker_lost and retry or fail; their running flow calls are
// queued again, or fail the run after MaxFlowAttempts; runs that are not
// terminal but have nothing pending or running are settled; and long-dead
// worker rows are removed.
func (s *Store) Sweep(ctx context.Context, p SweepParams) (SweepResult, error) {
	if p.Limit <= 0 {
		p.Limit = 1000
	}
	var res SweepResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = SweepResult{}
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, reaperLockKey).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			res.Skipped = true
			return nil
		}
		now := s.nowMillis()
		expired := now - p.LeaseTTL.Milliseconds()
		t := newTransition(ctx, tx, now)

		rows, err := tx.Query(ctx, `SELECT s.id, s.attempt FROM step s LEFT JOIN worker w ON w.id = s.worker_id
			WHERE s.status = 'running' AND (w.id IS NULL OR w.heartbeat_at < $1)
			ORDER BY s.id LIMIT $2`, expired, p.Limit)
		if err != nil {
			return err
		}
		type lost struct {
			id      string
			attempt int
		}
		var steps []lost
		var l lost
		if _, err := pgx.ForEachRow(rows, []any{&l.id, &l.attempt}, func() error { steps = append(steps, l); return nil }); err != nil {
			return err
		}
		lostErr, _ := json.Marshal(map[string]any{"reason": core.ReasonWorkerLost,
			"detail": "the worker running this attempt stopped renewing its lease"})
		for _, st := range steps {
			applied, err := t.stepFinish(StepFinishParams{StepID: st.id, Attempt: st.attempt, Error: lostErr, Retry: true})
			if err != nil {
				return err
			}
			if applied {
				res.StepsLost++
				t.wake = true
			}
		}

		rows, err = tx.Query(ctx, `SELECT f.id, f.run_id, f.attempt FROM flow_call f LEFT JOIN worker w ON w.id = f.worker_id
			WHERE f.status = 'running' AND (w.id IS NULL OR w.heartbeat_at < $1)
			ORDER BY f.id LIMIT $2`, expired, p.Limit)
		if err != nil {
			return err
		}
		type lostCall struct {
			id, runID string
			attempt   int
		}
		var calls []lostCall
		var c lostCall
		if _, err := pgx.ForEachRow(rows, []any{&c.id, &c.runID, &c.attempt}, func() error { calls = append(calls, c); return nil }); err != nil {
			return err
		}
		for _, c := range calls {
			if _, err := t.lockRun(c.runID); err != nil {
				return err
			}
			if c.attempt >= p.MaxFlowAttempts {
				callErr, _ := json.Marshal(map[string]any{"reason": core.ReasonFlowFailed, "cause": core.ReasonWorkerLost,
					"detail": fmt.Sprintf("flow.sh was lost with its worker %d times", c.attempt)})
				if _, err := tx.Exec(ctx, `UPDATE flow_call SET status = 'failed', error = $2, completed_at = $3 WHERE id = $1`,
					c.id, callErr, now); err != nil {
					return err
				}
				if err := t.runFinish(c.runID, core.RunFailed, callErr); err != nil {
					return err
				}
			} else {
				if _, err := tx.Exec(ctx, `UPDATE flow_call SET status = 'pending', worker_id = NULL, started_at = NULL
					WHERE id = $1`, c.id); err != nil {
					return err
				}
				if err := t.flowReadyRefresh(c.runID); err != nil {
					return err
				}
			}
			res.FlowCallsLost++
		}
		if err := t.settle(); err != nil {
			return err
		}

		settled, err := t.settleIdleRuns(p.Limit)
		if err != nil {
			return err
		}
		res.RunsSettled = settled

		tag, err := tx.Exec(ctx, `DELETE FROM worker w WHERE w.heartbeat_at < $1
			AND NOT EXISTS (SELECT 1 FROM step WHERE worker_id = w.id AND status = 'running')
			AND NOT EXISTS (SELECT 1 FROM flow_call WHERE worker_id = w.id AND status = 'running')`,
			now-10*p.LeaseTTL.Milliseconds())
		if err != nil {
			return err
		}
		res.WorkersGone = int(tag.RowsAffected())
		return t.settle()
	})
	if err != nil {
		return SweepResult{}, fmt.Errorf("reaper sweep: %w", err)
	}
	return res, nil
}

// settleIdleRuns finds runs that are neither terminal nor have anything
// pending or running, and ends them as a finished flow call would have —
// or, if a call is queued but the run is not marked ready, marks it. It
// must never find anything; it is the net under the transitions.
func (t *transition) settleIdleRuns(limit int) (int, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT r.id FROM run r
		WHERE r.status IN ('pending', 'running') AND NOT r.flow_ready
		  AND NOT EXISTS (SELECT 1 FROM flow_call WHERE run_id = r.id AND status = 'running')
		  AND NOT EXISTS (SELECT 1 FROM step WHERE run_id = r.id AND status IN ('pending', 'running'))
		LIMIT $1`, limit)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		if _, err := t.lockRun(id); err != nil {
			return 0, err
		}
		if err := t.runSettleIfIdle(id); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}
