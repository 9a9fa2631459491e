package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/maxq-dev/maxq/internal/core"
)

// transition gathers what one transaction's step transitions imply for
// their stages, and settles it once at the end: stage counters decremented,
// stages that ran out of steps completed or called back, workers notified.
type transition struct {
	ctx   context.Context
	tx    pgx.Tx
	now   int64
	done  map[string]int // stage id → steps that reached a terminal state
	ended []endedStage   // stages that ran out of steps, acted on by settle
	ready []string       // steps stepsCompleted made ready, not yet notified
	flows []string       // runs made ready for a flow call, not yet notified
	wake  bool           // something became ready: NOTIFY at the end
	woke  bool           // settle sent the NOTIFY
}

func newTransition(ctx context.Context, tx pgx.Tx, now int64) *transition {
	return &transition{ctx: ctx, tx: tx, now: now, done: map[string]int{}}
}

// stepsCompleted records that steps named name in run completed: their
// dependents' counters drop, and those that reach zero become ready.
func (t *transition) stepCompleted(runID, stageID, name string) error {
	t.done[stageID]++
	rows, err := t.tx.Query(t.ctx, `UPDATE step
		SET deps_left = deps_left - 1,
		    ready_at = CASE WHEN deps_left = 1 THEN greatest(ready_at, $3) ELSE ready_at END
		WHERE run_id = $1 AND status = 'pending' AND deps_left > 0 AND depends_on ? $2
		RETURNING deps_left`, runID, name, t.now)
	if err != nil {
		return fmt.Errorf("release dependents: %w", err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return fmt.Errorf("release dependents: %w", err)
	}
	for _, n := range left {
		if n == 0 {
			t.wake = true
		}
	}
	return nil
}

// stepsCompleted completes the running attempts given by ids and attempts
// (exit codes alongside), releases their dependents and counts them off
// their stages, all in one statement; attempts that are no longer running
// are left alone. applied is called with the id of each step it completed.
// Stages that ran out of steps are acted on by settle; the dependents that
// became ready are kept in t.ready, for the caller to claim (claimReady)
// or to announce.
//
// Rows other transactions may also be writing — dependents and stages —
// are locked in id order, so two workers' batches cannot deadlock.
func (t *transition) stepsCompleted(ids []string, attempts []int32, exits []*int32, applied func(id string)) error {
	rows, err := t.tx.Query(t.ctx, stepsCompletedSQL, ids, attempts, exits, t.now)
	if err != nil {
		return fmt.Errorf("complete steps: %w", err)
	}
	var done []string
	var ended []endedStage
	var kind string
	var e endedStage
	_, err = pgx.ForEachRow(rows, []any{&kind, &e.id, &e.runID, &e.name, &e.status, &e.final, &e.completedNow}, func() error {
		switch kind {
		case "step":
			done = append(done, e.id)
		case "ready":
			t.ready = append(t.ready, e.id)
		default:
			ended = append(ended, e)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("complete steps: %w", err)
	}
	for _, id := range done {
		applied(id)
	}
	t.ended = append(t.ended, ended...)
	return nil
}

// stepsCompletedSQL: a dependent's deps_left counts instances, so it drops
// by the number of completed steps it depends on. Dependents are pending
// and the completed steps running: the two updates touch different rows.
const stepsCompletedSQL = `
WITH done AS (
    UPDATE step s SET status = 'completed', error = NULL, exit_code = r.exit_code,
        completed_at = $4, duration_ms = $4 - coalesce(s.started_at, $4)
    FROM unnest($1::text[], $2::int[], $3::int[]) AS r(id, attempt, exit_code)
    WHERE s.id = r.id AND s.status = 'running' AND s.attempt = r.attempt
    RETURNING s.id, s.run_id, s.stage_id, s.name
), dependents AS MATERIALIZED (
    SELECT d.id, c.n FROM step d
    JOIN (SELECT d.id, count(*) AS n FROM done JOIN step d
              ON d.run_id = done.run_id AND d.status = 'pending' AND d.deps_left > 0 AND d.depends_on ? done.name
          GROUP BY d.id) c ON c.id = d.id
    ORDER BY d.id
    FOR NO KEY UPDATE OF d
), released AS (
    UPDATE step d SET deps_left = d.deps_left - c.n,
        ready_at = CASE WHEN d.deps_left = c.n THEN greatest(d.ready_at, $4) ELSE d.ready_at END
    FROM dependents c
    WHERE d.id = c.id AND d.status = 'pending'
    RETURNING d.id, d.deps_left
), stages AS MATERIALIZED (
    SELECT g.id, n.n FROM stage g
    JOIN (SELECT stage_id, count(*) AS n FROM done GROUP BY stage_id) n ON n.stage_id = g.id
    ORDER BY g.id
    FOR NO KEY UPDATE OF g
), counted AS (
    UPDATE stage g SET steps_left = g.steps_left - c.n,
        status = CASE WHEN g.steps_left = c.n AND g.status = 'running' THEN 'completed' ELSE g.status END,
        completed_at = CASE WHEN g.steps_left = c.n AND g.status = 'running' THEN $4 ELSE g.completed_at END
    FROM stages c
    WHERE g.id = c.id
    RETURNING g.id, g.run_id, g.name, g.status, g.final, g.steps_left, g.steps_left = 0 AND g.status = 'completed' AND g.completed_at = $4 AS completed_now
)
SELECT 'step', id, '', '', '', false, false FROM done
UNION ALL
SELECT 'ready', id, '', '', '', false, false FROM released WHERE deps_left = 0
UNION ALL
SELECT 'stage', id, run_id, name, status, final, completed_now FROM counted WHERE steps_left = 0`

// stepsFailed records that steps of run failed for good: their stages fail
// and cancel their pending steps, and every pending step that depends on a
// failed or cancelled step fails with reason dependency_failed, transitively
// and in any stage. stages maps each failed step's stage id to its count.
func (t *transition) stepsFailed(runID string, names []string, stages map[string]int) error {
	for id, n := range stages {
		t.done[id] += n
	}
	failedStages := keys(stages)
	for len(names) > 0 || len(failedStages) > 0 {
		var next []string
		if len(names) > 0 {
			// Dependents first, so they fail as dependency_failed rather
			// than being cancelled with the rest of their stage.
			rows, err := t.tx.Query(t.ctx, `UPDATE step
				SET status = 'failed', completed_at = $3,
				    error = jsonb_build_object('reason', 'dependency_failed', 'failed_step',
				        (SELECT d FROM jsonb_array_elements_text(depends_on) d WHERE d = ANY($2) LIMIT 1))
				WHERE run_id = $1 AND status = 'pending' AND depends_on ?| $2
				RETURNING name, stage_id`, runID, names, t.now)
			if err != nil {
				return fmt.Errorf("fail dependents: %w", err)
			}
			var name, stageID string
			touched := map[string]int{}
			if _, err := pgx.ForEachRow(rows, []any{&name, &stageID}, func() error {
				next = append(next, name)
				touched[stageID]++
				t.done[stageID]++
				return nil
			}); err != nil {
				return fmt.Errorf("fail dependents: %w", err)
			}
			failedStages = dedupe(append(failedStages, keys(touched)...))
		}
		if len(failedStages) > 0 {
			cancelled, err := t.failStages(failedStages)
			if err != nil {
				return err
			}
			next = append(next, cancelled...)
			failedStages = nil
		}
		names = dedupe(next)
	}
	return nil
}

// failStages marks running stages failed and cancels their pending steps,
// returning the names of the cancelled steps.
func (t *transition) failStages(ids []string) ([]string, error) {
	if _, err := t.tx.Exec(t.ctx, `UPDATE stage SET status = 'failed', completed_at = $2
		WHERE id = ANY($1) AND status = 'running'`, ids, t.now); err != nil {
		return nil, fmt.Errorf("fail stages: %w", err)
	}
	rows, err := t.tx.Query(t.ctx, `UPDATE step
		SET status = 'cancelled', completed_at = $2, error = '{"reason":"cancelled","detail":"its stage failed"}'
		WHERE stage_id = ANY($1) AND status = 'pending'
		RETURNING name, stage_id`, ids, t.now)
	if err != nil {
		return nil, fmt.Errorf("cancel pending steps: %w", err)
	}
	var names []string
	var name, stageID string
	_, err = pgx.ForEachRow(rows, []any{&name, &stageID}, func() error {
		names = append(names, name)
		t.done[stageID]++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cancel pending steps: %w", err)
	}
	return names, nil
}

// settle applies the stage counters and acts on every stage that ran out of
// steps in this transaction (see stageEnded), in the order of their runs'
// ids: acting on a stage locks its run, and a batch may end stages of
// several runs, so two batches taking their runs in stage order could each
// hold the run the other waits for. It sends the NOTIFY if anything became
// ready.
func (t *transition) settle() error {
	if err := t.settleStages(); err != nil {
		return err
	}
	return t.notify()
}

// settleStages is settle without the NOTIFY.
func (t *transition) settleStages() error {
	for _, id := range keys(t.done) {
		n := t.done[id]
		e := endedStage{id: id}
		var left int
		// One update: a second one of the same row in this transaction
		// would re-check its foreign key and share-lock the run row.
		err := t.tx.QueryRow(t.ctx, `UPDATE stage SET steps_left = steps_left - $2,
			    status = CASE WHEN steps_left = $2 AND status = 'running' THEN 'completed' ELSE status END,
			    completed_at = CASE WHEN steps_left = $2 AND status = 'running' THEN $3 ELSE completed_at END
			WHERE id = $1
			RETURNING run_id, name, status, final, steps_left, steps_left = 0 AND status = 'completed' AND completed_at = $3`,
			id, n, t.now).
			Scan(&e.runID, &e.name, &e.status, &e.final, &left, &e.completedNow)
		if err != nil {
			return fmt.Errorf("count stage steps: %w", err)
		}
		if left == 0 {
			t.ended = append(t.ended, e)
		}
	}
	t.done = map[string]int{}
	sort.Slice(t.ended, func(i, j int) bool {
		a, b := t.ended[i], t.ended[j]
		return a.runID < b.runID || a.runID == b.runID && a.id < b.id
	})
	for _, e := range t.ended {
		if err := t.stageEnded(e); err != nil {
			return err
		}
	}
	t.ended = nil
	return nil
}

// notify sends the transaction's one NOTIFY if anything became ready that
// no one has claimed yet.
func (t *transition) notify() error {
	if len(t.ready) > 0 || len(t.flows) > 0 {
		t.ready, t.flows, t.wake = nil, nil, true
	}
	if t.wake {
		t.wake, t.woke = false, true
		return notify(t.ctx, t.tx)
	}
	return nil
}

// claimFlows claims, for workerID, the calls of flow.sh of up to limit of
// the runs this transaction made ready for one (t.flows), as FlowCallClaim
// would; the rest are left for notify to announce.
func (t *transition) claimFlows(workerID string, limit int) ([]ClaimedFlowCall, error) {
	return claimAmong(t, &t.flows, limit, "claim ready flow calls", scanClaimedFlowCall,
		flowCallClaimReadySQL, workerID, limit, t.now, t.flows)
}

// claimReady claims, for the worker p names, up to limit of the steps that
// this transaction made ready (t.ready), as StepClaim would; the rest are
// left for notify to announce. The worker that completed a step thus starts
// its dependents without a NOTIFY, a wake-up or a claim of its own.
func (t *transition) claimReady(p StepClaimParams, limit int) ([]ClaimedStep, error) {
	return claimAmong(t, &t.ready, limit, "claim ready dependents", scanClaimedStep,
		stepClaimReadySQL, p.WorkerID, limit, t.now, p.DefaultTimeoutMs, max(p.MaxTimeoutMs, 0), t.ready)
}

// claimAmong runs a claim restricted to the ids in *among, and empties
// *among when it took all of them, so that notify does not announce them.
func claimAmong[T any](t *transition, among *[]string, limit int, what string, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	if limit <= 0 || len(*among) == 0 {
		return nil, nil
	}
	rows, err := t.tx.Query(t.ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	claimed, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(claimed) == len(*among) {
		*among = nil
	}
	return claimed, nil
}

// endedStage is a stage that has no step left to run.
type endedStage struct {
	id, runID, name string
	status          core.StageStatus
	final           bool
	completedNow    bool // it completed in this transaction
}

// stageEnded acts on a stage that ran out of steps: one that completed in
// this transaction either completes its run (final) or queues the next call
// of flow.sh; a failed stage queues its failure call.
func (t *transition) stageEnded(e endedStage) error {
	switch {
	case e.completedNow:
		if e.final {
			return t.runFinish(e.runID, core.RunCompleted, nil)
		}
		return t.flowCallQueue(e.runID, e.name, "")
	case e.status == core.StageFailed:
		return t.flowCallQueue(e.runID, "", e.name)
	}
	return nil
}

// lockRun takes the run's row lock. Every transaction that queues, claims or
// finishes a flow call takes it first, so they see each other's writes.
func (t *transition) lockRun(runID string) (core.RunStatus, error) {
	var status core.RunStatus
	// NO KEY UPDATE: inserting a stage, step or flow call of the run takes
	// FOR KEY SHARE on it (the foreign key), which must not wait for this.
	err := t.tx.QueryRow(t.ctx, `SELECT status FROM run WHERE id = $1 FOR NO KEY UPDATE`, runID).Scan(&status)
	if err != nil {
		return "", fmt.Errorf("lock run: %w", err)
	}
	return status, nil
}

// flowCallQueue queues a call of the run's flow.sh after a stage completed
// or failed, and marks the run ready for a flow call unless one is running.
// A failure call carries the run's last completed stage too (spec §10.2).
func (t *transition) flowCallQueue(runID, completedStage, failedStage string) error {
	status, err := t.lockRun(runID)
	if err != nil {
		return err
	}
	if status.Terminal() {
		return nil
	}
	if failedStage != "" {
		err := t.tx.QueryRow(t.ctx, `SELECT coalesce(
			(SELECT name FROM stage WHERE run_id = $1 AND status = 'completed' ORDER BY completed_at DESC, id DESC LIMIT 1), '')`,
			runID).Scan(&completedStage)
		if err != nil {
			return fmt.Errorf("last completed stage: %w", err)
		}
	}
	if _, err := t.tx.Exec(t.ctx, `INSERT INTO flow_call (id, run_id, completed_stage, failed_stage, status, created_at)
		VALUES ($1, $2, $3, NULLIF($4, ''), 'pending', $5)`, newID(), runID, completedStage, failedStage, t.now); err != nil {
		return fmt.Errorf("queue flow call: %w", err)
	}
	return t.flowReadyRefresh(runID)
}

// flowReadyRefresh sets run.flow_ready from the run's flow calls: true when
// one is pending and none is running. The caller holds the run's lock.
func (t *transition) flowReadyRefresh(runID string) error {
	rows, err := t.tx.Query(t.ctx, `UPDATE run SET
		    flow_ready = r.ready,
		    flow_ready_at = CASE WHEN r.ready THEN coalesce(run.flow_ready_at, $2) END
		FROM (SELECT EXISTS (SELECT 1 FROM flow_call WHERE run_id = $1 AND status = 'pending')
		         AND NOT EXISTS (SELECT 1 FROM flow_call WHERE run_id = $1 AND status = 'running') AS ready) r
		WHERE run.id = $1 AND run.flow_ready IS DISTINCT FROM r.ready
		RETURNING run.flow_ready`, runID, t.now)
	if err != nil {
		return fmt.Errorf("mark run ready for its flow: %w", err)
	}
	ready, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return fmt.Errorf("mark run ready for its flow: %w", err)
	}
	if len(ready) > 0 && ready[0] {
		t.flows = append(t.flows, runID)
	}
	return nil
}

// runFinish ends a run that is not yet terminal: it records the outcome,
// cancels its pending and running steps, its running stages and its pending
// flow calls, and clears its flow readiness. Workers running a cancelled
// step see it at their next heartbeat and stop the script; its late result
// is fenced off.
func (t *transition) runFinish(runID string, status core.RunStatus, runErr json.RawMessage) error {
	tag, err := t.tx.Exec(t.ctx, `UPDATE run SET status = $2, error = coalesce($3::jsonb, error),
		    completed_at = $4, duration_ms = $4 - coalesce(started_at, created_at),
		    flow_ready = false, flow_ready_at = NULL
		WHERE id = $1 AND status IN ('pending', 'running')`, runID, status, nullJSON(runErr), t.now)
	if err != nil {
		return fmt.Errorf("finish run: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	if _, err := t.tx.Exec(t.ctx, `WITH c AS (
		    UPDATE step SET status = 'cancelled', completed_at = $2,
		        error = jsonb_build_object('reason', 'cancelled', 'detail', 'run ' || $3::text)
		    WHERE run_id = $1 AND status IN ('pending', 'running')
		    RETURNING stage_id
		)
		UPDATE stage SET steps_left = steps_left - n.n
		FROM (SELECT stage_id, count(*) AS n FROM c GROUP BY stage_id) n
		WHERE stage.id = n.stage_id`, runID, t.now, string(status)); err != nil {
		return fmt.Errorf("cancel pending steps: %w", err)
	}
	if _, err := t.tx.Exec(t.ctx, `UPDATE stage SET status = 'cancelled', completed_at = $2
		WHERE run_id = $1 AND status = 'running'`, runID, t.now); err != nil {
		return fmt.Errorf("cancel running stages: %w", err)
	}
	if _, err := t.tx.Exec(t.ctx, `UPDATE flow_call SET status = 'cancelled', completed_at = $2
		WHERE run_id = $1 AND status = 'pending'`, runID, t.now); err != nil {
		return fmt.Errorf("cancel pending flow calls: %w", err)
	}
	return nil
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
