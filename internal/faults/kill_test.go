//go:build linux

package faults

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A worker killed with SIGKILL while it runs steps loses them: once its
// lease expires the reaper counts the attempts as failed (worker_lost),
// and another worker runs them again.
func TestKillWorkerDuringSteps(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "work", `[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || `+
		scheduleLine("s", true, `[{"name":"w","instances":20,"maxRetries":2}]`),
		map[string]string{"w": rec.stepLine("start") + rec.sleepLine("1") + artifactLine() + rec.stepLine("end")})
	s := newStack(t, root, nil)
	a := s.startWorker("A", nil)
	aID := s.workerID(a)
	runID := s.trigger("work")

	// Kill A once it runs a few steps, and only steps: its flow.sh call is
	// recorded (TestKillWorkerAfterFlowScheduled kills it before).
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM flow_call WHERE run_id = $1 AND status = 'completed'`, runID) == 1 &&
			s.count(`SELECT count(*) FROM step WHERE worker_id = $1 AND status = 'running'`, aID) >= 5
	}, 20*time.Second, 10*time.Millisecond, "worker A never ran 5 steps")
	a.kill(t)
	killed := time.Now()
	var lost []string
	for _, st := range s.steps(runID) {
		if st.Status == "running" && st.WorkerID == aID {
			lost = append(lost, st.ID)
		}
	}
	require.NotEmpty(t, lost)
	t.Logf("killed worker A with %d steps running", len(lost))

	s.startWorker("B", nil)
	// Lease TTL (2 s) until A counts as dead, and as long again for B's
	// reaper to start reaping; a sweep a second; a retry backoff of about
	// a second; the steps' own second; then margin for a loaded machine.
	run := s.wait(runID, 25*time.Second)
	t.Logf("run %s %s after the kill", run.Status, time.Since(killed).Round(time.Millisecond))
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)

	steps := s.steps(runID)
	require.Len(t, steps, 20)
	ends := ended(rec.events())
	for _, st := range steps {
		require.Equal(t, "completed", st.Status, "step %s[%d]", st.Name, st.Sequence)
		require.True(t, ends[st.ID][st.Attempt], "step %s[%d] completed on attempt %d, which never ended", st.Name, st.Sequence, st.Attempt)
	}
	byID := map[string]stepRow{}
	for _, st := range steps {
		byID[st.ID] = st
	}
	for _, id := range lost {
		st := byID[id]
		require.GreaterOrEqual(t, st.RetryCount, 1, "step %s[%d] was lost with worker A", st.Name, st.Sequence)
		require.GreaterOrEqual(t, st.Attempt, 2, "step %s[%d] was lost with worker A", st.Name, st.Sequence)
		require.NotEqual(t, aID, st.WorkerID, "step %s[%d] was completed by the dead worker", st.Name, st.Sequence)
	}
	s.requireArtifactsOfFinalAttempt(steps)
	s.requireNoDuplicates()
	rec.requireNoLeftovers(5 * time.Second)
}

// flowCall is a row of flow_call.
type flowCall struct {
	Stage, Status     string
	Attempt           int
	Started, Finished int64
}

// flowCalls lists the calls of a run in the order they started.
func (s *stack) flowCalls(runID string) []flowCall {
	s.t.Helper()
	rows, err := s.db.Pool().Query(s.t.Context(), `SELECT coalesce(completed_stage, '-'), status, attempt,
		coalesce(started_at, 0), coalesce(completed_at, 0)
		FROM flow_call WHERE run_id = $1 ORDER BY started_at, created_at`, runID)
	require.NoError(s.t, err)
	defer rows.Close()
	var calls []flowCall
	for rows.Next() {
		var c flowCall
		require.NoError(s.t, rows.Scan(&c.Stage, &c.Status, &c.Attempt, &c.Started, &c.Finished))
		calls = append(calls, c)
	}
	require.NoError(s.t, rows.Err())
	return calls
}

// requireSerialCalls checks that no call of the run started before the
// previous one had finished.
func requireSerialCalls(t *testing.T, calls []flowCall) {
	t.Helper()
	for i := 1; i < len(calls); i++ {
		require.GreaterOrEqual(t, calls[i].Started, calls[i-1].Finished, "calls of the run overlap: %+v", calls)
	}
}

// A worker killed while flow.sh runs loses the call: the reaper queues it
// again and another worker calls flow.sh anew. Calls of the run never
// overlap.
func TestKillWorkerDuringFlowCall(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "slowflow", rec.flowLine("start")+`case "$MAXQ_COMPLETED_STAGE/$MAXQ_FAILED_STAGE" in
/) `+rec.sleepLine("3")+scheduleLine("s", false, `[{"name":"x","instances":3,"maxRetries":1}]`)+` ;;
s/) ;;
*) exit 9 ;;
esac
`+rec.flowLine("end"),
		map[string]string{"x": rec.stepLine("start") + rec.sleepLine("0.2") + artifactLine() + rec.stepLine("end")})
	s := newStack(t, root, nil)
	a := s.startWorker("A", nil)
	aID := s.workerID(a)
	runID := s.trigger("slowflow")
	first := runID + "/-"

	// Kill A while its flow.sh sleeps.
	require.Eventually(t, func() bool {
		for _, e := range rec.events() {
			if e.What == "start" && e.ID == first {
				return s.count(`SELECT count(*) FROM flow_call WHERE worker_id = $1 AND status = 'running'`, aID) == 1
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "worker A never called flow.sh")
	a.kill(t)
	killed := time.Now()

	s.startWorker("B", nil)
	// Lease TTL until A is dead, one more until B's reaper reaps, a
	// sweep, flow.sh's 3 s again, the steps, the last call, margin.
	run := s.wait(runID, 30*time.Second)
	t.Logf("run %s %s after the kill", run.Status, time.Since(killed).Round(time.Millisecond))
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)

	// flow.sh's first call: started twice, ended once, on B after the kill.
	var starts, ends []int64
	for _, e := range rec.events() {
		if e.ID != first {
			continue
		}
		switch e.What {
		case "start":
			starts = append(starts, e.At)
		case "end":
			ends = append(ends, e.At)
		}
	}
	require.Len(t, starts, 2, "flow.sh's first call, once per attempt")
	require.Len(t, ends, 1, "the killed attempt never ended")
	require.Greater(t, starts[1], killed.UnixNano(), "the second attempt started after the kill")

	// The lost call was called again as its attempt 2; then the stage's
	// callback; one after the other.
	calls := s.flowCalls(runID)
	require.Len(t, calls, 2, "%+v", calls)
	require.Equal(t, flowCall{"-", "completed", 2, calls[0].Started, calls[0].Finished}, calls[0])
	require.Equal(t, flowCall{"s", "completed", 1, calls[1].Started, calls[1].Finished}, calls[1])
	require.GreaterOrEqual(t, calls[0].Started, killed.UnixMilli(), "the first call's row is its second attempt's")
	requireSerialCalls(t, calls)

	steps := s.steps(runID)
	require.Len(t, steps, 3)
	endsOf := ended(rec.events())
	for _, st := range steps {
		require.Equal(t, "completed", st.Status)
		require.True(t, endsOf[st.ID][st.Attempt])
		require.Equal(t, 0, st.RetryCount, "no step was lost")
	}
	s.requireArtifactsOfFinalAttempt(steps)
	s.requireNoDuplicates()
	require.Zero(t, s.count(`SELECT count(*) FROM stage WHERE run_id = $1 AND status <> 'completed'`, runID))
	rec.requireNoLeftovers(5 * time.Second)
}

// A worker killed after its flow.sh scheduled a stage but before the call
// was recorded loses the call, and flow.sh is called again with the same
// environment — so it schedules the same stage again. That replay must not
// fail the run: the stage is already there, exactly as asked.
func TestKillWorkerAfterFlowScheduled(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "replay", rec.flowLine("start")+`case "$MAXQ_COMPLETED_STAGE/$MAXQ_FAILED_STAGE" in
/) `+scheduleLine("s", false, `[{"name":"x","instances":2,"maxRetries":2}]`)+rec.flowLine("scheduled")+rec.sleepLine("2")+` ;;
s/) ;;
*) exit 9 ;;
esac
`+rec.flowLine("end"),
		map[string]string{"x": rec.stepLine("start") + rec.sleepLine("0.2") + rec.stepLine("end")})
	s := newStack(t, root, nil)
	a := s.startWorker("A", nil)
	s.workerID(a)
	runID := s.trigger("replay")

	// Kill A after flow.sh scheduled the stage, while it still runs.
	require.Eventually(t, func() bool {
		for _, e := range rec.events() {
			if e.What == "scheduled" {
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "flow.sh never scheduled its stage")
	a.kill(t)
	killed := time.Now()

	s.startWorker("B", nil)
	run := s.wait(runID, 30*time.Second)
	t.Logf("run %s %s after the kill", run.Status, time.Since(killed).Round(time.Millisecond))
	require.Equal(t, "completed", run.Status, "flow.sh called again after its worker died, scheduling the same stage again; error: %s", run.Error)

	calls := s.flowCalls(runID)
	require.Len(t, calls, 2, "%+v", calls)
	require.Equal(t, flowCall{"-", "completed", 2, calls[0].Started, calls[0].Finished}, calls[0])
	requireSerialCalls(t, calls)
	steps := s.steps(runID)
	require.Len(t, steps, 2, "the stage is scheduled once")
	ends := ended(rec.events())
	for _, st := range steps {
		require.Equal(t, "completed", st.Status)
		require.True(t, ends[st.ID][st.Attempt])
	}
	s.requireNoDuplicates()
	rec.requireNoLeftovers(5 * time.Second)
}
