//go:build linux

package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// takeover is a step whose attempt 1 ran on worker A, which froze
// (SIGSTOP: a long GC pause, a frozen VM) for longer than its lease, so
// that worker B now runs the step as attempt 2. A's script goes on: a
// frozen worker is slow, not dead.
type takeover struct {
	s      *stack
	rec    *recorder
	a, b   *workerProc
	bID    string
	runID  string
	stepID string
	gates  string
}

// newTakeover runs a step whose attempt 1 waits for gate "1" and later
// attempts for gate "2", then run then, then record "end"; "exit" is
// recorded however the script ends. It returns once B runs attempt 2.
func newTakeover(t *testing.T, then string) *takeover {
	t.Helper()
	k := &takeover{rec: newRecorder(t), gates: t.TempDir()}
	step := "trap '" + strings.TrimSpace(k.rec.stepLine("exit")) + "' EXIT\n" +
		k.rec.stepLine("start") +
		"gate=" + k.gates + "/$(( MAXQ_STEP_ATTEMPT == 1 ? 1 : 2 ))\n" +
		`for _ in $(seq 300); do [ -e "$gate" ] && break; ` + strings.TrimSpace(k.rec.sleepLine("0.1")) + "; done\n" +
		then +
		k.rec.stepLine("end")
	root := flowDir(t, "paused", `[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || `+
		scheduleLine("s", true, `[{"name":"x","instances":1,"maxRetries":3}]`),
		map[string]string{"x": step})
	k.s = newStack(t, root, nil)
	k.a = k.s.startWorker("A", nil)
	aID := k.s.workerID(k.a)
	k.runID = k.s.trigger("paused")

	// A freezes while it runs attempt 1 — not inside a transaction: its
	// flow.sh call is recorded (TestPausedWorkerHoldingTransaction is
	// about that).
	require.Eventually(t, func() bool {
		return k.hasEvent("start", 1) && k.s.count(`SELECT count(*) FROM step WHERE worker_id = $1 AND status = 'running'`, aID) == 1 &&
			k.s.count(`SELECT count(*) FROM flow_call WHERE run_id = $1 AND status = 'completed'`, k.runID) == 1
	}, 20*time.Second, 10*time.Millisecond, "worker A never ran the step")
	require.NoError(t, k.a.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = k.a.cmd.Process.Signal(syscall.SIGCONT) })
	paused := time.Now()
	k.b = k.s.startWorker("B", nil)
	k.bID = k.s.workerID(k.b)
	if !assertEventually(20*time.Second, func() bool {
		return k.s.count(`SELECT count(*) FROM step WHERE run_id = $1 AND worker_id = $2 AND status = 'running' AND attempt = 2`,
			k.runID, k.bID) == 1
	}) {
		t.Fatalf("worker B never took the step over; steps %+v; flow calls %+v; sessions:\n%s",
			k.s.steps(k.runID), k.s.flowCalls(k.runID), k.s.dbActivity())
	}
	t.Logf("step taken over %s after worker A froze", time.Since(paused).Round(time.Millisecond))
	k.stepID = k.s.steps(k.runID)[0].ID
	return k
}

func (k *takeover) hasEvent(what string, attempt int) bool {
	for _, e := range k.rec.events() {
		if e.What == what && e.Attempt == attempt {
			return true
		}
	}
	return false
}

// finishAttempt1 lets the superseded attempt's script go on and waits for
// it to end.
func (k *takeover) finishAttempt1(t *testing.T) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(k.gates, "1"), nil, 0o644))
	require.Eventually(t, func() bool { return k.hasEvent("exit", 1) }, 10*time.Second, 10*time.Millisecond)
}

// wakeA resumes worker A and waits until it has tried to record attempt 1.
func (k *takeover) wakeA(t *testing.T) {
	t.Helper()
	require.NoError(t, k.a.cmd.Process.Signal(syscall.SIGCONT))
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(k.a.log)
		return strings.Contains(string(data), "step result discarded")
	}, 10*time.Second, 20*time.Millisecond, "worker A never gave up the superseded attempt's result")
}

