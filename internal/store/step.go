package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/maxq-dev/maxq/internal/core"
)

const stepColumns = `s.id, s.run_id, g.name, s.name, s.sequence, s.status, s.depends_on, s.retry_count, s.max_retries,
	s.env, s.output, s.error, s.created_at, s.started_at, s.completed_at, s.duration_ms, s.instances, s.attempt, s.exit_code`

const stepFrom = ` FROM step s JOIN stage g ON g.id = s.stage_id`

func stepScanTargets(st *core.Step) []any {
	return []any{&st.ID, &st.RunID, &st.Stage, &st.Name, &st.Sequence, &st.Status, &st.DependsOn, &st.RetryCount,
		&st.MaxRetries, &st.Env, &st.Output, &st.Error, &st.CreatedAt, &st.StartedAt, &st.CompletedAt, &st.DurationMs,
		&st.Instances, &st.Attempt, &st.ExitCode}
}

// StepGet returns one step.
func (s *Store) StepGet(ctx context.Context, id string) (core.Step, error) {
	if !validID(id) {
		return core.Step{}, fmt.Errorf("step %q: %w", id, core.ErrNotFound)
	}
	var st core.Step
	if err := s.pool.QueryRow(ctx, `SELECT `+stepColumns+stepFrom+` WHERE s.id = $1`, id).Scan(stepScanTargets(&st)...); err != nil {
		return core.Step{}, fmt.Errorf("step %s: %w", id, interpretError(err))
	}
	return st, nil
}

// StepListParams filters and pages a run's steps.
type StepListParams struct {
	RunID    string
	Stage    string
	Status   core.StepStatus
	Name     string
	Sequence *int
	Page
}

var stepSortColumns = map[string]string{
	"":            "s.created_at",
	"createdAt":   "s.created_at",
	"startedAt":   "s.started_at",
	"completedAt": "s.completed_at",
	"name":        "s.name",
	"sequence":    "s.sequence",
	"status":      "s.status",
	"stage":       "g.name",
}

// StepSortFields are the sortBy values the step list accepts.
func StepSortFields() []string { return sortFields(stepSortColumns) }

// StepList returns a page of a run's steps and how many match in all; a run
// that does not exist is ErrNotFound.
func (s *Store) StepList(ctx context.Context, p StepListParams) ([]core.Step, int, error) {
	if err := s.runExists(ctx, p.RunID); err != nil {
		return nil, 0, err
	}
	seq := 0
	if p.Sequence != nil {
		seq = *p.Sequence
	}
	where, args := filters{}.
		add("s.run_id = $%d", p.RunID, true).
		add("g.name = $%d", p.Stage, p.Stage != "").
		add("s.status = $%d", string(p.Status), p.Status != "").
		add("s.name = $%d", p.Name, p.Name != "").
		add("s.sequence = $%d", seq, p.Sequence != nil).
		build()
	return listPage(ctx, s, listQuery{what: "list steps", columns: stepColumns, from: stepFrom + where,
		orderBy: p.orderBy(stepSortColumns), args: args}, p.Page,
		func(row pgx.CollectableRow, total *int) (core.Step, error) {
			var st core.Step
			err := row.Scan(append(stepScanTargets(&st), total)...)
			return st, err
		})
}

