package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/dag"
)

// StepSpec is one step of a stage as the flow asked for it.
type StepSpec struct {
	Name       string
	DependsOn  []string
	Instances  int
	MaxRetries int
	Env        map[string]string
	// TimeoutMs is the step's timeout (MAXQ_STEP_TIMEOUT in its env); 0
	// leaves it to the worker's default.
	TimeoutMs int64
}

// StageScheduleParams is a stage to add to a run.
type StageScheduleParams struct {
	RunID string
	Stage string
	Final bool
	Steps []StepSpec
}

// StageSchedule adds a stage and one step row per instance to a run, in one
// transaction. Scheduling a stage again with the same definition — a flow.sh
// that runs again after its worker was lost — changes nothing and returns
// the stage as it is (replayed); the same name with another definition is
// ErrConflict. dependsOn must name steps of this stage or of the run's
// earlier stages (ErrInvalid otherwise, or when the stage's steps form a
// cycle); a stage or step name the run already has is ErrConflict, as is a
// run that has ended. A step whose dependency already failed fails at once
// with reason dependency_failed, and its stage with it.
func (s *Store) StageSchedule(ctx context.Context, p StageScheduleParams) (stage core.Stage, steps []core.Step, replayed bool, err error) {
	if !validID(p.RunID) {
		return core.Stage{}, nil, false, fmt.Errorf("run %q: %w", p.RunID, core.ErrNotFound)
	}
	deps := make(map[string][]string, len(p.Steps))
	instances := make(map[string]int, len(p.Steps))
	lookup := []string{}
	for _, st := range p.Steps {
		deps[st.Name] = st.DependsOn
		instances[st.Name] = st.Instances
		lookup = append(lookup, st.Name)
		lookup = append(lookup, st.DependsOn...)
	}
	if cycle := dag.Cycle(deps); cycle != "" {
		return core.Stage{}, nil, false, core.Invalid("steps", "dependsOn forms a cycle: "+cycle)
	}

	err = s.inTx(ctx, func(tx pgx.Tx) error {
		stage, steps, replayed = core.Stage{}, nil, false
		now := s.nowMillis()
		// Lock the existing steps first, then the run: the order in which
		// completions take them, so the two never deadlock. A completion
		// that got there first is seen; one that comes later sees our rows.
		rows, err := tx.Query(ctx, `SELECT name, status FROM step WHERE run_id = $1 AND name = ANY($2) FOR SHARE`, p.RunID, dedupe(lookup))
		if err != nil {
			return err
		}
		type counts struct{ open, failed int }
		existing := map[string]*counts{}
		var name string
		var status core.StepStatus
		if _, err := pgx.ForEachRow(rows, []any{&name, &status}, func() error {
			c := existing[name]
			if c == nil {
				c = &counts{}
				existing[name] = c
			}
			switch status {
			case core.StepFailed, core.StepCancelled:
				c.failed++
			case core.StepPending, core.StepRunning:
				c.open++
			}
			return nil
		}); err != nil {
			return err
		}
		var runStatus core.RunStatus
		if err := tx.QueryRow(ctx, `SELECT status FROM run WHERE id = $1 FOR SHARE`, p.RunID).Scan(&runStatus); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("run %s: %w", p.RunID, core.ErrNotFound)
			}
			return err
		}
		var existingID string
		err = tx.QueryRow(ctx, `SELECT id FROM stage WHERE run_id = $1 AND name = $2`, p.RunID, p.Stage).Scan(&existingID)
		switch {
		case err == nil:
			stage, steps, err = stageLoad(ctx, tx, existingID)
			if err != nil {
				return err
			}
			if !sameDefinition(stage, steps, p) {
				return fmt.Errorf("%w: stage %q already scheduled in this run, with another definition", core.ErrConflict, p.Stage)
			}
			replayed = true
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if runStatus.Terminal() {
			return fmt.Errorf("%w: run %s is %s", core.ErrConflict, p.RunID, runStatus)
		}
		var taken []string
		known := map[string]bool{}
		for n := range existing {
			known[n] = true
			if _, ok := deps[n]; ok {
				taken = append(taken, n)
			}
		}
		if len(taken) > 0 {
			return fmt.Errorf("%w: step %s already scheduled in this run", core.ErrConflict, strings.Join(dedupe(taken), ", "))
		}
		if unknown := dag.Unknown(deps, known); len(unknown) > 0 {
			return core.Invalid("steps", "dependsOn names no step of this stage or of an earlier stage: "+strings.Join(unknown, ", "))
		}

		stage = core.Stage{ID: newID(), RunID: p.RunID, Name: p.Stage, Status: core.StageRunning, Final: p.Final, CreatedAt: now}
		total := 0
		for _, st := range p.Steps {
			total += st.Instances
		}
		if _, err := tx.Exec(ctx, `INSERT INTO stage (id, run_id, name, final, status, created_at, steps_left)
			VALUES ($1, $2, $3, $4, 'running', $5, $6)`, stage.ID, p.RunID, p.Stage, p.Final, now, total); err != nil {
			if errors.Is(interpretError(err), core.ErrConflict) {
				return fmt.Errorf("%w: stage %q already scheduled in this run", core.ErrConflict, p.Stage)
			}
			return err
		}

		var ids, names, envs, dependsOn []string
		var seqs, insts, retries, depsLeft []int
		var timeouts []*int64
		var failedDeps []string
		ready := false
		for _, st := range p.Steps {
			left := 0
			for _, d := range st.DependsOn {
				if n, ok := instances[d]; ok {
					left += n
				} else if c := existing[d]; c != nil {
					left += c.open
					if c.failed > 0 {
						failedDeps = append(failedDeps, d)
					}
				}
			}
			ready = ready || left == 0
			env, err := jsonText(st.Env)
			if err != nil {
				return err
			}
			dep, err := jsonText(st.DependsOn)
			if err != nil {
				return err
			}
			var timeout *int64
			if st.TimeoutMs > 0 {
				timeout = &st.TimeoutMs
			}
			for seq := 0; seq < st.Instances; seq++ {
				id := newID()
				ids, names, envs, dependsOn = append(ids, id), append(names, st.Name), append(envs, env), append(dependsOn, dep)
				seqs, insts, retries, depsLeft = append(seqs, seq), append(insts, st.Instances), append(retries, st.MaxRetries), append(depsLeft, left)
				timeouts = append(timeouts, timeout)
				steps = append(steps, core.Step{ID: id, RunID: p.RunID, Stage: p.Stage, Name: st.Name, Sequence: seq,
					Status: core.StepPending, DependsOn: st.DependsOn, MaxRetries: st.MaxRetries, Env: st.Env,
					CreatedAt: now, Instances: st.Instances})
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO step (id, run_id, stage_id, name, sequence, status, depends_on,
			    max_retries, env, created_at, instances, deps_left, ready_at, timeout_ms)
			SELECT u.id, $1, $2, u.name, u.seq, 'pending', u.dep::jsonb, u.retries, u.env::jsonb, $3, u.inst, u.deps_left, $3, u.timeout
			FROM unnest($4::text[], $5::text[], $6::int[], $7::text[], $8::int[], $9::text[], $10::int[], $11::int[], $12::bigint[])
			    AS u(id, name, seq, dep, retries, env, inst, deps_left, timeout)`,
			p.RunID, stage.ID, now, ids, names, seqs, dependsOn, retries, envs, insts, depsLeft, timeouts); err != nil {
			return err
		}

		t := newTransition(ctx, tx, now)
		t.wake = ready
		if len(failedDeps) > 0 {
			if err := t.stepsFailed(p.RunID, dedupe(failedDeps), nil); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `SELECT status FROM stage WHERE id = $1`, stage.ID).Scan(&stage.Status); err != nil {
				return err
			}
			if err := refreshStatuses(ctx, tx, steps); err != nil {
				return err
			}
		}
		return t.settle()
	})
	if err != nil {
		return core.Stage{}, nil, false, fmt.Errorf("schedule stage %q: %w", p.Stage, err)
	}
	return stage, steps, replayed, nil
}

// stageLoad reads a stage and its steps.
func stageLoad(ctx context.Context, tx pgx.Tx, id string) (core.Stage, []core.Step, error) {
	var g core.Stage
	if err := tx.QueryRow(ctx, `SELECT id, run_id, name, status, final, created_at, completed_at FROM stage WHERE id = $1`, id).
		Scan(&g.ID, &g.RunID, &g.Name, &g.Status, &g.Final, &g.CreatedAt, &g.CompletedAt); err != nil {
		return core.Stage{}, nil, err
	}
	rows, err := tx.Query(ctx, `SELECT `+stepColumns+stepFrom+` WHERE s.stage_id = $1 ORDER BY s.created_at, s.id`, id)
	if err != nil {
		return core.Stage{}, nil, err
	}
	steps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (core.Step, error) {
		var st core.Step
		err := row.Scan(stepScanTargets(&st)...)
		return st, err
	})
	return g, steps, err
}

// sameDefinition reports whether a stage as stored is what p asks for.
func sameDefinition(g core.Stage, steps []core.Step, p StageScheduleParams) bool {
	if g.Final != p.Final {
		return false
	}
	want := map[string]StepSpec{}
	total := 0
	for _, sp := range p.Steps {
		want[sp.Name] = sp
		total += sp.Instances
	}
	if len(steps) != total {
		return false
	}
	for _, st := range steps {
		sp, ok := want[st.Name]
		if !ok || st.Instances != sp.Instances || st.MaxRetries != sp.MaxRetries ||
			!slices.Equal(st.DependsOn, sp.DependsOn) || !maps.Equal(st.Env, sp.Env) && len(st.Env)+len(sp.Env) > 0 {
			return false
		}
	}
	return true
}

// refreshStatuses reads back the statuses of steps a transaction changed.
func refreshStatuses(ctx context.Context, tx pgx.Tx, steps []core.Step) error {
	ids := make([]string, len(steps))
	for i, st := range steps {
		ids[i] = st.ID
	}
	rows, err := tx.Query(ctx, `SELECT id, status FROM step WHERE id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	status := map[string]core.StepStatus{}
	var id string
	var st core.StepStatus
	if _, err := pgx.ForEachRow(rows, []any{&id, &st}, func() error { status[id] = st; return nil }); err != nil {
		return err
	}
	for i := range steps {
		steps[i].Status = status[steps[i].ID]
	}
	return nil
}