// finishAttempt2 lets attempt 2 go on and waits for the run to complete.
func (k *takeover) finishAttempt2(t *testing.T) stepRow {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(k.gates, "2"), nil, 0o644))
	run := k.s.wait(k.runID, 20*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	st := k.s.steps(k.runID)[0]
	require.Equal(t, "completed", st.Status)
	// A script may complete its step through the API before it ends.
	require.Eventually(t, func() bool { return ended(k.rec.events())[st.ID][st.Attempt] }, 10*time.Second, 20*time.Millisecond,
		"the step is completed, but its attempt %d never ran to its end", st.Attempt)
	return st
}

// When the frozen worker wakes up, nothing of the superseded attempt may
// count — not the result the worker records, not an artifact or a log line
// its script produced after it was superseded (DESIGN §3).
func TestPausedWorkerIsFenced(t *testing.T) {
	t.Parallel()
	k := newTakeover(t, `echo "attempt $MAXQ_STEP_ATTEMPT after the gate"`+"\n"+artifactLine())
	s := k.s

	// The superseded attempt's script stores its artifact, prints and
	// ends. Checks of what it could still make count are assertions, so
	// that a failure reports them all.
	k.finishAttempt1(t)
	assert.Zero(t, s.count(`SELECT count(*) FROM artifact WHERE run_id = $1`, k.runID),
		"attempt 1, superseded by attempt 2, stored an artifact: it must be refused")
	// A wakes up and tries to record attempt 1 as completed.
	k.wakeA(t)
	require.Equal(t, stepRow{k.stepID, k.runID, "x", 0, "running", 2, 1, k.bID}, s.steps(k.runID)[0],
		"the superseded attempt's result did not count")

	st := k.finishAttempt2(t)
	assert.Equal(t, 2, st.Attempt, "attempt 2 completed the step (a stale artifact makes its own store fail: %s)",
		s.stepStderr(st.ID, 2))
	assert.Equal(t, 1, st.RetryCount, "only the lost attempt counts as a retry")
	assert.Zero(t, s.count(`SELECT count(*) FROM artifact WHERE step_id = $1 AND (value->>'attempt')::int <> $2`, st.ID, st.Attempt),
		"an artifact of another attempt than the one that completed the step")
	assert.Zero(t, s.count(`SELECT count(*) FROM log WHERE step_id = $1 AND message = 'attempt 1 after the gate'`, st.ID),
		"a log line attempt 1 printed after it was superseded was stored")
	s.requireNoDuplicates()
	k.rec.requireNoLeftovers(5 * time.Second)
}

// A superseded attempt's script cannot end the step through the API
// either (PATCH /steps/{id}): the step belongs to attempt 2, which alone
// may complete it (README, Reliability).
func TestPausedWorkerScriptCannotCompleteStep(t *testing.T) {
	t.Parallel()
	k := newTakeover(t, `curl -sS --max-time 15 -X PATCH "$MAXQ_API/steps/$MAXQ_STEP_ID" -d '{"status":"completed","output":{"attempt":'$MAXQ_STEP_ATTEMPT'},"attempt":'$MAXQ_STEP_ATTEMPT'}' -o /dev/null -w '%{http_code}' > `+
		"$gate.status\n")
	s := k.s
	k.finishAttempt1(t)
	code, err := os.ReadFile(filepath.Join(k.gates, "1.status"))
	require.NoError(t, err)
	assert.Equal(t, stepRow{k.stepID, k.runID, "x", 0, "running", 2, 1, k.bID}, s.steps(k.runID)[0],
		"attempt 1, superseded by attempt 2, reported the step completed (HTTP %s): it must be refused", code)
	k.wakeA(t)

	st := k.finishAttempt2(t)
	assert.Equal(t, 2, st.Attempt)
	var output string
	require.NoError(t, s.db.Pool().QueryRow(t.Context(), `SELECT coalesce(output::text, '') FROM step WHERE id = $1`, st.ID).Scan(&output))
	assert.JSONEq(t, `{"attempt":2}`, output, "the step's output is attempt 2's")
	k.rec.requireNoLeftovers(5 * time.Second)
}

