package worker

import (
	"context"
	"testing"
	"time"

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

// A step that ends passes its slot to the batch that records its result,
// so a claim of the loop that runs meanwhile cannot take it: the batch
// claims the step's dependent into it, in the transaction that records the
// result, even when the worker has no other free slot.
func TestBatchClaimsDependentIntoItsStepsSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(pgtest.Pool(t))
	w := New(Config{Store: st, MaxSteps: 1, MaxFlows: 1})
	id, err := st.WorkerRegister(ctx, "test")
	require.NoError(t, err)
	w.id = id
	w.logs = newLogBatcher(st, w.logger)
	defer w.logs.close()
	var started []store.ClaimedStep
	w.finish = newFinisher(w, func(c store.ClaimedStep) {
		started = append(started, c)
		w.mu.Lock()
		w.steps[c.ID] = &running{stop: func() {}}
		w.mu.Unlock()
	}, func(store.ClaimedFlowCall) {})

	run, _, err := st.RunCreate(ctx, store.RunCreateParams{FlowName: "flow"})
	require.NoError(t, err)
	_, _, _, err = st.StageSchedule(ctx, store.StageScheduleParams{RunID: run.ID, Stage: "only", Final: true, Steps: []store.StepSpec{
		{Name: "a", Instances: 1}, {Name: "b", Instances: 1, DependsOn: []string{"a"}}}})
	require.NoError(t, err)
	claimed, err := st.StepClaim(ctx, store.StepClaimParams{WorkerID: id, Limit: 1})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	a := claimed[0]
	w.steps[a.ID] = &running{stop: func() {}}
	w.wg.Add(1)

	w.stepEnded(ctx, &stepAttempt{id: a.ID, runID: a.RunID, name: a.Name, sequence: a.Sequence, attempt: a.Attempt, stop: func() {}},
		script.Result{ExitCode: 0})
	// The loop wakes now (a NOTIFY, its poll) and claims: a's slot is not
	// free, but held for a's batch.
	steps, _ := w.reserve(1, 0)
	require.Zero(t, steps, "the ended step's slot is held for its batch")

	w.finish.record(ctx, w.finish.queue)
	require.Len(t, started, 1, "b claimed with a's result")
	require.Equal(t, "b", started[0].Name)
	b, err := st.StepGet(ctx, started[0].ID)
	require.NoError(t, err)
	doneA, err := st.StepGet(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, *doneA.CompletedAt, *b.StartedAt, "in the transaction that recorded a")

	steps, _ = w.reserve(1, 0)
	require.Zero(t, steps, "b runs in the one slot; the batch gave back what it held")
	require.Equal(t, 0, w.reserved.steps)
	w.wg.Wait()
}
