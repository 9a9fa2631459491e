package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/script"
	"github.com/maxq-dev/maxq/internal/store"
)

// The finisher reserves only slots that are free and not reserved already,
// and a stopping worker reserves none: a claim made with a result can never
// take the worker past MaxSteps or MaxFlows.
func TestReserveTakesOnlyFreeSlots(t *testing.T) {
	t.Parallel()
	w := New(Config{MaxSteps: 3, MaxFlows: 1})
	w.steps["running"] = &running{stop: func() {}}

	steps, calls := w.reserve(5, 5)
	require.Equal(t, 2, steps, "3 slots, 1 running")
	require.Equal(t, 1, calls)
	steps, calls = w.reserve(5, 5)
	require.Zero(t, steps, "the rest is reserved")
	require.Zero(t, calls)

	w.unreserve(2, 1)
	steps, _ = w.reserve(1, 0)
	require.Equal(t, 1, steps, "asked for one")
	w.unreserve(1, 0)

	w.stopping = true
	steps, calls = w.reserve(5, 5)
	require.Zero(t, steps, "a stopping worker starts nothing more")
	require.Zero(t, calls)
}

// The claim loop holds the free slots while its claim runs, so a batch of
// results recorded meanwhile cannot claim into the same slots: the two
// claims together never take the worker past MaxSteps.
func TestFillReservesSlotsWhileClaiming(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)
	w := New(Config{Store: st, MaxSteps: 3, MaxFlows: 1})
	id, err := st.WorkerRegister(ctx, "test")
	require.NoError(t, err)
	w.id = id

	// Hold the claim inside the database: it waits for the step table.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `LOCK TABLE step IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	filled := make(chan struct{})
	go func() {
		defer close(filled)
		w.fill(ctx, ctx)
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 5*time.Millisecond, "the claim never waited for the lock")

	steps, calls := w.reserve(3, 1)
	require.Zero(t, steps, "the claim in flight holds every free step slot")
	require.Zero(t, calls, "and the flow call slot")

	require.NoError(t, tx.Rollback(ctx))
	<-filled
	steps, calls = w.reserve(3, 1)
	require.Equal(t, 3, steps, "a claim that found nothing gives its slots back")
	require.Equal(t, 1, calls)
}

// batchBundle is a worker with a real store whose finisher records
// batches when the test says (record), and notes what they start.
type batchBundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	st    *store.Store
	w     *Worker
	mu    sync.Mutex
	steps []store.ClaimedStep
	calls []store.ClaimedFlowCall
}

func newBatchBundle(t *testing.T, maxSteps, maxFlows int) *batchBundle {
	t.Helper()
	b := &batchBundle{ctx: context.Background(), pool: pgtest.Pool(t)}
	b.st = store.New(b.pool)
	b.w = New(Config{Store: b.st, MaxSteps: maxSteps, MaxFlows: maxFlows})
	id, err := b.st.WorkerRegister(b.ctx, "test")
	require.NoError(t, err)
	b.w.id = id
	b.w.logs = newLogBatcher(b.st, b.w.logger)
	t.Cleanup(b.w.logs.close)
	// What the batch claims takes its slot, as startStep and startFlowCall
	// do, and is noted.
	b.w.finish = newFinisher(b.w, func(c store.ClaimedStep) {
		b.started(b.w.steps, c.ID, func() { b.steps = append(b.steps, c) })
	}, func(c store.ClaimedFlowCall) {
		b.started(b.w.calls, c.ID, func() { b.calls = append(b.calls, c) })
	})
	return b
}

func (b *batchBundle) started(slots map[string]*running, id string, note func()) {
	b.w.mu.Lock()
	slots[id] = &running{stop: func() {}}
	b.w.mu.Unlock()
	b.mu.Lock()
	note()
	b.mu.Unlock()
}

// run creates a run whose first call of flow.sh schedules one stage of
// steps, and claims its first ready step for the worker, as running.
func (b *batchBundle) run(t *testing.T, final bool, steps ...store.StepSpec) (string, store.ClaimedStep) {
	t.Helper()
	run, _, err := b.st.RunCreate(b.ctx, store.RunCreateParams{FlowName: "flow"})
	require.NoError(t, err)
	calls, err := b.st.FlowCallClaim(b.ctx, b.w.id, 1)
	require.NoError(t, err)
	require.Len(t, calls, 1)
	_, _, _, err = b.st.StageSchedule(b.ctx, store.StageScheduleParams{RunID: run.ID, Stage: "only", Final: final, Steps: steps})
	require.NoError(t, err)
	applied, err := b.st.FlowCallFinish(b.ctx, store.FlowCallFinishParams{CallID: calls[0].ID, Attempt: calls[0].Attempt})
	require.NoError(t, err)
	require.True(t, applied)
	claimed, err := b.st.StepClaim(b.ctx, store.StepClaimParams{WorkerID: b.w.id, Limit: 1})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	b.w.steps[claimed[0].ID] = &running{stop: func() {}}
	b.w.wg.Add(1)
	return run.ID, claimed[0]
}

