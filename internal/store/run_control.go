package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/maxq-dev/maxq/internal/core"
)

// NotifyCancel is the payload on NotifyChannel that tells workers to check
// at once whether what they run was cancelled.
const NotifyCancel = "cancel"

// RunCancel cancels a pending or running run: the run, its running stages
// and its pending and running steps and flow calls become cancelled, and
// workers are told to stop the scripts at once. Cancelling a cancelled run
// changes nothing; a completed or failed run is ErrConflict.
func (s *Store) RunCancel(ctx context.Context, id string) (core.Run, error) {
	if !validID(id) {
		return core.Run{}, fmt.Errorf("run %q: %w", id, core.ErrNotFound)
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		t := newTransition(ctx, tx, s.nowMillis())
		status, err := t.lockRun(id)
		if err != nil {
			return err
		}
		switch status {
		case core.RunCancelled:
			return nil
		case core.RunCompleted, core.RunFailed:
			return fmt.Errorf("%w: run %s is %s and cannot be cancelled", core.ErrConflict, id, status)
		}
		runErr, _ := json.Marshal(map[string]any{"reason": core.ReasonCancelled, "detail": "cancelled through the API"})
		if err := t.runFinish(id, core.RunCancelled, runErr); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE flow_call SET status = 'cancelled', completed_at = $2
			WHERE run_id = $1 AND status = 'running'`, id, t.now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, NotifyCancel); err != nil {
			return err
		}
		return t.settle()
	})
	if err != nil {
		return core.Run{}, fmt.Errorf("cancel run: %w", err)
	}
	run, _, err := s.RunGet(ctx, id)
	return run, err
}

// RunRetry resumes a failed run: its failed and cancelled steps go back to
// pending with fresh retry counts, their stages run again, and the run is
// running; when a retried stage ends, flow.sh is called back as before. A
// run that failed with no failed step (flow.sh itself failed) has its last
// failed flow call queued again. Retrying a pending or running run changes
// nothing; a completed or cancelled run is ErrConflict.
func (s *Store) RunRetry(ctx context.Context, id string) (core.Run, error) {
	if !validID(id) {
		return core.Run{}, fmt.Errorf("run %q: %w", id, core.ErrNotFound)
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		t := newTransition(ctx, tx, s.nowMillis())
		status, err := t.lockRun(id)
		if err != nil {
			return err
		}
		switch status {
		case core.RunPending, core.RunRunning:
			return nil
		case core.RunCompleted, core.RunCancelled:
			return fmt.Errorf("%w: run %s is %s; only a failed run can be retried", core.ErrConflict, id, status)
		}
		rows, err := tx.Query(ctx, `UPDATE step SET status = 'pending', retry_count = 0, error = NULL, exit_code = NULL,
			    started_at = NULL, completed_at = NULL, duration_ms = NULL, worker_id = NULL, deadline_at = NULL, ready_at = $2
			WHERE run_id = $1 AND status IN ('failed', 'cancelled')
			RETURNING stage_id`, id, t.now)
		if err != nil {
			return err
		}
		stages, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE step s SET deps_left = (
			    SELECT count(*) FROM step d WHERE d.run_id = s.run_id AND s.depends_on ? d.name AND d.status <> 'completed')
			WHERE s.run_id = $1 AND s.status = 'pending'`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE stage g SET status = 'running', completed_at = NULL,
			    steps_left = (SELECT count(*) FROM step WHERE stage_id = g.id AND status IN ('pending', 'running'))
			WHERE g.id = ANY($1)`, dedupe(stages)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE run SET status = 'running', error = NULL, completed_at = NULL, duration_ms = NULL
			WHERE id = $1`, id); err != nil {
			return err
		}
		if len(stages) == 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO flow_call (id, run_id, completed_stage, failed_stage, status, created_at)
				SELECT $2, run_id, completed_stage, failed_stage, 'pending', $3 FROM flow_call
				WHERE run_id = $1 AND status IN ('failed', 'cancelled')
				ORDER BY created_at DESC, id DESC LIMIT 1`, id, newID(), t.now); err != nil {
				return err
			}
			if err := t.flowReadyRefresh(id); err != nil {
				return err
			}
		}
		t.wake = true
		return t.settle()
	})
	if err != nil {
		return core.Run{}, fmt.Errorf("retry run: %w", err)
	}
	run, _, err := s.RunGet(ctx, id)
	if errors.Is(err, core.ErrNotFound) {
		return core.Run{}, err
	}
	return run, err
}
