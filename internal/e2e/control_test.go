package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/store"
	"github.com/maxq-dev/maxq/internal/worker"
)

// unknownRun is a well-formed run id no run has.
const unknownRun = "0190a3c0-0000-7000-8000-000000000000"

// flowCalls counts the calls of flow.sh a recorder saw (rec.sh("flow")).
func flowCalls(rec *recorder) int {
	n := 0
	for _, e := range rec.events() {
		if e.What == "flow" {
			n++
		}
	}
	return n
}

// startCount counts the attempts of step name a recorder saw (rec.sh("start")).
func startCount(rec *recorder, name string) int {
	n := 0
	for _, e := range rec.events() {
		if e.What == "start" && e.Name == name {
			n++
		}
	}
	return n
}

// requireErrorCode asserts an error answer of the API with code.
func requireErrorCode(t *testing.T, s *stack, method, path string, status int, code string) {
	t.Helper()
	var body struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	require.Equal(t, status, s.call(method, path, nil, &body), "%s %s", method, path)
	require.Equal(t, code, body.Code)
	require.NotEmpty(t, body.Error)
}

// byStatus counts steps by status.
func byStatus(steps []Step) map[string]int {
	out := map[string]int{}
	for _, st := range steps {
		out[st.Status]++
	}
	return out
}

func stageStatuses(run Run) map[string]string {
	out := map[string]string{}
	for _, g := range run.Stages {
		out[g.Name] = g.Status
	}
	return out
}

