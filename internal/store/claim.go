package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/maxq-dev/maxq/internal/core"
)

// WorkerRegister records a live worker process and returns its id.
func (s *Store) WorkerRegister(ctx context.Context, host string) (string, error) {
	id := newID()
	now := s.nowMillis()
	if _, err := s.pool.Exec(ctx, `INSERT INTO worker (id, host, pid, started_at, heartbeat_at) VALUES ($1, $2, $3, $4, $4)`,
		id, host, os.Getpid(), now); err != nil {
		return "", fmt.Errorf("register worker: %w", interpretError(err))
	}
	return id, nil
}

// WorkerHeartbeat renews a worker's lease on everything it runs — one
// statement however many scripts that is — and reports which of the steps
// and flow calls it believes it runs are no longer its own (cancelled, or
// taken over), so it can stop them. A step its script already ended
// through the API (PATCH /steps/{id}) is still the worker's: the script
// may go on to its end.
func (s *Store) WorkerHeartbeat(ctx context.Context, workerID string, steps, calls []string) (lostSteps, lostCalls []string, err error) {
	rows, err := s.pool.Query(ctx, `
		WITH hb AS (UPDATE worker SET heartbeat_at = $2 WHERE id = $1)
		SELECT 's', mine.id FROM unnest($3::text[]) AS mine(id)
		WHERE NOT EXISTS (SELECT 1 FROM step s WHERE s.id = mine.id AND s.status IN ('running', 'completed', 'failed') AND s.worker_id = $1)
		UNION ALL
		SELECT 'c', mine.id FROM unnest($4::text[]) AS mine(id)
		WHERE NOT EXISTS (SELECT 1 FROM flow_call f WHERE f.id = mine.id AND f.status = 'running' AND f.worker_id = $1)`,
		workerID, s.nowMillis(), steps, calls)
	if err != nil {
		return nil, nil, fmt.Errorf("heartbeat: %w", interpretError(err))
	}
	var kind, id string
	_, err = pgx.ForEachRow(rows, []any{&kind, &id}, func() error {
		if kind == "s" {
			lostSteps = append(lostSteps, id)
		} else {
			lostCalls = append(lostCalls, id)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("heartbeat: %w", interpretError(err))
	}
	return lostSteps, lostCalls, nil
}

// WorkerDeregister removes a worker's row when it stops.
func (s *Store) WorkerDeregister(ctx context.Context, workerID string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM worker WHERE id = $1`, workerID)
	return interpretError(err)
}

// ClaimedStep is a step attempt a worker now owns.
type ClaimedStep struct {
	ID        string
	RunID     string
	FlowName  string
	Stage     string
	Name      string
	Sequence  int
	Instances int
	Attempt   int
	Env       map[string]string
	TimeoutMs int64 // 0: none
}

// stepClaim is the claim of ready steps, those that match also: lock the
// oldest ready rows that no one else has locked, and start an attempt of
// each. The claim's partial index holds exactly the ready rows.
func stepClaim(also string) string {
	return `
WITH ready AS (
    SELECT id FROM step
    WHERE ` + also + `status = 'pending' AND deps_left = 0 AND ready_at <= $3
      AND ($5::bigint = 0 OR coalesce(timeout_ms, NULLIF($4::bigint, 0), 0) <= $5)
    ORDER BY ready_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE step s SET status = 'running', attempt = s.attempt + 1, worker_id = $1, started_at = $3,
    deadline_at = $3 + coalesce(s.timeout_ms, NULLIF($4::bigint, 0)), exit_code = NULL
FROM ready, stage g, run r
WHERE s.id = ready.id AND g.id = s.stage_id AND r.id = s.run_id
RETURNING s.id, s.run_id, r.flow_name, g.name, s.name, s.sequence, s.instances, s.attempt, s.env,
    coalesce(s.timeout_ms, $4::bigint)`
}

var (
	stepClaimSQL = stepClaim("")
	// stepClaimReadySQL claims among the steps $6 only (transition.claimReady).
	stepClaimReadySQL = stepClaim("id = ANY($6::text[]) AND ")
)

// StepClaimParams says what a worker can take.
type StepClaimParams struct {
	WorkerID string
	Limit    int
	// DefaultTimeoutMs applies to steps that set no MAXQ_STEP_TIMEOUT (0: none).
	DefaultTimeoutMs int64
	// MaxTimeoutMs, when set, leaves steps whose timeout is longer for
	// another worker (a serverless invocation with that much time left).
	MaxTimeoutMs int64
}

// StepClaim claims up to Limit ready steps for a worker, oldest ready first.
func (s *Store) StepClaim(ctx context.Context, p StepClaimParams) ([]ClaimedStep, error) {
	rows, err := s.pool.Query(ctx, stepClaimSQL, p.WorkerID, p.Limit, s.nowMillis(), p.DefaultTimeoutMs, max(p.MaxTimeoutMs, 0))
	if err != nil {
		return nil, fmt.Errorf("claim steps: %w", interpretError(err))
	}
	claimed, err := pgx.CollectRows(rows, scanClaimedStep)
	if err != nil {
		return nil, fmt.Errorf("claim steps: %w", interpretError(err))
	}
	return claimed, nil
}

// ClaimParams says what a worker can take: up to Flows flow calls and up to
// Steps steps (either may be 0).
type ClaimParams struct {
	Flows int
	StepClaimParams
}

// Claimed is what one Claim took.
type Claimed struct {
	Calls []ClaimedFlowCall
	Steps []ClaimedStep
	// NextReady is when the earliest pending step still waiting out a
	// retry backoff becomes ready (epoch ms; 0: none waits). Steps ready
	// already but not claimed — locked by another claim, or with a timeout
	// longer than MaxTimeoutMs — do not count: waking for them would only
	// claim nothing again.
	NextReady int64
}

// Claim claims flow calls and steps and looks up the next backoff's end in
// one round trip: the statements are pipelined, and run as one implicit
// transaction.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (Claimed, error) {
	now := s.nowMillis()
	b := &pgx.Batch{}
	var out Claimed
	if p.Flows > 0 {
		b.Queue(flowCallClaimSQL, p.WorkerID, p.Flows, now).Query(func(rows pgx.Rows) (err error) {
			out.Calls, err = pgx.CollectRows(rows, scanClaimedFlowCall)
			return err
		})
	}
	if p.Limit > 0 {
		b.Queue(stepClaimSQL, p.WorkerID, p.Limit, now, p.DefaultTimeoutMs, max(p.MaxTimeoutMs, 0)).Query(func(rows pgx.Rows) (err error) {
			out.Steps, err = pgx.CollectRows(rows, scanClaimedStep)
			return err
		})
		b.Queue(stepNextReadySQL, now).QueryRow(func(row pgx.Row) error {
			var at *int64
			err := row.Scan(&at)
			if at != nil {
				out.NextReady = *at
			}
			return err
		})
	}
	if b.Len() == 0 {
		return out, nil
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Claimed{}, fmt.Errorf("claim: %w", interpretError(err))
	}
	return out, nil
}

func scanClaimedStep(row pgx.CollectableRow) (ClaimedStep, error) {
	var c ClaimedStep
	err := row.Scan(&c.ID, &c.RunID, &c.FlowName, &c.Stage, &c.Name, &c.Sequence, &c.Instances, &c.Attempt, &c.Env, &c.TimeoutMs)
	return c, err
}

func scanClaimedFlowCall(row pgx.CollectableRow) (ClaimedFlowCall, error) {
	var c ClaimedFlowCall
	err := row.Scan(&c.ID, &c.RunID, &c.FlowName, &c.CompletedStage, &c.FailedStage, &c.Attempt)
	return c, err
}

// stepNextReadySQL starts its scan of the claim's index past now, where
// only backoffs are: the entries before it are mostly steps claimed since
// the index was last vacuumed, which a scan from the start would visit one
// by one.
const stepNextReadySQL = `SELECT min(ready_at) FROM step WHERE status = 'pending' AND deps_left = 0 AND ready_at > $1`

// ClaimedFlowCall is a call of flow.sh a worker now owns.
type ClaimedFlowCall struct {
	ID             string
	RunID          string
	FlowName       string
	CompletedStage string
	FailedStage    string
	Attempt        int
}

// flowCallClaim claims the oldest pending call of up to $2 runs that are
// ready for one (and match also). Locking the run rows (flow_ready is
// rechecked on the latest row version) is what keeps two calls of one run
// from running at once; the claim clears flow_ready and starts a pending
// run.
func flowCallClaim(also string) string {
	return `
WITH r AS (
    SELECT id FROM run WHERE ` + also + `flow_ready ORDER BY flow_ready_at LIMIT $2 FOR NO KEY UPDATE SKIP LOCKED
), c AS (
    SELECT DISTINCT ON (f.run_id) f.id FROM flow_call f JOIN r ON r.id = f.run_id
    WHERE f.status = 'pending'
    ORDER BY f.run_id, f.created_at, f.id
), u AS (
    UPDATE run SET flow_ready = false, flow_ready_at = NULL,
        status = CASE WHEN run.status = 'pending' THEN 'running' ELSE run.status END,
        started_at = coalesce(run.started_at, $3)
    FROM r WHERE run.id = r.id
)
UPDATE flow_call f SET status = 'running', attempt = f.attempt + 1, worker_id = $1, started_at = $3
FROM c, run
WHERE f.id = c.id AND run.id = f.run_id
RETURNING f.id, f.run_id, run.flow_name, coalesce(f.completed_stage, ''), coalesce(f.failed_stage, ''), f.attempt`
}

var (
	flowCallClaimSQL = flowCallClaim("")
	// flowCallClaimReadySQL claims among the runs $4 only
	// (transition.claimFlows).
	flowCallClaimReadySQL = flowCallClaim("id = ANY($4::text[]) AND ")
)

// FlowCallClaim claims up to limit pending flow calls, at most one per run.
func (s *Store) FlowCallClaim(ctx context.Context, workerID string, limit int) ([]ClaimedFlowCall, error) {
	rows, err := s.pool.Query(ctx, flowCallClaimSQL, workerID, limit, s.nowMillis())
	if err != nil {
		return nil, fmt.Errorf("claim flow calls: %w", interpretError(err))
	}
	claimed, err := pgx.CollectRows(rows, scanClaimedFlowCall)
	if err != nil {
		return nil, fmt.Errorf("claim flow calls: %w", interpretError(err))
	}
	return claimed, nil
}

// FlowCallFinishParams is how one call of flow.sh ended.
type FlowCallFinishParams struct {
	CallID  string
	Attempt int // fencing token: the attempt the worker ran
	// Error is nil when flow.sh exited 0; otherwise the run fails with it.
	Error    json.RawMessage
	ExitCode *int
}

// FlowCallFinish records the end of a flow call, in one transaction. A
// failed call fails the run, cancelling what of it is pending or running.
// After a successful call, the run ends if nothing of it is pending or
// running — completed when its last stage completed (or it scheduled none),
// failed when its last stage failed — and otherwise the run's next queued
// call, if any, becomes claimable. applied is false when fenced off.
func (s *Store) FlowCallFinish(ctx context.Context, p FlowCallFinishParams) (applied bool, err error) {
	if !validID(p.CallID) {
		return false, fmt.Errorf("flow call %q: %w", p.CallID, core.ErrNotFound)
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		applied = false
		now := s.nowMillis()
		t := newTransition(ctx, tx, now)
		var runID string
		if err := tx.QueryRow(ctx, `SELECT run_id FROM flow_call WHERE id = $1`, p.CallID).Scan(&runID); err != nil {
			return err
		}
		runStatus, err := t.lockRun(runID)
		if err != nil {
			return err
		}
		status := core.FlowCallCompleted
		if p.Error != nil {
			status = core.FlowCallFailed
		}
		tag, err := tx.Exec(ctx, `UPDATE flow_call SET status = $3, exit_code = $4, error = $5, completed_at = $6
			WHERE id = $1 AND attempt = $2 AND status = 'running'`, p.CallID, p.Attempt, status, p.ExitCode, nullJSON(p.Error), now)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		applied = true
		if runStatus.Terminal() {
			return nil
		}
		if p.Error != nil {
			if err := t.runFinish(runID, core.RunFailed, p.Error); err != nil {
				return err
			}
			return t.settle()
		}
		if err := t.runSettleIfIdle(runID); err != nil {
			return err
		}
		return t.settle()
	})
	if err != nil {
		return false, fmt.Errorf("finish flow call: %w", err)
	}
	return applied, nil
}

// runSettleIfIdle ends a run that has nothing pending or running — completed
// when its last stage completed (or it scheduled none), failed when its
// last stage failed — and otherwise makes its next queued flow call
// claimable. The caller holds the run's lock.
func (t *transition) runSettleIfIdle(runID string) error {
	var busy bool
	var lastStatus *core.StageStatus
	var lastName *string
	if err := t.tx.QueryRow(t.ctx, `SELECT
		    EXISTS (SELECT 1 FROM step WHERE run_id = $1 AND status IN ('pending', 'running'))
		    OR EXISTS (SELECT 1 FROM flow_call WHERE run_id = $1 AND status IN ('pending', 'running')),
		    (SELECT status FROM stage WHERE run_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1),
		    (SELECT name FROM stage WHERE run_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1)`,
		runID).Scan(&busy, &lastStatus, &lastName); err != nil {
		return fmt.Errorf("look at run: %w", err)
	}
	if busy {
		return t.flowReadyRefresh(runID)
	}
	if lastStatus != nil && *lastStatus == core.StageFailed {
		runErr, _ := json.Marshal(map[string]any{"reason": core.ReasonStageFailed, "stage": *lastName,
			"detail": "stage " + *lastName + " failed and the flow scheduled nothing after it"})
		return t.runFinish(runID, core.RunFailed, runErr)
	}
	return t.runFinish(runID, core.RunCompleted, nil)
}