// end ends the step's script with exit code 0: its outcome is queued.
func (b *batchBundle) end(c store.ClaimedStep) {
	b.w.stepEnded(b.ctx, &stepAttempt{id: c.ID, runID: c.RunID, name: c.Name, sequence: c.Sequence, attempt: c.Attempt, stop: func() {}},
		script.Result{ExitCode: 0})
}

// record records what is queued, as the finisher's loop would.
func (b *batchBundle) record() {
	f := b.w.finish
	f.mu.Lock()
	batch := f.queue
	f.queue = nil
	f.mu.Unlock()
	f.record(b.ctx, batch)
}

// A step that ends passes its slot to the batch that records its result,
// so a claim of the loop that runs meanwhile cannot take it: the batch
// claims the step's dependent into it, in the transaction that records the
// result, even when the worker has no other free slot.
func TestBatchClaimsDependentIntoItsStepsSlot(t *testing.T) {
	t.Parallel()
	b := newBatchBundle(t, 1, 1)
	_, a := b.run(t, true, store.StepSpec{Name: "a", Instances: 1}, store.StepSpec{Name: "b", Instances: 1, DependsOn: []string{"a"}})

	b.end(a)
	// The loop wakes now (a NOTIFY, its poll) and claims: a's slot is not
	// free, but held for a's batch.
	steps, _ := b.w.reserve(1, 0)
	require.Zero(t, steps, "the ended step's slot is held for its batch")

	b.record()
	require.Len(t, b.steps, 1, "b claimed with a's result")
	require.Equal(t, "b", b.steps[0].Name)
	dep, err := b.st.StepGet(b.ctx, b.steps[0].ID)
	require.NoError(t, err)
	done, err := b.st.StepGet(b.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, *done.CompletedAt, *dep.StartedAt, "in the transaction that recorded a")

	steps, _ = b.w.reserve(1, 0)
	require.Zero(t, steps, "b runs in the one slot; the batch gave back what it held")
	require.Equal(t, 0, b.w.reserved.steps)
	b.w.wg.Wait()
}

// A batch of results does not begin while a claim of the loop is in
// flight, which holds the free flow call slot: it waits for the claim, then
// claims the call of flow.sh that its stage's completion queued, in the
// transaction that records the result.
func TestBatchWaitsForTheLoopsClaim(t *testing.T) {
	t.Parallel()
	b := newBatchBundle(t, 2, 1)
	runID, a := b.run(t, false, store.StepSpec{Name: "a", Instances: 1})
	b.end(a)

	// Hold the loop's claim inside the database: it waits for the step
	// table, holding the free step slot and the flow call slot.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `LOCK TABLE step IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	waiting := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		return n
	}
	filled := make(chan struct{})
	go func() { defer close(filled); b.w.fill(b.ctx, b.ctx) }()
	require.Eventually(t, func() bool { return waiting() == 1 }, 10*time.Second, 5*time.Millisecond, "the claim never waited for the lock")

	recorded := make(chan struct{})
	go func() { defer close(recorded); b.record() }()
	require.Never(t, func() bool { return waiting() > 1 }, 300*time.Millisecond, 10*time.Millisecond,
		"the batch began while the loop's claim was in flight")

	require.NoError(t, tx.Rollback(b.ctx))
	<-filled
	<-recorded
	require.Len(t, b.calls, 1, "the flow call claimed with the result")
	require.Equal(t, "only", b.calls[0].CompletedStage)
	var claimedAt, completedAt int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT f.started_at, g.completed_at FROM flow_call f JOIN stage g ON g.run_id = f.run_id
		WHERE f.run_id = $1 AND f.completed_stage = 'only'`, runID).Scan(&claimedAt, &completedAt))
	require.Equal(t, completedAt, claimedAt, "in the transaction that completed the stage")
	b.w.wg.Wait()
}
