//go:build linux

package faults

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Three workers run 1,000 short steps while, every 2 to 3 seconds, one of
// them is killed with SIGKILL and replaced. Every run completes, and every
// step is completed once in the database by an attempt that ran to its end.
func TestChaosThreeWorkers(t *testing.T) {
	t.Parallel()
	const runs, instances = 10, 100
	rec := newRecorder(t)
	root := flowDir(t, "chaos", `[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || `+
		scheduleLine("c", true, fmt.Sprintf(`[{"name":"t","instances":%d,"maxRetries":5}]`, instances)),
		map[string]string{"t": rec.stepLine("start") + rec.sleepLine("0.05") + artifactLine() + rec.stepLine("end")})
	// A longer lease than the other tests': three workers and their
	// scripts share a small machine, and a late heartbeat must not look
	// like a death.
	s := newStack(t, root, map[string]string{"MAXQ_LEASE_TTL": "3"})
	workers := make([]*workerProc, 3)
	started := 0
	startWorker := func(i int) {
		started++
		workers[i] = s.startWorker(fmt.Sprintf("W%d", started), nil)
	}
	for i := range workers {
		startWorker(i)
	}
	var ids []string
	for range runs {
		ids = append(ids, s.trigger("chaos"))
	}

	begin := time.Now()
	nextKill := begin.Add(1500 * time.Millisecond)
	kills := 0
	for s.count(`SELECT count(*) FROM run WHERE status NOT IN ('completed', 'failed', 'cancelled')`) > 0 {
		// A bound for runs that never finish, not a speed target: on a
		// small machine whose process spawns are slow, the 1,000 steps
		// (bash, curl and sleep each) take well over a minute.
		require.Less(t, time.Since(begin), 240*time.Second, "runs not done after 4 minutes of chaos")
		if time.Now().After(nextKill) {
			i := rand.IntN(len(workers))
			workers[i].kill(t)
			kills++
			startWorker(i)
			nextKill = time.Now().Add(2*time.Second + rand.N(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d runs of %d steps done in %s with %d workers killed", runs, instances, time.Since(begin).Round(time.Millisecond), kills)
	require.Positive(t, kills, "the work ended before any worker was killed")

	for _, id := range ids {
		run := s.wait(id, time.Second)
		require.Equal(t, "completed", run.Status, "run %s: %s", id, run.Error)
	}
	steps := s.steps(ids...)
	require.Len(t, steps, runs*instances)
	events := rec.events()
	ends := ended(events)
	retried := 0
	for _, st := range steps {
		require.Equal(t, "completed", st.Status, "step %s of run %s", st.ID, st.RunID)
		require.True(t, ends[st.ID][st.Attempt], "step %s completed on attempt %d, which never ended", st.ID, st.Attempt)
		if st.RetryCount > 0 {
			retried++
		}
	}
	startedIDs, attempts := map[string]bool{}, 0
	for _, e := range events {
		if e.What == "start" {
			startedIDs[e.ID] = true
			attempts++
		}
	}
	require.Len(t, startedIDs, runs*instances, "every step's script ran")
	require.Len(t, ends, runs*instances, "step ids with an end line")
	require.Equal(t, runs*instances, s.count(`SELECT count(*) FROM step WHERE status = 'completed'`))
	t.Logf("%d step attempts started, %d steps retried", attempts, retried)
	s.requireArtifactsOfFinalAttempt(steps)
	s.requireNoDuplicates()
	rec.requireNoLeftovers(5 * time.Second)
}
