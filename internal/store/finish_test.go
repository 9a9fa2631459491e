package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is a store on a database of its own, with a registered worker.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	s      *store.Store
	worker string
}

func newFixture(t *testing.T) *fixture {
	ctx := context.Background()
	s := store.New(pgtest.Pool(t))
	id, err := s.WorkerRegister(ctx, "test")
	require.NoError(t, err)
	return &fixture{t: t, ctx: ctx, s: s, worker: id}
}

// run triggers a run and schedules one stage of it.
func (f *fixture) run(final bool, steps ...store.StepSpec) string {
	run, _, err := f.s.RunCreate(f.ctx, store.RunCreateParams{FlowName: "flow"})
	require.NoError(f.t, err)
	_, _, _, err = f.s.StageSchedule(f.ctx, store.StageScheduleParams{RunID: run.ID, Stage: "only", Final: final, Steps: steps})
	require.NoError(f.t, err)
	return run.ID
}

func (f *fixture) claim(limit int) []store.ClaimedStep {
	c, err := f.s.StepClaim(f.ctx, store.StepClaimParams{WorkerID: f.worker, Limit: limit})
	require.NoError(f.t, err)
	return c
}

func (f *fixture) steps(runID string) map[string][]core.Step {
	list, _, err := f.s.StepList(f.ctx, store.StepListParams{RunID: runID, Page: store.Page{Limit: 1000}})
	require.NoError(f.t, err)
	byName := map[string][]core.Step{}
	for _, st := range list {
		byName[st.Name] = append(byName[st.Name], st)
	}
	return byName
}

// finishConcurrently completes claimed from four writers at once, each in
// batches of 2 to most outcomes; check, when given, vets each batch's answer.
func (f *fixture) finishConcurrently(claimed []store.ClaimedStep, most int, check func(applied []bool, woke bool) error) {
	const writers = 4
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []store.StepFinishParams
			for i := w; i < len(claimed); i += writers {
				mine = append(mine, completed(claimed[i]))
			}
			for len(mine) > 0 {
				k := min(len(mine), 2+rand.IntN(most-1))
				applied, woke, err := f.finish(mine[:k])
				if err == nil && check != nil {
					err = check(applied, woke)
				}
				if err != nil {
					errs <- err
					return
				}
				mine = mine[k:]
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(f.t, err)
	}
}