// isNull reports whether a JSON field was null or absent.
func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// readPGID reads the process group id a step script wrote.
func readPGID(t *testing.T, path string) (int, bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil || !bytes.HasSuffix(data, []byte("\n")) {
		return 0, false
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	return pgid, true
}

// Cancelling a run stops its scripts at once — every process of every
// step's group — and ends the run, its stage and its steps as cancelled;
// flow.sh is not called back for the cancelled stage.
func TestCancelStopsScripts(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "stoppable", rec.sh("flow")+`[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || `+
		scheduleSh("hold", false, `[{"name":"sleeper","instances":4,"maxRetries":0}]`),
		map[string]string{"sleeper": `echo $$ > ` + rec.dir + `/pgid-$MAXQ_STEP_SEQUENCE
sleep 60 &
sleep 60
`})
	writeExe(t, filepath.Join(root, "quick", "flow.sh"), "exit 0\n")
	// Another run's step runs on the same worker throughout: the cancel
	// stops the cancelled run's scripts only.
	writeExe(t, filepath.Join(root, "other", "flow.sh"), `[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || `+
		scheduleSh("busy", true, `[{"name":"busy","instances":1,"maxRetries":0}]`))
	writeExe(t, filepath.Join(root, "other", "steps", "busy", "step.sh"), rec.sh("start")+
		`while [ ! -f `+rec.dir+`/release ]; do sleep 0.05; done
`)
	s := newStack(t, root, options{})
	other := s.trigger("other", nil)
	require.Eventually(t, func() bool { return startCount(rec, "busy") == 1 }, 20*time.Second, 20*time.Millisecond)
	id := s.trigger("stoppable", nil)

	pgids := map[int]int{} // sequence → process group
	require.Eventually(t, func() bool {
		running := 0
		for _, st := range s.steps(id) {
			if st.Status == "running" {
				running++
			}
		}
		for seq := range 4 {
			if pgid, ok := readPGID(t, filepath.Join(rec.dir, "pgid-"+strconv.Itoa(seq))); ok {
				pgids[seq] = pgid
			}
		}
		return running == 4 && len(pgids) == 4
	}, 20*time.Second, 20*time.Millisecond, "the 4 sleepers start")
	for _, pgid := range pgids {
		require.NoError(t, syscall.Kill(-pgid, 0), "process group %d is alive before the cancel", pgid)
	}

	var run Run
	require.Equal(t, 200, s.call("POST", "/runs/"+id+"/cancel", nil, &run))
	require.Equal(t, "cancelled", run.Status)
	require.Equal(t, id, run.ID)
	alive := func() []int {
		var out []int
		for _, pgid := range pgids {
			if syscall.Kill(-pgid, 0) != syscall.ESRCH {
				out = append(out, pgid)
			}
		}
		return out
	}
	deadline := time.Now().Add(3 * time.Second)
	for left := alive(); len(left) > 0; left = alive() {
		if time.Now().After(deadline) {
			t.Fatalf("process groups %v of the sleepers are still alive 3 s after the cancel", left)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Give a wrong callback time to happen: the worker saw the killed
	// scripts exit, and a stage end would have queued flow.sh by now.
	time.Sleep(1500 * time.Millisecond)
	run = s.wait(id, time.Second)
	require.Equal(t, "cancelled", run.Status)
	var runErr map[string]any
	require.NoError(t, json.Unmarshal(run.Error, &runErr))
	require.Equal(t, "cancelled", runErr["reason"])
	require.Equal(t, map[string]string{"hold": "cancelled"}, stageStatuses(run))
	steps := s.steps(id)
	require.Len(t, steps, 4)
	for _, st := range steps {
		require.Equal(t, "cancelled", st.Status, "sleeper[%d]", st.Sequence)
		var stepErr map[string]any
		require.NoError(t, json.Unmarshal(st.Error, &stepErr))
		require.Equal(t, "cancelled", stepErr["reason"], "sleeper[%d]: %s", st.Sequence, st.Error)
	}
	require.Equal(t, 1, flowCalls(rec), "flow.sh is not called back after a cancel")
	require.Equal(t, "running", s.steps(other)[0].Status, "the other run's step goes on")
	require.NoError(t, os.WriteFile(filepath.Join(rec.dir, "release"), nil, 0o644))
	require.Equal(t, "completed", s.wait(other, 30*time.Second).Status)

	t.Run("Idempotent", func(t *testing.T) {
		var again Run
		require.Equal(t, 200, s.call("POST", "/runs/"+id+"/cancel", nil, &again))
		require.Equal(t, "cancelled", again.Status)
		require.JSONEq(t, string(run.Error), string(again.Error), "a second cancel changes nothing")
	})
	t.Run("CompletedRun", func(t *testing.T) {
		done := s.trigger("quick", nil)
		require.Equal(t, "completed", s.wait(done, 30*time.Second).Status)
		requireErrorCode(t, s, "POST", "/runs/"+done+"/cancel", 409, "CONFLICT")
		require.Equal(t, "completed", s.wait(done, time.Second).Status)
	})
	t.Run("UnknownRun", func(t *testing.T) {
		requireErrorCode(t, s, "POST", "/runs/"+unknownRun+"/cancel", 404, "NOT_FOUND")
		requireErrorCode(t, s, "POST", "/runs/not-a-run-id/cancel", 404, "NOT_FOUND")
	})
}

// A run whose stage failed is retried once the cause is fixed: the failed
// step and its dependency_failed dependents run again with fresh retry
// counts, the step that had completed does not, and flow.sh is called back
// for the stage as if it had succeeded the first time.
func TestRetryFailedRun(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "mend", rec.sh("flow")+`echo "completed=$MAXQ_COMPLETED_STAGE failed=$MAXQ_FAILED_STAGE" >> `+rec.dir+`/calls
case "$MAXQ_COMPLETED_STAGE/$MAXQ_FAILED_STAGE" in
/) `+scheduleSh("one", false, `[{"name":"fragile","instances":1,"maxRetries":1},{"name":"after","dependsOn":["fragile"],"instances":2,"maxRetries":0},{"name":"steady","instances":1,"maxRetries":0}]`)+` ;;
one/) `+scheduleSh("two", true, `[{"name":"last","instances":1,"maxRetries":0}]`)+` ;;
*/one) echo "stage one failed" >&2; exit 1 ;;
esac
`, map[string]string{
		"fragile": rec.sh("start") + `echo "$MAXQ_STEP_ATTEMPT" >> ` + rec.dir + `/attempts
[ -f ` + rec.dir + `/fixed ] || { echo "not fixed yet" >&2; exit 2; }
`,
		"after":  rec.sh("start"),
		"steady": rec.sh("start"),
		"last":   rec.sh("start"),
	})
	waiter := filepath.Join(root, "waiter")
	writeExe(t, filepath.Join(waiter, "flow.sh"), `[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || `+
		scheduleSh("wait", true, `[{"name":"hold","instances":1,"maxRetries":0}]`))
	writeExe(t, filepath.Join(waiter, "steps", "hold", "step.sh"), rec.sh("start")+
		`while [ ! -f `+rec.dir+`/release ]; do sleep 0.05; done
`)
	s := newStack(t, root, options{})
	id := s.trigger("mend", nil)
	run := s.wait(id, 30*time.Second)
	require.Equal(t, "failed", run.Status)
	var runErr map[string]any
	require.NoError(t, json.Unmarshal(run.Error, &runErr))
	require.Equal(t, "flow_failed", runErr["reason"])
	require.Equal(t, "one", runErr["failedStage"])
	require.Equal(t, map[string]string{"one": "failed"}, stageStatuses(run))
	failed := map[string][]Step{}
	for _, st := range s.steps(id) {
		failed[st.Name] = append(failed[st.Name], st)
	}
	require.Equal(t, "failed", failed["fragile"][0].Status)
	require.Equal(t, 1, failed["fragile"][0].RetryCount)
	require.Len(t, failed["after"], 2)
	for _, st := range failed["after"] {
		require.Equal(t, "failed", st.Status)
		require.JSONEq(t, `{"reason":"dependency_failed","failed_step":"fragile"}`, string(st.Error))
	}
	require.Equal(t, "completed", failed["steady"][0].Status)

	// Fix the cause, then retry.
	require.NoError(t, os.WriteFile(filepath.Join(rec.dir, "fixed"), nil, 0o644))
	var retried Run
	require.Equal(t, 200, s.call("POST", "/runs/"+id+"/retry", nil, &retried))
	require.Equal(t, "running", retried.Status)
	require.True(t, isNull(retried.Error), "a retried run carries no error: %s", retried.Error)
	run = s.wait(id, 30*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	require.Equal(t, map[string]string{"one": "completed", "two": "completed"}, stageStatuses(run))

	steps := map[string][]Step{}
	for _, st := range s.steps(id) {
		steps[st.Name] = append(steps[st.Name], st)
	}
	require.Equal(t, map[string]int{"completed": 5}, byStatus(s.steps(id)))
	require.Equal(t, "completed", steps["fragile"][0].Status)
	require.Equal(t, 0, steps["fragile"][0].RetryCount, "a retried step starts with a fresh retry count")
	require.True(t, isNull(steps["fragile"][0].Error), "the old failure is gone: %s", steps["fragile"][0].Error)
	for _, st := range steps["after"] {
		require.Equal(t, "completed", st.Status)
		require.Equal(t, 0, st.RetryCount)
	}
	require.Equal(t, "completed", steps["last"][0].Status)
	attempts, err := os.ReadFile(filepath.Join(rec.dir, "attempts"))
	require.NoError(t, err)
	// The retry count is fresh; MAXQ_STEP_ATTEMPT keeps counting (it is also
	// the attempt's fencing token, and its logs are kept per attempt).
	require.Equal(t, "1\n2\n3\n", string(attempts), "two attempts, then one more after the retry")
	require.Equal(t, 1, startCount(rec, "steady"), "a completed step is not run again")
	require.Equal(t, 2, startCount(rec, "after"), "dependents run once, after the retry")
	require.Equal(t, 1, startCount(rec, "last"))
	calls, err := os.ReadFile(filepath.Join(rec.dir, "calls"))
	require.NoError(t, err)
	require.Equal(t, "completed= failed=\ncompleted= failed=one\ncompleted=one failed=\n", string(calls))

	t.Run("CompletedRun", func(t *testing.T) {
		requireErrorCode(t, s, "POST", "/runs/"+id+"/retry", 409, "CONFLICT")
		require.Equal(t, "completed", s.wait(id, time.Second).Status)
	})
	t.Run("UnknownRun", func(t *testing.T) {
		requireErrorCode(t, s, "POST", "/runs/"+unknownRun+"/retry", 404, "NOT_FOUND")
	})
	t.Run("RunningAndCancelledRuns", func(t *testing.T) {
		busy := s.trigger("waiter", nil)
		stopped := s.trigger("waiter", nil)
		holding := func(runID string) func() bool {
			return func() bool {
				st := s.steps(runID)
				return len(st) == 1 && st[0].Status == "running"
			}
		}
		require.Eventually(t, holding(busy), 20*time.Second, 20*time.Millisecond)
		require.Eventually(t, holding(stopped), 20*time.Second, 20*time.Millisecond)
		// A step is running from its claim; its script starts a moment later.
		require.Eventually(t, func() bool { return startCount(rec, "hold") == 2 }, 20*time.Second, 20*time.Millisecond)
		before := s.steps(busy)

		var r Run
		require.Equal(t, 200, s.call("POST", "/runs/"+busy+"/retry", nil, &r))
		require.Equal(t, "running", r.Status, "retrying a running run changes nothing")
		require.Equal(t, before, s.steps(busy))

		require.Equal(t, 200, s.call("POST", "/runs/"+stopped+"/cancel", nil, &r))
		require.Equal(t, "cancelled", r.Status)
		requireErrorCode(t, s, "POST", "/runs/"+stopped+"/retry", 409, "CONFLICT")

		require.NoError(t, os.WriteFile(filepath.Join(rec.dir, "release"), nil, 0o644))
		require.Equal(t, "completed", s.wait(busy, 30*time.Second).Status)
		require.Equal(t, "cancelled", s.wait(stopped, time.Second).Status)
		require.Equal(t, 2, startCount(rec, "hold"), "the running step was not started again")
	})
}

// A run that failed because flow.sh itself failed, before any stage, is
// retried by calling flow.sh again.
func TestRetryFailedFlowCall(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "early", rec.sh("flow")+`echo "completed=$MAXQ_COMPLETED_STAGE" >> `+rec.dir+`/calls
[ -f `+rec.dir+`/fixed ] || { echo "no config yet" >&2; exit 3; }
[ -n "$MAXQ_COMPLETED_STAGE" ] || `+scheduleSh("only", true, `[{"name":"work","instances":1,"maxRetries":0}]`),
		map[string]string{"work": rec.sh("start")})
	s := newStack(t, root, options{})
	id := s.trigger("early", nil)
	run := s.wait(id, 30*time.Second)
	require.Equal(t, "failed", run.Status)
	var runErr map[string]any
	require.NoError(t, json.Unmarshal(run.Error, &runErr))
	require.Equal(t, "flow_failed", runErr["reason"])
	require.Equal(t, 3.0, runErr["exitCode"])
	require.Empty(t, s.steps(id))

	require.NoError(t, os.WriteFile(filepath.Join(rec.dir, "fixed"), nil, 0o644))
	var retried Run
	require.Equal(t, 200, s.call("POST", "/runs/"+id+"/retry", nil, &retried))
	require.Equal(t, "running", retried.Status)
	run = s.wait(id, 30*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	require.Equal(t, map[string]string{"only": "completed"}, stageStatuses(run))
	require.Equal(t, map[string]int{"completed": 1}, byStatus(s.steps(id)))
	calls, err := os.ReadFile(filepath.Join(rec.dir, "calls"))
	require.NoError(t, err)
	require.Equal(t, "completed=\ncompleted=\n", string(calls),
		"the failed first call and its retry; none after the final stage")
}

// tokenAPIToken is the API token of TestScriptsGetRunToken.
const tokenAPIToken = "test-api-token-0123456789"

// tokenStack starts an API that requires tokens and one worker, wired as
// app.RunLocal wires them. newStack cannot: it builds its API without
// Tokens, so c.APIToken reaches only the worker. It returns the API's URL.
func tokenStack(t *testing.T, root string) string {
	t.Helper()
	cfg := config.Defaults()
	cfg.FlowsRoot = root
	cfg.APIToken = tokenAPIToken
	st := store.New(pgtest.Pool(t))
	catalog := flow.Catalog{Root: root}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	apiURL := app.LocalAPIURL(ln.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	handler := api.New(api.Config{Store: st, Catalog: catalog, Tokens: auth.New(cfg.APIToken)})
	go func() { done <- app.Serve(ctx, ln, handler, 5*time.Second) }()
	w := worker.New(app.WorkerConfig(cfg, st, catalog, nil, apiURL))
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, <-done)
	})
	return apiURL
}

