//go:build linux

package faults

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SIGTERM stops a worker gracefully: it claims nothing more, lets its
// scripts run for MAXQ_SHUTDOWN_GRACE, then stops them, hands their steps
// back as pending without spending a retry, and exits 0. Another worker
// runs them again from the start.
func TestSigtermHandsStepsBack(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "long", `[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || `+
		scheduleLine("s", true, `[{"name":"slow","instances":4,"maxRetries":1}]`),
		map[string]string{"slow": rec.stepLine("start") + rec.sleepLine("4") + artifactLine() + rec.stepLine("end")})
	s := newStack(t, root, nil)
	a := s.startWorker("A", map[string]string{"MAXQ_SHUTDOWN_GRACE": "1"})
	aID := s.workerID(a)
	runID := s.trigger("long")

	// Every step runs on A and has started its script.
	require.Eventually(t, func() bool {
		starts := 0
		for _, e := range rec.events() {
			if e.What == "start" {
				starts++
			}
		}
		return starts == 4 && s.count(`SELECT count(*) FROM step WHERE worker_id = $1 AND status = 'running'`, aID) == 4
	}, 20*time.Second, 10*time.Millisecond, "worker A never ran the 4 steps")

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	signalled := time.Now()
	code := a.wait(t, 1*time.Second+3*time.Second)
	t.Logf("worker A exited %d after %s", code, time.Since(signalled).Round(time.Millisecond))
	require.Equal(t, 0, code)
	rec.requireNoLeftovers(time.Second) // the steps' process groups went with them

	for _, st := range s.steps(runID) {
		require.Equal(t, "pending", st.Status, "step %s[%d] is handed back", st.Name, st.Sequence)
		require.Equal(t, 0, st.RetryCount, "handing a step back spends no retry")
		require.Equal(t, 1, st.Attempt)
		require.Empty(t, st.WorkerID)
	}
	require.Zero(t, s.count(`SELECT count(*) FROM worker WHERE id = $1`, aID), "A deregistered")
	require.Zero(t, s.count(`SELECT count(*) FROM artifact`))

	s.startWorker("B", nil)
	run := s.wait(runID, 20*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)

	steps := s.steps(runID)
	require.Len(t, steps, 4)
	events := rec.events()
	ends := ended(events)
	for _, st := range steps {
		require.Equal(t, "completed", st.Status)
		require.Equal(t, 0, st.RetryCount, "step %s[%d]", st.Name, st.Sequence)
		require.Equal(t, 2, st.Attempt, "step %s[%d]", st.Name, st.Sequence)
		require.Equal(t, map[int]bool{2: true}, ends[st.ID], "step %s[%d]: only attempt 2 ran to its end", st.Name, st.Sequence)
	}
	s.requireArtifactsOfFinalAttempt(steps)
	s.requireNoDuplicates()
	rec.requireNoLeftovers(5 * time.Second)
}
