//go:build linux

// Package faults puts MaxQ's recovery to the test with real worker
// processes (cmd/worker): killed with SIGKILL in the middle of steps and
// flow calls, frozen with SIGSTOP for longer than their lease, stopped with
// SIGTERM, killed and replaced over and over. Each test checks what a user
// would see afterwards: every run completed, every completed step ran to
// completion and is recorded once, no artifact twice, nothing of a
// superseded attempt counted, and no process of a script left behind.
// Linux only: it reads /proc and relies on the parent-death signal.
package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/buildtest"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// stack is an in-process API on a database of the test's own, and worker
// processes started and stopped by the test.
type stack struct {
	t      *testing.T
	root   string // MAXQ_FLOWS_ROOT
	dbURL  string
	API    string            // base URL, …/api/v1
	db     *store.Store      // for the test's queries; the API has its own
	env    map[string]string // every worker's environment, before its own
	logDir string

	mu      sync.Mutex
	workers []*workerProc
}

// newStack serves the API for the flows under root. Workers get env (on top
// of what every worker needs) when started.
func newStack(t *testing.T, root string, env map[string]string) *stack {
	t.Helper()
	dbURL := pgtest.DatabaseURL(t)
	pool, err := app.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // before the database is dropped
	st := store.New(pool)
	// The test's own queries use a pool of their own: an API whose pool
	// is exhausted must fail the test, not hang it.
	checkPool, err := app.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(checkPool.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- app.Serve(ctx, ln, api.New(api.Config{Store: st, Catalog: flow.Catalog{Root: root}}), 5*time.Second)
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-served)
	})
	s := &stack{t: t, root: root, dbURL: dbURL, API: app.LocalAPIURL(ln.Addr()), db: store.New(checkPool), logDir: t.TempDir(),
		env: map[string]string{
			"MAXQ_LEASE_TTL":        "2",
			"MAXQ_REAPER_INTERVAL":  "1",
			"MAXQ_POLL_INTERVAL_MS": "500",
			"MAXQ_LOG_LEVEL":        "info",
		}}
	for k, v := range env {
		s.env[k] = v
	}
	// Registered after the API's: runs before it, so workers stop first.
	t.Cleanup(s.stopWorkers)
	return s
}

// workerProc is a cmd/worker process.
type workerProc struct {
	Name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // how it exited, once done is closed
}