func (s *Store) runExists(ctx context.Context, runID string) error {
	if !validID(runID) {
		return fmt.Errorf("run %q: %w", runID, core.ErrNotFound)
	}
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run WHERE id = $1)`, runID).Scan(&ok); err != nil {
		return fmt.Errorf("find run: %w", interpretError(err))
	}
	if !ok {
		return fmt.Errorf("run %s: %w", runID, core.ErrNotFound)
	}
	return nil
}

// StepFinishParams is the outcome of one attempt of a step.
type StepFinishParams struct {
	StepID string
	// Attempt fences the result: when non-zero, it is applied only if the
	// step is still running that attempt. A result of a superseded attempt
	// is dropped. Zero applies to a pending or running step whatever its
	// attempt (a report through the API).
	Attempt   int
	Completed bool
	Output    json.RawMessage // on success; nil keeps what the step reported
	Error     json.RawMessage // on failure: an object with a "reason"
	ExitCode  *int
	// Retry lets a failure go back to pending when retries remain.
	Retry bool
	// NoReadBack skips reading the step back (a worker has no use for it).
	NoReadBack bool
}

// StepFinish applies the outcome of a step attempt and everything that
// follows from it, in one transaction: on success, dependents released and
// the stage settled; on a failure with retries left, the step back to
// pending after a backoff, its attempt's artifacts discarded; on a final
// failure, dependents failed, the stage failed and its pending steps
// cancelled. applied is false when the result was fenced off.
func (s *Store) StepFinish(ctx context.Context, p StepFinishParams) (st core.Step, applied bool, err error) {
	if !validID(p.StepID) {
		return core.Step{}, false, fmt.Errorf("step %q: %w", p.StepID, core.ErrNotFound)
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		t := newTransition(ctx, tx, s.nowMillis())
		var err error
		if applied, err = t.stepFinish(p); err != nil {
			return err
		}
		// settle takes the stage's row lock; nothing else comes after it
		// but the commit, so completions of one stage queue briefly.
		return t.settle()
	})
	if err == nil && !p.NoReadBack {
		st, err = s.StepGet(ctx, p.StepID)
	}
	if err != nil {
		return core.Step{}, false, fmt.Errorf("finish step %s: %w", p.StepID, err)
	}
	return st, applied, nil
}

// StepsClaim lets StepsFinish claim, for the worker recording the batch,
// the dependents that the batch's completions make ready.
type StepsClaim struct {
	StepClaimParams // Limit is not used: Slots says how many
	// Slots is asked, once the transaction knows that n dependents became
	// ready, how many of them the worker can take now (it may reserve its
	// slots for them, and must release what it reserved once StepsFinish
	// returns: a transaction that is retried asks again). Nil takes none.
	Slots func(n int) int
	// FlowSlots does the same for the runs whose next call of flow.sh the
	// batch made ready (a stage of theirs ended).
	FlowSlots func(n int) int
}

// StepsFinished is what StepsFinish did.
type StepsFinished struct {
	// Applied[i] is false when outcome i was fenced off.
	Applied []bool
	// Claimed are the dependents claimed for the worker (see StepsClaim).
	Claimed []ClaimedStep
	// Calls are the calls of flow.sh claimed for the worker.
	Calls []ClaimedFlowCall
	// Woke reports that the batch made work ready that it did not claim,
	// and sent a NOTIFY for it.
	Woke bool
}

// StepsFinish records the outcomes of many step attempts, all fenced by
// their attempt, in one transaction: a worker's completions are gathered
// while the previous batch commits, so under load each stage row is
// updated once per batch rather than once per step. Completions are
// applied by one statement that also releases their dependents; other
// outcomes go through the same transition as StepFinish. The dependents
// that became ready are claimed for the worker in the same transaction,
// as many as claim.Slots allows, and so are the calls of flow.sh of runs
// whose stage ended, as many as claim.FlowSlots allows: they start with no
// NOTIFY, wake-up or claim in between; only what is left is announced.
func (s *Store) StepsFinish(ctx context.Context, outcomes []StepFinishParams, claim StepsClaim) (StepsFinished, error) {
	var ids []string
	var attempts []int32
	var exits []*int32
	at := map[string]int{} // step id → index of its completion in outcomes
	for i, p := range outcomes {
		if p.Attempt == 0 || !validID(p.StepID) {
			return StepsFinished{}, fmt.Errorf("finish steps: outcome %d: %w: an attempt and a valid step id are required", i, core.ErrInvalid)
		}
		if p.Completed && p.Output == nil {
			at[p.StepID] = i
			ids = append(ids, p.StepID)
			attempts = append(attempts, int32(p.Attempt))
			var exit *int32
			if p.ExitCode != nil {
				e := int32(*p.ExitCode)
				exit = &e
			}
			exits = append(exits, exit)
		}
	}
	var out StepsFinished
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = StepsFinished{Applied: make([]bool, len(outcomes))}
		t := newTransition(ctx, tx, s.nowMillis())
		if len(ids) > 0 {
			if err := t.stepsCompleted(ids, attempts, exits, func(id string) { out.Applied[at[id]] = true }); err != nil {
				return err
			}
		}
		for i, p := range outcomes {
			if _, ok := at[p.StepID]; ok && p.Completed && p.Output == nil {
				continue
			}
			var err error
			if out.Applied[i], err = t.stepFinish(p); err != nil {
				return err
			}
		}
		// Stages first: a stage that failed in this batch cancels its
		// pending steps, and those are not to be claimed.
		if err := t.settleStages(); err != nil {
			return err
		}
		if len(t.ready) > 0 && claim.Slots != nil {
			var err error
			if out.Claimed, err = t.claimReady(claim.StepClaimParams, claim.Slots(len(t.ready))); err != nil {
				return err
			}
		}
		if len(t.flows) > 0 && claim.FlowSlots != nil {
			var err error
			if out.Calls, err = t.claimFlows(claim.WorkerID, claim.FlowSlots(len(t.flows))); err != nil {
				return err
			}
		}
		err := t.notify()
		out.Woke = t.woke
		return err
	})
	if err != nil {
		return StepsFinished{}, fmt.Errorf("finish %d steps: %w", len(outcomes), err)
	}
	return out, nil
}

// stepFinish applies one attempt's outcome within the transition; see
// StepFinish. The caller settles.
func (t *transition) stepFinish(p StepFinishParams) (bool, error) {
	ctx, tx, now := t.ctx, t.tx, t.now
	var stageID string
	var attempt, retryCount, maxRetries int
	var status core.StepStatus
	var runID, name string
	err := tx.QueryRow(ctx, `SELECT run_id, stage_id, name, status, attempt, retry_count, max_retries
		FROM step WHERE id = $1 FOR UPDATE`, p.StepID).Scan(&runID, &stageID, &name, &status, &attempt, &retryCount, &maxRetries)
	if err != nil {
		return false, err
	}
	if status.Terminal() {
		if p.Attempt != 0 {
			return false, nil
		}
		return false, fmt.Errorf("%w: step is %s", core.ErrConflict, status)
	}
	if p.Attempt != 0 && (status != core.StepRunning || attempt != p.Attempt) {
		return false, nil
	}
	switch {
	case p.Completed:
		if _, err := tx.Exec(ctx, `UPDATE step SET status = 'completed', output = coalesce($2::jsonb, output),
			    error = NULL, exit_code = $3, completed_at = $4, duration_ms = $4 - coalesce(started_at, $4)
			WHERE id = $1`, p.StepID, nullJSON(p.Output), p.ExitCode, now); err != nil {
			return false, err
		}
		if err := t.stepCompleted(runID, stageID, name); err != nil {
			return false, err
		}
	case p.Retry && retryCount < maxRetries:
		readyAt := now + core.Backoff(retryCount+1).Milliseconds()
		if _, err := tx.Exec(ctx, `UPDATE step SET status = 'pending', retry_count = retry_count + 1, ready_at = $2,
			    error = $3, exit_code = $4, worker_id = NULL, deadline_at = NULL
			WHERE id = $1`, p.StepID, readyAt, nullJSON(p.Error), p.ExitCode); err != nil {
			return false, err
		}
		// The failed attempt's artifacts go with it, so the retry can
		// store them again.
		if _, err := tx.Exec(ctx, `DELETE FROM artifact WHERE step_id = $1`, p.StepID); err != nil {
			return false, err
		}
	default:
		if _, err := tx.Exec(ctx, `UPDATE step SET status = 'failed', error = $2, exit_code = $3,
			    completed_at = $4, duration_ms = $4 - coalesce(started_at, $4)
			WHERE id = $1`, p.StepID, nullJSON(p.Error), p.ExitCode, now); err != nil {
			return false, err
		}
		if err := t.stepsFailed(runID, []string{name}, map[string]int{stageID: 1}); err != nil {
			return false, err
		}
	}
	return true, nil
}

// StepRelease hands a running attempt back as pending without spending a
// retry — a worker shutting down gracefully. Its artifacts are discarded
// and the step is ready at once. It is a no-op if the attempt is no longer
// the step's.
func (s *Store) StepRelease(ctx context.Context, stepID string, attempt int) (bool, error) {
	var released bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE step SET status = 'pending', worker_id = NULL, deadline_at = NULL, ready_at = $3
			WHERE id = $1 AND attempt = $2 AND status = 'running'`, stepID, attempt, s.nowMillis())
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		released = true
		if _, err := tx.Exec(ctx, `DELETE FROM artifact WHERE step_id = $1`, stepID); err != nil {
			return err
		}
		return notify(ctx, tx)
	})
	if err != nil {
		return false, fmt.Errorf("release step: %w", err)
	}
	return released, nil
}