// stepStderr is what an attempt of a step printed on stderr.
func (s *stack) stepStderr(stepID string, attempt int) string {
	s.t.Helper()
	var out string
	require.NoError(s.t, s.db.Pool().QueryRow(s.t.Context(), `SELECT coalesce(string_agg(message, E'\n' ORDER BY seq), '')
		FROM log WHERE step_id = $1 AND level = 'error' AND (data->>'attempt')::int = $2`, stepID, attempt).Scan(&out))
	return out
}

// A worker that freezes in the middle of a transaction keeps its locks for
// as long as it is frozen (a partitioned worker keeps them until TCP gives
// up, which can be hours). That must not stop recovery: its session is cut
// off, or the reaper passes over what it cannot lock, and the lost work is
// taken over within a bounded time.
func TestPausedWorkerHoldingTransaction(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	gates := t.TempDir()
	root := flowDir(t, "frozen", rec.flowLine("start")+`case "$MAXQ_COMPLETED_STAGE/$MAXQ_FAILED_STAGE" in
/) `+scheduleLine("s", true, `[{"name":"x","instances":1,"maxRetries":2}]`)+rec.flowLine("scheduled")+
		fmt.Sprintf(`for _ in $(seq 300); do [ -e %s/exit ] && break; sleep 0.05; done
`, gates)+` ;;
*) exit 9 ;;
esac
`+rec.flowLine("end"),
		map[string]string{"x": rec.stepLine("start") + rec.sleepLine("0.5") + rec.stepLine("end")})
	s := newStack(t, root, nil)
	a := s.startWorker("A", nil)
	s.workerID(a)
	runID := s.trigger("frozen")
	require.Eventually(t, func() bool {
		for _, e := range rec.events() {
			if e.What == "scheduled" {
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "flow.sh never scheduled its stage")

	// Catch A inside the transaction that records its flow.sh call: with
	// the call's row share-locked, A locks the run, then waits for the
	// row. Freeze A there, then let the row go: A's transaction holds the
	// run's lock and waits for A.
	ctx := t.Context()
	conn, err := s.db.Pool().Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	var me int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM flow_call WHERE run_id = $1 FOR SHARE`, runID).Scan(&me))
	require.NoError(t, os.WriteFile(filepath.Join(gates, "exit"), nil, 0o644))
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, me) == 1
	}, 20*time.Second, 5*time.Millisecond, "worker A never tried to record its flow.sh call")
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
	frozen := time.Now()
	require.NoError(t, tx.Rollback(ctx))

	// A's lease expires; B's reaper takes A's flow.sh call and step; B
	// calls flow.sh again and runs the step. A lease TTL of 2 s.
	b := s.startWorker("B", nil)
	s.workerID(b)
	if !assertEventually(30*time.Second, func() bool {
		return s.count(`SELECT count(*) FROM run WHERE id = $1 AND status = 'completed'`, runID) == 1
	}) {
		t.Fatalf("run not completed %s after its worker froze inside a transaction; steps %+v; flow calls %+v; sessions:\n%s",
			time.Since(frozen).Round(time.Second), s.steps(runID), s.flowCalls(runID), s.dbActivity())
	}
	t.Logf("run completed %s after worker A froze", time.Since(frozen).Round(time.Millisecond))
	st := s.steps(runID)[0]
	require.Equal(t, "completed", st.Status)
	require.True(t, ended(rec.events())[st.ID][st.Attempt])
	requireSerialCalls(t, s.flowCalls(runID))
	s.requireNoDuplicates()
	rec.requireNoLeftovers(5 * time.Second)
}