// callAs sends a request with a bearer token and decodes the answer into
// out (if not nil).
func callAs(t *testing.T, apiURL, token, method, path string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, apiURL+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(raw, out), "body: %s", raw)
	}
	return res.StatusCode
}

// With MAXQ_API_TOKEN set, scripts call the API with their MAXQ_TOKEN: it
// works on their own run, is refused on another run, and is not the API
// token.
func TestScriptsGetRunToken(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	d := rec.dir
	root := flowDir(t, "tokens", `env > `+d+`/flow-env
[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] && exit 0
other=$(cat `+d+`/other)
curl -fsS -H "Authorization: Bearer $MAXQ_TOKEN" -X POST "$MAXQ_API/runs/$MAXQ_RUN_ID/steps" \
  -d '{"stage":"only","final":true,"steps":[{"name":"caller","instances":1,"maxRetries":0,"env":{"OTHER_RUN":"'"$other"'"}}]}' >/dev/null
`, map[string]string{"caller": `env > ` + d + `/step-env
auth="Authorization: Bearer $MAXQ_TOKEN"
curl -fsS -H "$auth" -X POST "$MAXQ_API/runs/$MAXQ_RUN_ID/artifacts" \
  -d '{"stepId":"'"$MAXQ_STEP_ID"'","stepName":"'"$MAXQ_STEP_NAME"'","sequence":'"$MAXQ_STEP_SEQUENCE"',"name":"proof","value":{"ok":true}}' >/dev/null || exit 10
curl -fsS -H "$auth" "$MAXQ_API/runs/$MAXQ_RUN_ID" > ` + d + `/own.json || exit 11
curl -fsS -H "$auth" "$MAXQ_API/steps/$MAXQ_STEP_ID" >/dev/null || exit 12
code=$(curl -sS -o ` + d + `/other.json -w '%{http_code}' -H "$auth" "$MAXQ_API/runs/$OTHER_RUN")
[ "$code" = 403 ] || exit 13
code=$(curl -sS -o /dev/null -w '%{http_code}' "$MAXQ_API/runs/$MAXQ_RUN_ID")
[ "$code" = 401 ] || exit 14
`})
	writeExe(t, filepath.Join(root, "idle", "flow.sh"), "exit 0\n")
	apiURL := tokenStack(t, root)

	var run Run
	require.Equal(t, 401, callAs(t, apiURL, "", "POST", "/flows/idle/runs", map[string]any{}, nil))
	require.Equal(t, 201, callAs(t, apiURL, tokenAPIToken, "POST", "/flows/idle/runs", map[string]any{}, &run))
	other := run.ID
	require.NoError(t, os.WriteFile(filepath.Join(d, "other"), []byte(other), 0o644))
	require.Equal(t, 201, callAs(t, apiURL, tokenAPIToken, "POST", "/flows/tokens/runs", map[string]any{}, &run))
	id := run.ID

	deadline := time.Now().Add(30 * time.Second)
	for run.Status != "completed" && run.Status != "failed" && run.Status != "cancelled" {
		require.True(t, time.Now().Before(deadline), "run %s still %s", id, run.Status)
		time.Sleep(20 * time.Millisecond)
		require.Equal(t, 200, callAs(t, apiURL, tokenAPIToken, "GET", "/runs/"+id, nil, &run))
	}
	var steps struct{ Steps []Step }
	require.Equal(t, 200, callAs(t, apiURL, tokenAPIToken, "GET", "/runs/"+id+"/steps", nil, &steps))
	require.Len(t, steps.Steps, 1)
	require.Equal(t, "completed", run.Status, "run error: %s; step error: %s", run.Error, steps.Steps[0].Error)

	// The step stored its artifact, read its own run, and was refused the
	// other's.
	var arts struct {
		Artifacts []struct {
			FullPath string `json:"fullPath"`
		}
	}
	require.Equal(t, 200, callAs(t, apiURL, tokenAPIToken, "GET", "/runs/"+id+"/artifacts", nil, &arts))
	require.Len(t, arts.Artifacts, 1)
	require.Equal(t, "caller[0]/proof", arts.Artifacts[0].FullPath)
	own, err := os.ReadFile(filepath.Join(d, "own.json"))
	require.NoError(t, err)
	var ownRun Run
	require.NoError(t, json.Unmarshal(own, &ownRun))
	require.Equal(t, id, ownRun.ID)
	refused, err := os.ReadFile(filepath.Join(d, "other.json"))
	require.NoError(t, err)
	require.Contains(t, string(refused), `"code":"FORBIDDEN"`)

	// Each script had its run's token, never the API token.
	want := auth.New(tokenAPIToken).RunToken(id)
	for _, name := range []string{"flow-env", "step-env"} {
		env, err := os.ReadFile(filepath.Join(d, name))
		require.NoError(t, err)
		require.Contains(t, strings.Split(string(env), "\n"), "MAXQ_TOKEN="+want, "%s holds the run token", name)
		require.NotContains(t, string(env), tokenAPIToken, "%s holds the API token", name)
	}
}