// StepSetOutput records output a step reported while it is not finished;
// with attempt set, only while it runs that attempt.
func (s *Store) StepSetOutput(ctx context.Context, id string, output json.RawMessage, attempt int) (core.Step, error) {
	if !validID(id) {
		return core.Step{}, fmt.Errorf("step %q: %w", id, core.ErrNotFound)
	}
	var st core.Step
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var status core.StepStatus
		var current int
		if err := tx.QueryRow(ctx, `SELECT status, attempt FROM step WHERE id = $1 FOR UPDATE`, id).Scan(&status, &current); err != nil {
			return err
		}
		if status.Terminal() {
			return fmt.Errorf("%w: step is %s; its output can no longer change", core.ErrConflict, status)
		}
		if attempt != 0 && (status != core.StepRunning || current != attempt) {
			return fmt.Errorf("%w: attempt %d of step %s is no longer current", core.ErrConflict, attempt, id)
		}
		if _, err := tx.Exec(ctx, `UPDATE step SET output = $2 WHERE id = $1`, id, nullJSON(output)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT `+stepColumns+stepFrom+` WHERE s.id = $1`, id).Scan(stepScanTargets(&st)...)
	})
	if err != nil {
		return core.Step{}, fmt.Errorf("set output of step %s: %w", id, err)
	}
	return st, nil
}
