//go:build linux

package faults

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Steps storing artifacts all at the same moment — many more requests than
// the API has database connections — are each answered promptly: a burst
// must not exhaust the API's pool and stall it.
func TestConcurrentArtifactStores(t *testing.T) {
	t.Parallel()
	// pgxpool's default size is max(4, NumCPU): well over that at once.
	steps, each := max(8, 2*runtime.NumCPU()), 4
	rec := newRecorder(t)
	barrier := t.TempDir()
	store := fmt.Sprintf(`touch %[1]s/$MAXQ_STEP_SEQUENCE
for _ in $(seq 1000); do [ "$(ls %[1]s | wc -l)" -ge %[2]d ] && break; sleep 0.01; done
pids=()
for i in $(seq %[3]d); do
  curl -fsS --max-time 15 -X POST "$MAXQ_API/runs/$MAXQ_RUN_ID/artifacts" -d '{"stepId":"'$MAXQ_STEP_ID'","stepName":"'$MAXQ_STEP_NAME'","sequence":'$MAXQ_STEP_SEQUENCE',"name":"r'$i'","value":'$i'}' >/dev/null &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || exit 1; done
`, barrier, steps, each)
	root := flowDir(t, "burst", `[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || `+
		scheduleLine("s", true, fmt.Sprintf(`[{"name":"a","instances":%d,"maxRetries":0}]`, steps)),
		map[string]string{"a": rec.stepLine("start") + store + rec.stepLine("end")})
	s := newStack(t, root, nil)
	s.startWorker("A", map[string]string{"MAXQ_MAX_CONCURRENT_STEPS": fmt.Sprint(steps)})
	runID := s.trigger("burst")
	start := time.Now()
	run := s.wait(runID, 30*time.Second)
	t.Logf("run %s after %s", run.Status, time.Since(start).Round(time.Millisecond))
	require.Equal(t, "completed", run.Status, "%d steps storing %d artifacts each at once; error: %s", steps, each, run.Error)
	require.Equal(t, steps*each, s.count(`SELECT count(*) FROM artifact WHERE run_id = $1`, runID))
	s.requireNoDuplicates()
}