// deadlocks is the server's count of deadlocks in the fixture's database.
// Deadlocked transactions are retried, so only this count shows them.
func (f *fixture) deadlocks() int64 {
	time.Sleep(1500 * time.Millisecond) // the server counts a transaction once it is idle
	var n int64
	require.NoError(f.t, f.s.Pool().QueryRow(f.ctx,
		`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
	return n
}

// finish records outcomes as a worker does, claiming nothing.
func (f *fixture) finish(outcomes []store.StepFinishParams) (applied []bool, woke bool, err error) {
	res, err := f.s.StepsFinish(f.ctx, outcomes, store.StepsClaim{})
	return res.Applied, res.Woke, err
}

func completed(c store.ClaimedStep) store.StepFinishParams {
	zero := 0
	return store.StepFinishParams{StepID: c.ID, Attempt: c.Attempt, Completed: true, ExitCode: &zero, Retry: true}
}

func TestStepsFinishReleasesDependentsByInstance(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID := f.run(true,
		store.StepSpec{Name: "a", Instances: 3},
		store.StepSpec{Name: "b", Instances: 1, DependsOn: []string{"a"}})
	claimed := f.claim(10)
	require.Len(t, claimed, 3, "b waits for every instance of a")

	// Two of a's three instances in one batch: b still waits.
	applied, woke, err := f.finish([]store.StepFinishParams{completed(claimed[0]), completed(claimed[1])})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, applied)
	require.False(t, woke, "nothing became ready")
	require.Empty(t, f.claim(10))

	applied, woke, err = f.finish([]store.StepFinishParams{completed(claimed[2])})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, applied)
	require.True(t, woke, "b became ready")
	b := f.claim(10)
	require.Len(t, b, 1)
	require.Equal(t, "b", b[0].Name)

	_, _, err = f.finish([]store.StepFinishParams{completed(b[0])})
	require.NoError(t, err)
	run, stages, err := f.s.RunGet(f.ctx, runID)
	require.NoError(t, err)
	require.Equal(t, core.RunCompleted, run.Status, "the final stage completed the run")
	require.Equal(t, core.StageCompleted, stages[0].Status)
	for _, st := range f.steps(runID)["a"] {
		require.Equal(t, core.StepCompleted, st.Status)
		require.NotNil(t, st.ExitCode)
		require.Equal(t, 0, *st.ExitCode)
		require.NotNil(t, st.CompletedAt)
		require.NotNil(t, st.DurationMs)
	}
}

// A batch mixes completions, failures and results of superseded attempts;
// each is applied as it would be alone.
func TestStepsFinishMixedBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID := f.run(false,
		store.StepSpec{Name: "ok", Instances: 1},
		store.StepSpec{Name: "flaky", Instances: 1, MaxRetries: 2},
		store.StepSpec{Name: "stale", Instances: 1},
		store.StepSpec{Name: "after", Instances: 1, DependsOn: []string{"ok", "flaky"}})
	claimed := map[string]store.ClaimedStep{}
	for _, c := range f.claim(10) {
		claimed[c.Name] = c
	}
	require.Len(t, claimed, 3)
	one := 1
	stale := completed(claimed["stale"])
	stale.Attempt++ // a result of an attempt that is not the step's
	applied, woke, err := f.finish([]store.StepFinishParams{
		completed(claimed["ok"]),
		{StepID: claimed["flaky"].ID, Attempt: claimed["flaky"].Attempt, Error: json.RawMessage(`{"reason":"exit_code","exitCode":1}`), ExitCode: &one, Retry: true},
		stale,
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false}, applied)
	require.False(t, woke, "after still waits for flaky")

	steps := f.steps(runID)
	require.Equal(t, core.StepCompleted, steps["ok"][0].Status)
	require.Equal(t, core.StepPending, steps["flaky"][0].Status, "a failure with retries left goes back to pending")
	require.Equal(t, 1, steps["flaky"][0].RetryCount)
	require.Equal(t, core.StepRunning, steps["stale"][0].Status, "a superseded attempt's result changes nothing")
	require.Equal(t, core.StepPending, steps["after"][0].Status)

	// The same result twice: the second is fenced off.
	applied, _, err = f.finish([]store.StepFinishParams{completed(claimed["ok"])})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, applied)

	// A final failure fails its dependents and the stage.
	applied, _, err = f.finish([]store.StepFinishParams{
		{StepID: claimed["stale"].ID, Attempt: claimed["stale"].Attempt, Error: json.RawMessage(`{"reason":"exit_code","exitCode":1}`), ExitCode: &one},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, applied)
	_, stages, err := f.s.RunGet(f.ctx, runID)
	require.NoError(t, err)
	require.Equal(t, core.StageFailed, stages[0].Status)
}

func TestStepsFinishRejectsUnfencedOutcomes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, _, err := f.finish([]store.StepFinishParams{{StepID: "not-an-id", Attempt: 1, Completed: true}})
	require.ErrorIs(t, err, core.ErrInvalid)
	_, _, err = f.finish([]store.StepFinishParams{{StepID: "0192f5c4-1d2e-7000-8000-000000000000", Completed: true}})
	require.ErrorIs(t, err, core.ErrInvalid, "a batch must be fenced by attempt")
}

// Workers record batches of completions at the same time, each batch
// spanning two runs' stages, every completion releasing the same four
// dependents of its run: every decrement lands, each dependent becomes
// ready in exactly one batch, and no two batches deadlock (dependents and
// stages are locked in id order; deadlocks would be retried, so only the
// server's count shows them).
func TestStepsFinishConcurrentBatches(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 150 // instances of a per run
	dependents := []store.StepSpec{{Name: "a", Instances: n}}
	for _, z := range []string{"z1", "z2", "z3", "z4"} {
		dependents = append(dependents, store.StepSpec{Name: z, Instances: 1, DependsOn: []string{"a"}})
	}
	runs := []string{f.run(false, dependents...), f.run(false, dependents...)}
	claimed := f.claim(2 * n)
	require.Len(t, claimed, 2*n)
	rand.Shuffle(len(claimed), func(i, j int) { claimed[i], claimed[j] = claimed[j], claimed[i] })

	woken := make(chan bool, 2*n)
	f.finishConcurrently(claimed, 25, func(applied []bool, woke bool) error {
		for _, ok := range applied {
			if !ok {
				return errors.New("a current attempt's result was fenced off")
			}
		}
		woken <- woke
		return nil
	})
	close(woken)
	wakes := 0
	for w := range woken {
		if w {
			wakes++
		}
	}
	require.LessOrEqual(t, wakes, 2, "each run's dependents became ready in exactly one batch")
	require.GreaterOrEqual(t, wakes, 1)
	z := f.claim(100)
	require.Len(t, z, 8, "four dependents in each of two runs")
	for _, runID := range runs {
		for _, st := range f.steps(runID)["a"] {
			require.Equal(t, core.StepCompleted, st.Status)
		}
		_, stages, err := f.s.RunGet(f.ctx, runID)
		require.NoError(t, err)
		require.Equal(t, core.StageRunning, stages[0].Status, "its z steps are still running")
	}
	require.Zero(t, f.deadlocks(), "batches deadlocked")
}

// One Claim takes flow calls and steps together, and says when the next
// step waiting out a retry backoff becomes ready — not when a step it left
// is ready already (its timeout too long for the claim), which would wake
// the worker only to claim nothing again.
func TestClaimTakesBothKindsAndTheNextBackoff(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID := f.run(false, store.StepSpec{Name: "flaky", Instances: 1, MaxRetries: 3},
		store.StepSpec{Name: "long", Instances: 1, TimeoutMs: 600_000})
	got, err := f.s.Claim(f.ctx, store.ClaimParams{Flows: 4, StepClaimParams: store.StepClaimParams{WorkerID: f.worker, Limit: 4, MaxTimeoutMs: 60_000}})
	require.NoError(t, err)
	require.Len(t, got.Calls, 1, "the run's first flow call")
	require.Equal(t, runID, got.Calls[0].RunID)
	require.Len(t, got.Steps, 1, "the step that fits")
	require.Equal(t, "flaky", got.Steps[0].Name)
	require.Zero(t, got.NextReady, "no step waits out a backoff; the one left is ready already")

	one := 1
	before := time.Now().UnixMilli()
	_, _, err = f.finish([]store.StepFinishParams{{StepID: got.Steps[0].ID, Attempt: got.Steps[0].Attempt,
		Error: json.RawMessage(`{"reason":"exit_code","exitCode":1}`), ExitCode: &one, Retry: true}})
	require.NoError(t, err)
	got, err = f.s.Claim(f.ctx, store.ClaimParams{Flows: 4, StepClaimParams: store.StepClaimParams{WorkerID: f.worker, Limit: 4, MaxTimeoutMs: 60_000}})
	require.NoError(t, err)
	require.Empty(t, got.Calls, "one flow call of a run at a time")
	require.Empty(t, got.Steps, "the retry waits out its backoff")
	require.Greater(t, got.NextReady, before, "the backoff's end")

	got, err = f.s.Claim(f.ctx, store.ClaimParams{})
	require.NoError(t, err)
	require.Equal(t, store.Claimed{}, got, "nothing asked, nothing taken")
}

// Batches that each end stages of several runs, in every order: ending a
// stage locks its run (to queue the next flow.sh call), and settle takes
// those locks in run order, so no two batches hold the run the other waits
// for. Every stage completes and queues its call exactly once.
func TestStepsFinishBatchesEndingStagesOfManyRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const runs, stages = 8, 12
	var ids []string
	for range runs {
		run, _, err := f.s.RunCreate(f.ctx, store.RunCreateParams{FlowName: "flow"})
		require.NoError(t, err)
		ids = append(ids, run.ID)
	}
	// Stages are scheduled round by round in a shuffled order of runs, so
	// the order of stage ids is not the order of run ids.
	for k := range stages {
		order := rand.Perm(runs)
		for _, i := range order {
			_, _, _, err := f.s.StageSchedule(f.ctx, store.StageScheduleParams{RunID: ids[i],
				Stage: fmt.Sprintf("st%02d", k), Steps: []store.StepSpec{{Name: fmt.Sprintf("s%02d", k), Instances: 1}}})
			require.NoError(t, err)
		}
	}
	claimed := f.claim(runs * stages)
	require.Len(t, claimed, runs*stages)
	rand.Shuffle(len(claimed), func(i, j int) { claimed[i], claimed[j] = claimed[j], claimed[i] })

	f.finishConcurrently(claimed, 8, nil)
	for _, runID := range ids {
		_, got, err := f.s.RunGet(f.ctx, runID)
		require.NoError(t, err)
		require.Len(t, got, stages)
		for _, st := range got {
			require.Equal(t, core.StageCompleted, st.Status)
		}
	}
	var calls int
	require.NoError(t, f.s.Pool().QueryRow(f.ctx, `SELECT count(*) FROM flow_call
		WHERE status = 'pending' AND coalesce(completed_stage, '') <> ''`).Scan(&calls))
	require.Equal(t, runs*stages, calls, "one callback per completed stage")
	require.Zero(t, f.deadlocks(), "batches deadlocked")
}

// The worker that records a batch claims, in the same transaction, the
// dependents the batch made ready, as many as it has slots for; only what
// it leaves is announced with a NOTIFY.
func TestStepsFinishClaimsReadyDependents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	listener, err := f.s.Pool().Acquire(f.ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(f.ctx, "LISTEN "+store.NotifyChannel)
	require.NoError(t, err)
	notified := func() bool {
		ctx, cancel := context.WithTimeout(f.ctx, 300*time.Millisecond)
		defer cancel()
		_, err := listener.Conn().WaitForNotification(ctx)
		return err == nil
	}
	drain := func() { // what scheduling and claiming announced
		for notified() {
		}
	}

	runID := f.run(false,
		store.StepSpec{Name: "a", Instances: 1},
		store.StepSpec{Name: "b", Instances: 3, DependsOn: []string{"a"}})
	a := f.claim(10)
	require.Len(t, a, 1)
	var asked []int
	drain()
	res, err := f.s.StepsFinish(f.ctx, []store.StepFinishParams{completed(a[0])}, store.StepsClaim{
		StepClaimParams: store.StepClaimParams{WorkerID: f.worker},
		Slots:           func(n int) int { asked = append(asked, n); return 2 },
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, res.Applied)
	require.Equal(t, []int{3}, asked, "asked once, for the three instances of b")
	require.Len(t, res.Claimed, 2, "as many as the worker had slots for")
	require.True(t, res.Woke, "the third is left for anyone")
	require.True(t, notified())

	steps := f.steps(runID)
	completedAt := *steps["a"][0].CompletedAt
	running := 0
	for _, st := range steps["b"] {
		if st.Status == core.StepRunning {
			running++
			require.Equal(t, completedAt, *st.StartedAt, "claimed the moment a completed")
			require.Equal(t, 1, st.Attempt)
		}
	}
	require.Equal(t, 2, running)
	for _, c := range res.Claimed {
		require.Equal(t, "b", c.Name)
		require.Equal(t, runID, c.RunID)
		require.Equal(t, "only", c.Stage)
	}
	rest := f.claim(10)
	require.Len(t, rest, 1, "the one left is claimable as usual")

	// With slots for all of them, nothing is announced.
	runID = f.run(false,
		store.StepSpec{Name: "a", Instances: 1},
		store.StepSpec{Name: "b", Instances: 2, DependsOn: []string{"a"}})
	a = f.claim(10)
	require.Len(t, a, 1)
	drain()
	res, err = f.s.StepsFinish(f.ctx, []store.StepFinishParams{completed(a[0])}, store.StepsClaim{
		StepClaimParams: store.StepClaimParams{WorkerID: f.worker},
		Slots:           func(n int) int { return n },
	})
	require.NoError(t, err)
	require.Len(t, res.Claimed, 2)
	require.False(t, res.Woke)
	require.False(t, notified(), "no NOTIFY when the batch's worker took everything")
	for _, st := range f.steps(runID)["b"] {
		require.Equal(t, core.StepRunning, st.Status)
	}
}

// A dependent whose stage fails in the same batch is cancelled, not claimed.
func TestStepsFinishClaimsNothingOfAFailedStage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID := f.run(false,
		store.StepSpec{Name: "a", Instances: 1},
		store.StepSpec{Name: "x", Instances: 1},
		store.StepSpec{Name: "b", Instances: 1, DependsOn: []string{"a"}})
	claimed := map[string]store.ClaimedStep{}
	for _, c := range f.claim(10) {
		claimed[c.Name] = c
	}
	require.Len(t, claimed, 2)
	one := 1
	res, err := f.s.StepsFinish(f.ctx, []store.StepFinishParams{
		completed(claimed["a"]),
		{StepID: claimed["x"].ID, Attempt: claimed["x"].Attempt, Error: json.RawMessage(`{"reason":"exit_code","exitCode":1}`), ExitCode: &one},
	}, store.StepsClaim{StepClaimParams: store.StepClaimParams{WorkerID: f.worker}, Slots: func(n int) int { return n }})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, res.Applied)
	require.Empty(t, res.Claimed)
	require.Equal(t, core.StepCancelled, f.steps(runID)["b"][0].Status)
}

// A batch that completes a stage claims the run's next call of flow.sh for
// the worker recording it, when it has a flow slot free; else it is left
// for anyone, with a NOTIFY.
func TestStepsFinishClaimsTheNextFlowCall(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, slots := range []int{1, 0} {
		run, _, err := f.s.RunCreate(f.ctx, store.RunCreateParams{FlowName: "flow"})
		require.NoError(t, err)
		calls, err := f.s.FlowCallClaim(f.ctx, f.worker, 10)
		require.NoError(t, err)
		require.Len(t, calls, 1)
		_, _, _, err = f.s.StageSchedule(f.ctx, store.StageScheduleParams{RunID: run.ID, Stage: "first",
			Steps: []store.StepSpec{{Name: "a", Instances: 2}}})
		require.NoError(t, err)
		applied, err := f.s.FlowCallFinish(f.ctx, store.FlowCallFinishParams{CallID: calls[0].ID, Attempt: calls[0].Attempt})
		require.NoError(t, err)
		require.True(t, applied)
		a := f.claim(10)
		require.Len(t, a, 2)

		var asked []int
		res, err := f.s.StepsFinish(f.ctx, []store.StepFinishParams{completed(a[0]), completed(a[1])}, store.StepsClaim{
			StepClaimParams: store.StepClaimParams{WorkerID: f.worker},
			FlowSlots:       func(n int) int { asked = append(asked, n); return min(n, slots) },
		})
		require.NoError(t, err)
		require.Equal(t, []int{1}, asked)
		if slots == 0 {
			require.Empty(t, res.Calls)
			require.True(t, res.Woke, "the call is announced")
			left, err := f.s.FlowCallClaim(f.ctx, f.worker, 10)
			require.NoError(t, err)
			require.Len(t, left, 1, "and claimable as usual")
			continue
		}
		require.Len(t, res.Calls, 1)
		require.False(t, res.Woke, "nothing left to announce")
		c := res.Calls[0]
		require.Equal(t, run.ID, c.RunID)
		require.Equal(t, "first", c.CompletedStage)
		require.Equal(t, "flow", c.FlowName)
		require.Equal(t, 1, c.Attempt)
		more, err := f.s.FlowCallClaim(f.ctx, f.worker, 10)
		require.NoError(t, err)
		require.Empty(t, more, "one call of a run at a time")
		applied, err = f.s.FlowCallFinish(f.ctx, store.FlowCallFinishParams{CallID: c.ID, Attempt: c.Attempt})
		require.NoError(t, err)
		require.True(t, applied)
		got, _, err := f.s.RunGet(f.ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, core.RunCompleted, got.Status, "its flow scheduled nothing more")
	}
}

// The heartbeat tells a worker to stop the scripts of steps it no longer
// owns: cancelled, or handed to another attempt. A step whose script ended
// it through the API is still its own, for the script may go on to its end.
func TestWorkerHeartbeatReportsOnlyStepsNoLongerOwned(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kept := f.run(true, store.StepSpec{Name: "done", Instances: 1}, store.StepSpec{Name: "gaveUp", Instances: 1},
		store.StepSpec{Name: "busy", Instances: 1}, store.StepSpec{Name: "released", Instances: 1})
	cancelled := f.run(true, store.StepSpec{Name: "stopped", Instances: 1})
	claimed := f.claim(10)
	require.Len(t, claimed, 5)
	byName := map[string]store.ClaimedStep{}
	ids := []string{}
	for _, c := range claimed {
		byName[c.Name] = c
		ids = append(ids, c.ID)
	}
	// Ended through the API by the attempt's own script.
	_, applied, err := f.s.StepFinish(f.ctx, store.StepFinishParams{StepID: byName["done"].ID, Attempt: byName["done"].Attempt, Completed: true})
	require.NoError(t, err)
	require.True(t, applied)
	_, applied, err = f.s.StepFinish(f.ctx, store.StepFinishParams{StepID: byName["gaveUp"].ID, Attempt: byName["gaveUp"].Attempt,
		Error: json.RawMessage(`{"reason":"given up"}`)})
	require.NoError(t, err)
	require.True(t, applied)
	calls, err := f.s.FlowCallClaim(f.ctx, f.worker, 10)
	require.NoError(t, err)
	require.Len(t, calls, 2)
	callIDs, cancelledCall := []string{}, ""
	for _, c := range calls {
		callIDs = append(callIDs, c.ID)
		if c.RunID == cancelled {
			cancelledCall = c.ID
		}
	}
	// Handed back, then the run of another is cancelled.
	released, err := f.s.StepRelease(f.ctx, byName["released"].ID, byName["released"].Attempt)
	require.NoError(t, err)
	require.True(t, released)
	_, err = f.s.RunCancel(f.ctx, cancelled)
	require.NoError(t, err)

	lost, lostCalls, err := f.s.WorkerHeartbeat(f.ctx, f.worker, ids, callIDs)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{byName["released"].ID, byName["stopped"].ID}, lost)
	require.Equal(t, []string{cancelledCall}, lostCalls)

	// Another worker's heartbeat owns none of them.
	other, err := f.s.WorkerRegister(f.ctx, "other")
	require.NoError(t, err)
	lost, lostCalls, err = f.s.WorkerHeartbeat(f.ctx, other, ids, callIDs)
	require.NoError(t, err)
	require.ElementsMatch(t, ids, lost)
	require.ElementsMatch(t, callIDs, lostCalls)
	require.Equal(t, core.StepRunning, f.steps(kept)["busy"][0].Status)
}