// startWorker starts a worker process with the stack's environment plus
// env. Its output goes to a file printed if the test fails.
func (s *stack) startWorker(name string, env map[string]string) *workerProc {
	s.t.Helper()
	bin := buildtest.Binary(s.t, "./cmd/worker", "maxq-worker")
	vars := map[string]string{
		"PATH":              os.Getenv("PATH"),
		"HOME":              os.Getenv("HOME"),
		"MAXQ_DATABASE_URL": s.dbURL,
		"MAXQ_FLOWS_ROOT":   s.root,
		"MAXQ_API_URL":      s.API,
	}
	for k, v := range s.env {
		vars[k] = v
	}
	for k, v := range env {
		vars[k] = v
	}
	cmd := exec.Command(bin)
	// If the test binary dies (a panic, a -timeout), its workers die too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logPath := filepath.Join(s.logDir, name+".log")
	f, err := os.Create(logPath)
	require.NoError(s.t, err)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(s.t, cmd.Start())
	p := &workerProc{Name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	s.mu.Lock()
	s.workers = append(s.workers, p)
	s.mu.Unlock()
	return p
}

// stopWorkers ends the workers still running — SIGTERM, then SIGKILL — and
// prints every worker's output if the test failed.
func (s *stack) stopWorkers() {
	s.mu.Lock()
	workers := s.workers
	s.mu.Unlock()
	for _, p := range workers {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range workers {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.kill(s.t)
		}
	}
	if !s.t.Failed() {
		return
	}
	for _, p := range workers {
		data, _ := os.ReadFile(p.log)
		s.t.Logf("--- worker %s (pid %d, %v):\n%s", p.Name, p.cmd.Process.Pid, p.err, tail(data, 150))
	}
}

// tail is the last n lines of data.
func tail(data []byte, n int) []byte {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > n {
		lines = append([][]byte{[]byte(fmt.Sprintf("[… %d lines …]\n", len(lines)-n))}, lines[len(lines)-n:]...)
	}
	return bytes.Join(lines, nil)
}

func (p *workerProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (p *workerProc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("worker %s did not die of SIGKILL", p.Name)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *workerProc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("worker %s still running after %s", p.Name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// id is the worker's id in the database, waiting for it to register.
func (s *stack) workerID(p *workerProc) string {
	s.t.Helper()
	var id string
	require.Eventually(s.t, func() bool {
		err := s.db.Pool().QueryRow(s.t.Context(), `SELECT id FROM worker WHERE pid = $1`, p.cmd.Process.Pid).Scan(&id)
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "worker %s never registered", p.Name)
	return id
}

// httpClient bounds every request, so a stuck API fails the test quickly.
var httpClient = &http.Client{Timeout: 15 * time.Second}

// call sends a request and decodes the JSON answer into out (if not nil).
func (s *stack) call(method, path string, body any, out any) int {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(s.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.API+path, rd)
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	res, err := httpClient.Do(req)
	require.NoError(s.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(s.t, err)
	if out != nil {
		require.NoError(s.t, json.Unmarshal(raw, out), "body: %s", raw)
	}
	return res.StatusCode
}

// Run is the run object of the API.
type Run struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Error  json.RawMessage `json:"error"`
}

// trigger starts a run of flow and returns its id.
func (s *stack) trigger(flow string) string {
	s.t.Helper()
	var run Run
	require.Equal(s.t, http.StatusCreated, s.call("POST", "/flows/"+flow+"/runs", map[string]any{"input": nil}, &run))
	return run.ID
}

// wait polls a run until it is terminal, or fails the test after timeout.
func (s *stack) wait(runID string, timeout time.Duration) Run {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var run Run
		require.Equal(s.t, http.StatusOK, s.call("GET", "/runs/"+runID, nil, &run))
		switch run.Status {
		case "completed", "failed", "cancelled":
			return run
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("run %s still %s after %s", runID, run.Status, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// count runs a query returning one number.
func (s *stack) count(sql string, args ...any) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.db.Pool().QueryRow(s.t.Context(), sql, args...).Scan(&n))
	return n
}

// stepRow is what the database holds of a step.
type stepRow struct {
	ID         string
	RunID      string
	Name       string
	Sequence   int
	Status     string
	Attempt    int
	RetryCount int
	WorkerID   string
}

// steps lists the steps of every run, or of the runs given.
func (s *stack) steps(runIDs ...string) []stepRow {
	s.t.Helper()
	rows, err := s.db.Pool().Query(s.t.Context(), `SELECT id, run_id, name, sequence, status, attempt, retry_count,
		coalesce(worker_id, '') FROM step WHERE cardinality($1::text[]) = 0 OR run_id = ANY($1) ORDER BY run_id, name, sequence`,
		runIDs)
	require.NoError(s.t, err)
	defer rows.Close()
	var out []stepRow
	for rows.Next() {
		var r stepRow
		require.NoError(s.t, rows.Scan(&r.ID, &r.RunID, &r.Name, &r.Sequence, &r.Status, &r.Attempt, &r.RetryCount, &r.WorkerID))
		out = append(out, r)
	}
	require.NoError(s.t, rows.Err())
	return out
}

// requireNoDuplicates checks what the schema should make impossible: a step
// instance or an artifact recorded twice.
func (s *stack) requireNoDuplicates() {
	s.t.Helper()
	require.Zero(s.t, s.count(`SELECT count(*) FROM (SELECT run_id, name, sequence FROM step
		GROUP BY run_id, name, sequence HAVING count(*) > 1) d`), "a step instance recorded twice")
	require.Zero(s.t, s.count(`SELECT count(*) FROM (SELECT run_id, full_path FROM artifact
		GROUP BY run_id, full_path HAVING count(*) > 1) d`), "an artifact stored twice")
}

// recorder is a file scripts append what they did to, and a marker that
// names this test's processes.
type recorder struct {
	t      *testing.T
	file   string
	Marker string // in the command line of every process the scripts start
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	return &recorder{t: t, file: filepath.Join(t.TempDir(), "events"),
		Marker: fmt.Sprintf("maxqtest-%d-%08x", os.Getpid(), rand.Uint32())}
}

// stepLine is a bash line that records what the running step did.
func (r *recorder) stepLine(what string) string {
	return fmt.Sprintf(`echo "%s $MAXQ_STEP_ID $MAXQ_STEP_ATTEMPT $(date +%%s%%N)" >> %s`+"\n", what, r.file)
}

// flowLine is a bash line that records what the running flow.sh did; its
// id is the run's and its attempt 0 (flow.sh is not told its attempt).
func (r *recorder) flowLine(what string) string {
	return fmt.Sprintf(`echo "%s $MAXQ_RUN_ID/${MAXQ_COMPLETED_STAGE:--} 0 $(date +%%s%%N)" >> %s`+"\n", what, r.file)
}

// sleepLine is a bash line that sleeps in a child process whose command
// line carries the marker, so a test can tell whether it outlived its
// script.
func (r *recorder) sleepLine(seconds string) string {
	return fmt.Sprintf("( exec -a %s-$MAXQ_STEP_ATTEMPT sleep %s )\n", r.Marker, seconds)
}

// event is one line of the recorder: "<what> <id> <attempt> <unix nanos>".
type event struct {
	What    string
	ID      string
	Attempt int
	At      int64
}

func (r *recorder) events() []event {
	r.t.Helper()
	f, err := os.Open(r.file)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(r.t, err)
	defer f.Close()
	var out []event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		require.Len(r.t, fields, 4, "event line %q", sc.Text())
		attempt, err := strconv.Atoi(fields[2])
		require.NoError(r.t, err, "event line %q", sc.Text())
		at, err := strconv.ParseInt(fields[3], 10, 64)
		require.NoError(r.t, err, "event line %q", sc.Text())
		out = append(out, event{fields[0], fields[1], attempt, at})
	}
	require.NoError(r.t, sc.Err())
	return out
}

// ended is the set of (id, attempt) with an "end" event, and of ids.
func ended(events []event) (attempts map[string]map[int]bool) {
	attempts = map[string]map[int]bool{}
	for _, e := range events {
		if e.What != "end" {
			continue
		}
		if attempts[e.ID] == nil {
			attempts[e.ID] = map[int]bool{}
		}
		attempts[e.ID][e.Attempt] = true
	}
	return attempts
}

// requireNoLeftovers waits a few seconds for the processes carrying the
// recorder's marker to end: orphans of a killed worker's scripts end when
// their sleep does; nothing else may remain.
func (r *recorder) requireNoLeftovers(within time.Duration) {
	r.t.Helper()
	var left []string
	ok := assertEventually(within, func() bool {
		left = processesWith(r.Marker)
		return len(left) == 0
	})
	require.True(r.t, ok, "processes left behind:\n%s", strings.Join(left, "\n"))
}

// processesWith lists the live processes whose command line contains s.
func processesWith(s string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		out = append(out, fmt.Sprintf("pid %d: %s", pid, bytes.ReplaceAll(bytes.TrimRight(cmdline, "\x00"), []byte{0}, []byte{' '})))
	}
	return out
}

// assertEventually polls cond until it holds or within has passed.
func assertEventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// flowDir writes a flow under a fresh FLOWS_ROOT: flow.sh and the given
// steps, each a bash script body.
func flowDir(t *testing.T, name, flowScript string, steps map[string]string) string {
	t.Helper()
	root := t.TempDir()
	writeExe(t, filepath.Join(root, name, "flow.sh"), flowScript)
	for step, body := range steps {
		writeExe(t, filepath.Join(root, name, "steps", step, "step.sh"), body)
	}
	return root
}

func writeExe(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/bash\n"+body), 0o755))
}

// scheduleLine is a bash line that schedules a stage from flow.sh, and
// fails the call if it cannot.
func scheduleLine(stage string, final bool, steps string) string {
	return fmt.Sprintf(`curl -fsS --max-time 15 -X POST "$MAXQ_API/runs/$MAXQ_RUN_ID/steps" -d '{"stage":"%s","final":%t,"steps":%s}' >/dev/null || exit 1`+"\n",
		stage, final, steps)
}

// artifactLine is a bash line that stores an artifact "result" holding the
// step's attempt, and fails the step if it cannot. It passes the attempt, as
// examples/lib/maxq.sh and the maxq CLI do, so a superseded attempt is
// refused.
func artifactLine() string {
	return `curl -fsS --max-time 15 -X POST "$MAXQ_API/runs/$MAXQ_RUN_ID/artifacts" -d '{"stepId":"'$MAXQ_STEP_ID'","stepName":"'$MAXQ_STEP_NAME'","sequence":'$MAXQ_STEP_SEQUENCE',"name":"result","value":{"attempt":'$MAXQ_STEP_ATTEMPT'},"attempt":'$MAXQ_STEP_ATTEMPT'}' >/dev/null || exit 1` + "\n"
}

// requireArtifactsOfFinalAttempt checks that each step of the runs has one
// artifact "result", stored by the attempt that completed it.
func (s *stack) requireArtifactsOfFinalAttempt(steps []stepRow) {
	s.t.Helper()
	for _, st := range steps {
		var n, attempt int
		require.NoError(s.t, s.db.Pool().QueryRow(s.t.Context(), `SELECT count(*), coalesce(max((value->>'attempt')::int), 0)
			FROM artifact WHERE step_id = $1`, st.ID).Scan(&n, &attempt))
		require.Equal(s.t, 1, n, "artifacts of step %s[%d]", st.Name, st.Sequence)
		require.Equal(s.t, st.Attempt, attempt, "artifact of step %s[%d] is from attempt %d, the step completed on attempt %d",
			st.Name, st.Sequence, attempt, st.Attempt)
	}
}

// dbActivity describes the test database's sessions and who waits for
// whom, for the message of a test that finds the database stuck.
func (s *stack) dbActivity() string {
	s.t.Helper()
	rows, err := s.db.Pool().Query(s.t.Context(), `SELECT pid, coalesce(state, ''), coalesce(wait_event_type || ':' || wait_event, ''),
		coalesce(pg_blocking_pids(pid)::text, ''), now() - xact_start, left(query, 200)
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY pid`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var pid int
		var state, wait, blockers, query string
		var inTx *time.Duration
		if err := rows.Scan(&pid, &state, &wait, &blockers, &inTx, &query); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "pid %d %s wait=%s blocked_by=%s in_tx=%v: %s\n", pid, state, wait, blockers, inTx, strings.Join(strings.Fields(query), " "))
	}
	return b.String()
}
