package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/maxq-dev/maxq/internal/config"
	"time"

	"github.com/stretchr/testify/require"
)

// event is one line a test script appended to $OUT/events:
// "<what> <name> <sequence> <unix nanos>".
type event struct {
	What, Name string
	Seq        int
	At         int64
}

// recorder is a directory scripts write what they did into.
type recorder struct {
	t   *testing.T
	dir string
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	return &recorder{t: t, dir: t.TempDir()}
}

// sh is a bash line that records what for the running script.
func (r *recorder) sh(what string) string {
	return fmt.Sprintf(`echo "%s ${MAXQ_STEP_NAME:-flow} ${MAXQ_STEP_SEQUENCE:-0} $(date +%%s%%N)" >> %s/events`+"\n", what, r.dir)
}

func (r *recorder) events() []event {
	r.t.Helper()
	data, err := os.ReadFile(filepath.Join(r.dir, "events"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(r.t, err)
	var out []event
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		require.Len(r.t, f, 4, "event line %q", line)
		seq, _ := strconv.Atoi(f[2])
		at, _ := strconv.ParseInt(f[3], 10, 64)
		out = append(out, event{f[0], f[1], seq, at})
	}
	return out
}

// intervals pairs start and end events per (name, seq, attempt order).
func intervals(events []event, name string) [][2]int64 {
	starts := map[int][]int64{}
	var out [][2]int64
	for _, e := range events {
		if e.Name != name {
			continue
		}
		switch e.What {
		case "start":
			starts[e.Seq] = append(starts[e.Seq], e.At)
		case "end":
			s := starts[e.Seq]
			out = append(out, [2]int64{s[0], e.At})
			starts[e.Seq] = s[1:]
		}
	}
	return out
}

// maxOverlap is the largest number of intervals open at one instant.
func maxOverlap(iv [][2]int64) int {
	type point struct {
		at    int64
		delta int
	}
	var pts []point
	for _, i := range iv {
		pts = append(pts, point{i[0], 1}, point{i[1], -1})
	}
	sort.Slice(pts, func(a, b int) bool {
		if pts[a].at != pts[b].at {
			return pts[a].at < pts[b].at
		}
		return pts[a].delta < pts[b].delta
	})
	cur, best := 0, 0
	for _, p := range pts {
		cur += p.delta
		best = max(best, cur)
	}
	return best
}

// scheduleSh is a bash line that schedules a stage from flow.sh.
func scheduleSh(stage string, final bool, steps string) string {
	return fmt.Sprintf(`curl -fsS -X POST "$MAXQ_API/runs/$MAXQ_RUN_ID/steps" -d '{"stage":"%s","final":%t,"steps":%s}' >/dev/null`+"\n",
		stage, final, steps)
}

func TestScriptEnvironment(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "envflow",
		`env | sort > `+rec.dir+`/flow-env-"${MAXQ_COMPLETED_STAGE:-first}"
if [ -z "$MAXQ_COMPLETED_STAGE" ]; then
`+scheduleSh("only", false, `[{"name":"show","instances":2,"maxRetries":0,"env":{"SOURCE":"reuters","MAXQ_STEP_TIMEOUT":"30"}}]`)+`
fi
`, map[string]string{
			"show": `env | sort > ` + rec.dir + `/step-env-$MAXQ_STEP_SEQUENCE
pwd > ` + rec.dir + `/step-pwd-$MAXQ_STEP_SEQUENCE
cat > ` + rec.dir + `/step-stdin-$MAXQ_STEP_SEQUENCE
touch "$MAXQ_WORK_DIR/scratch" && [ "$TMPDIR" = "$MAXQ_WORK_DIR" ]
`,
		})
	s := newStack(t, root, options{})
	id := s.trigger("envflow", nil)
	run := s.wait(id, 30*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)

	readEnv := func(name string) map[string]string {
		data, err := os.ReadFile(filepath.Join(rec.dir, name))
		require.NoError(t, err)
		env := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			k, v, _ := strings.Cut(line, "=")
			env[k] = v
		}
		return env
	}
	steps := s.steps(id)
	require.Len(t, steps, 2)
	for _, st := range steps {
		env := readEnv(fmt.Sprintf("step-env-%d", st.Sequence))
		require.Equal(t, id, env["MAXQ_RUN_ID"])
		require.Equal(t, st.ID, env["MAXQ_STEP_ID"])
		require.Equal(t, "show", env["MAXQ_STEP_NAME"])
		require.Equal(t, strconv.Itoa(st.Sequence), env["MAXQ_STEP_SEQUENCE"])
		require.Equal(t, "2", env["MAXQ_STEP_INSTANCES"])
		require.Equal(t, "1", env["MAXQ_STEP_ATTEMPT"])
		require.Equal(t, "envflow", env["MAXQ_FLOW_NAME"])
		require.Equal(t, "only", env["MAXQ_STAGE"])
		require.Equal(t, s.API, env["MAXQ_API"])
		require.Equal(t, "reuters", env["SOURCE"])
		require.Equal(t, "30", env["MAXQ_STEP_TIMEOUT"])
		for k := range env {
			require.False(t, strings.Contains(k, "DATABASE"), "the worker's database settings reached a script: %s", k)
		}
		require.NotContains(t, env, "GOFLAGS", "the environment is built, not inherited")
		pwd, err := os.ReadFile(filepath.Join(rec.dir, fmt.Sprintf("step-pwd-%d", st.Sequence)))
		require.NoError(t, err)
		require.Equal(t, filepath.Join(root, "envflow", "steps", "show"), strings.TrimSpace(string(pwd)))
		stdin, err := os.ReadFile(filepath.Join(rec.dir, fmt.Sprintf("step-stdin-%d", st.Sequence)))
		require.NoError(t, err)
		require.Empty(t, stdin)
		require.NotNil(t, st.StartedAt)
		require.NotNil(t, st.DurationMs)
	}
	first := readEnv("flow-env-first")
	require.Equal(t, id, first["MAXQ_RUN_ID"])
	require.Equal(t, "envflow", first["MAXQ_FLOW_NAME"])
	require.Equal(t, s.API, first["MAXQ_API"])
	require.Contains(t, first, "MAXQ_COMPLETED_STAGE")
	require.Empty(t, first["MAXQ_COMPLETED_STAGE"])
	require.Empty(t, first["MAXQ_FAILED_STAGE"])
	second := readEnv("flow-env-only")
	require.Equal(t, "only", second["MAXQ_COMPLETED_STAGE"])
}

// A DAG across stages: steps start only after every instance of what they
// depend on has ended, and independent ones run in parallel.
func TestDAGOrder(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	work := rec.sh("start") + "sleep 0.2\n" + rec.sh("end")
	root := flowDir(t, "dag", `case "$MAXQ_COMPLETED_STAGE" in
"") `+scheduleSh("one", false, `[{"name":"a","instances":3,"maxRetries":0},{"name":"b","instances":1,"maxRetries":0},{"name":"c","dependsOn":["a","b"],"instances":2,"maxRetries":0}]`)+` ;;
one) `+scheduleSh("two", true, `[{"name":"d","dependsOn":["c","a"],"instances":1,"maxRetries":0}]`)+` ;;
esac
`, map[string]string{"a": work, "b": work, "c": work, "d": work})
	s := newStack(t, root, options{})
	run := s.wait(s.trigger("dag", nil), 30*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)

	ev := rec.events()
	a, b, c, d := intervals(ev, "a"), intervals(ev, "b"), intervals(ev, "c"), intervals(ev, "d")
	require.Len(t, a, 3)
	require.Len(t, b, 1)
	require.Len(t, c, 2)
	require.Len(t, d, 1)
	require.Equal(t, 4, maxOverlap(append(append([][2]int64{}, a...), b...)), "a[0..2] and b run at once")
	lastEnd := func(iv [][2]int64) int64 {
		m := int64(0)
		for _, i := range iv {
			m = max(m, i[1])
		}
		return m
	}
	for _, ci := range c {
		require.Greater(t, ci[0], lastEnd(a))
		require.Greater(t, ci[0], lastEnd(b))
	}
	require.Greater(t, d[0][0], lastEnd(c))
}

func TestInstancesOverlap(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "par", `[ -n "$MAXQ_COMPLETED_STAGE" ] || `+scheduleSh("p", true, `[{"name":"w","instances":4,"maxRetries":0}]`),
		map[string]string{"w": rec.sh("start") + "sleep 0.5\n" + rec.sh("end")})
	s := newStack(t, root, options{})
	run := s.wait(s.trigger("par", nil), 30*time.Second)
	require.Equal(t, "completed", run.Status)
	iv := intervals(rec.events(), "w")
	require.Len(t, iv, 4)
	require.Equal(t, 4, maxOverlap(iv), "the 4 instances run at the same time")
}

func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "many", `[ -n "$MAXQ_COMPLETED_STAGE" ] || `+scheduleSh("p", true, `[{"name":"w","instances":12,"maxRetries":0}]`),
		map[string]string{"w": rec.sh("start") + "sleep 0.2\n" + rec.sh("end")})
	s := newStack(t, root, options{MaxSteps: 3})
	run := s.wait(s.trigger("many", nil), 30*time.Second)
	require.Equal(t, "completed", run.Status)
	iv := intervals(rec.events(), "w")
	require.Len(t, iv, 12)
	require.Equal(t, 3, maxOverlap(iv), "MAXQ_MAX_CONCURRENT_STEPS=3 is used and never exceeded")
}

// Dependents are claimed by the worker that records their dependencies'
// results, in the same transaction, while the claim loop fills the same
// slots with other work: the limit still holds.
func TestConcurrencyLimitWithDependents(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	body := rec.sh("start") + "sleep 0.05\n" + rec.sh("end")
	root := flowDir(t, "mixed", `[ -n "$MAXQ_COMPLETED_STAGE" ] || `+scheduleSh("p", true, `[
		{"name":"a","instances":8,"maxRetries":0},
		{"name":"b","instances":8,"dependsOn":["a"],"maxRetries":0},
		{"name":"c","instances":8,"dependsOn":["b"],"maxRetries":0},
		{"name":"z","instances":16,"maxRetries":0}]`),
		map[string]string{"a": body, "b": body, "c": body, "z": body})
	s := newStack(t, root, options{MaxSteps: 3})
	run := s.wait(s.trigger("mixed", nil), 60*time.Second)
	require.Equal(t, "completed", run.Status)
	var all [][2]int64
	for _, name := range []string{"a", "b", "c", "z"} {
		all = append(all, intervals(rec.events(), name)...)
	}
	require.Len(t, all, 40)
	require.Equal(t, 3, maxOverlap(all), "MAXQ_MAX_CONCURRENT_STEPS=3 is used and never exceeded")
}

// Each step of a chain is claimed in the transaction that records its
// dependency's result: its startedAt is that completedAt, to the
// millisecond.
func TestDependentClaimedWithItsDependencysResult(t *testing.T) {
	t.Parallel()
	root := flowDir(t, "chain", `[ -n "$MAXQ_COMPLETED_STAGE" ] || `+scheduleSh("p", true, `[
		{"name":"s1","instances":1,"maxRetries":0},
		{"name":"s2","instances":1,"maxRetries":0,"dependsOn":["s1"]},
		{"name":"s3","instances":1,"maxRetries":0,"dependsOn":["s2"]},
		{"name":"s4","instances":1,"maxRetries":0,"dependsOn":["s3"]}]`),
		map[string]string{"s1": "exit 0\n", "s2": "exit 0\n", "s3": "exit 0\n", "s4": "exit 0\n"})
	s := newStack(t, root, options{})
	id := s.trigger("chain", nil)
	run := s.wait(id, 30*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	byName := map[string]Step{}
	for _, st := range s.steps(id) {
		byName[st.Name] = st
	}
	for i := 2; i <= 4; i++ {
		dep, st := byName[fmt.Sprintf("s%d", i-1)], byName[fmt.Sprintf("s%d", i)]
		require.NotNil(t, dep.CompletedAt)
		require.NotNil(t, st.StartedAt)
		require.Equal(t, *dep.CompletedAt, *st.StartedAt, "%s claimed as %s's result was recorded", st.Name, dep.Name)
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	// flaky fails on its first two attempts and succeeds on the third.
	flaky := rec.sh("start") + `n=$(cat ` + rec.dir + `/count 2>/dev/null || echo 0); echo $((n+1)) > ` + rec.dir + `/count
echo "attempt $MAXQ_STEP_ATTEMPT" >&2
[ "$n" -ge 2 ]
`
	root := flowDir(t, "retry", `[ -n "$MAXQ_COMPLETED_STAGE" ] || `+scheduleSh("r", true, `[{"name":"flaky","instances":1,"maxRetries":2}]`),
		map[string]string{"flaky": flaky})
	s := newStack(t, root, options{})
	id := s.trigger("retry", nil)
	run := s.wait(id, 30*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	steps := s.steps(id)
	require.Len(t, steps, 1)
	require.Equal(t, "completed", steps[0].Status)
	require.Equal(t, 2, steps[0].RetryCount)
	starts := 0
	var at []int64
	for _, e := range rec.events() {
		if e.What == "start" {
			starts++
			at = append(at, e.At)
		}
	}
	require.Equal(t, 3, starts)
	// Exponential backoff: about 1 s, then about 2 s (±20%).
	require.Greater(t, at[1]-at[0], int64(700*time.Millisecond))
	require.Greater(t, at[2]-at[1], int64(1500*time.Millisecond))
}

// A step that exhausts its retries fails its stage: dependents fail without
// running, pending steps are cancelled, and the flow is called back once
// with MAXQ_FAILED_STAGE; flow.sh exiting non-zero then fails the run.
func TestStageFailure(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "fails", `echo "call completed=$MAXQ_COMPLETED_STAGE failed=$MAXQ_FAILED_STAGE" >> `+rec.dir+`/calls
case "$MAXQ_COMPLETED_STAGE/$MAXQ_FAILED_STAGE" in
/) `+scheduleSh("one", false, `[{"name":"ok","instances":1,"maxRetries":0}]`)+` ;;
one/) `+scheduleSh("two", false, `[{"name":"bad","instances":1,"maxRetries":1},{"name":"after","dependsOn":["bad"],"instances":2,"maxRetries":0},{"name":"slow","instances":1,"maxRetries":0}]`)+` ;;
*/two) echo "stage two failed" >&2; exit 7 ;;
esac
`, map[string]string{
		"ok":    rec.sh("start"),
		"bad":   rec.sh("start") + "echo nope >&2; exit 4\n",
		"after": rec.sh("start"),
		"slow":  rec.sh("start") + "sleep 1.5\n" + rec.sh("end"),
	})
	s := newStack(t, root, options{})
	id := s.trigger("fails", nil)
	run := s.wait(id, 30*time.Second)
	require.Equal(t, "failed", run.Status)

	var runErr map[string]any
	require.NoError(t, json.Unmarshal(run.Error, &runErr))
	require.Equal(t, "flow_failed", runErr["reason"])
	require.Equal(t, 7.0, runErr["exitCode"])
	require.Contains(t, runErr["stderr"], "stage two failed")
	require.Equal(t, "two", runErr["failedStage"])

	byName := map[string][]Step{}
	for _, st := range s.steps(id) {
		byName[st.Name] = append(byName[st.Name], st)
	}
	require.Equal(t, "failed", byName["bad"][0].Status)
	require.Equal(t, 1, byName["bad"][0].RetryCount)
	var badErr map[string]any
	require.NoError(t, json.Unmarshal(byName["bad"][0].Error, &badErr))
	require.Equal(t, "exit_code", badErr["reason"])
	require.Equal(t, 4.0, badErr["exitCode"])
	require.Contains(t, badErr["stderr"], "nope")
	for _, st := range byName["after"] {
		require.Equal(t, "failed", st.Status)
		require.JSONEq(t, `{"reason":"dependency_failed","failed_step":"bad"}`, string(st.Error))
	}
	require.Equal(t, "completed", byName["slow"][0].Status, "a running step finishes")

	// after never ran; slow ended before the failure callback.
	for _, e := range rec.events() {
		require.NotEqual(t, "after", e.Name)
	}
	calls, err := os.ReadFile(filepath.Join(rec.dir, "calls"))
	require.NoError(t, err)
	require.Equal(t, "call completed= failed=\ncall completed=one failed=\ncall completed=one failed=two\n", string(calls))
	stages := map[string]string{}
	for _, g := range run.Stages {
		stages[g.Name] = g.Status
	}
	require.Equal(t, map[string]string{"one": "completed", "two": "failed"}, stages)
}

func TestTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "slow", `[ -n "$MAXQ_COMPLETED_STAGE$MAXQ_FAILED_STAGE" ] || `+
		scheduleSh("s", true, `[{"name":"sleeper","instances":1,"maxRetries":0,"env":{"MAXQ_STEP_TIMEOUT":"1"}}]`),
		map[string]string{"sleeper": `echo $$ > ` + rec.dir + `/pgid
sleep 60 &
sleep 60
`})
	s := newStack(t, root, options{Config: func(c *config.Config) {}})
	id := s.trigger("slow", nil)
	start := time.Now()
	run := s.wait(id, 30*time.Second)
	require.Less(t, time.Since(start), 15*time.Second)
	require.Equal(t, "failed", run.Status)
	steps := s.steps(id)
	var stepErr map[string]any
	require.NoError(t, json.Unmarshal(steps[0].Error, &stepErr))
	require.Equal(t, "timeout", stepErr["reason"])
	require.Equal(t, 1000.0, stepErr["timeoutMs"])

	data, err := os.ReadFile(filepath.Join(rec.dir, "pgid"))
	require.NoError(t, err)
	pgid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return syscall.Kill(-pgid, 0) == syscall.ESRCH },
		5*time.Second, 50*time.Millisecond, "every process of the step's group is gone")
}

// Two stages completing at the same moment queue two calls of flow.sh,
// which never run at once.
func TestFlowCallsNeverOverlap(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	// flow.sh records, per run, when each call starts and ends.
	stamp := func(what string) string {
		return `echo "$MAXQ_RUN_ID ` + what + ` $(date +%s%N) $MAXQ_COMPLETED_STAGE" >> ` + rec.dir + "/calls\n"
	}
	root := flowDir(t, "twin", stamp("start")+`if [ -z "$MAXQ_COMPLETED_STAGE" ]; then
`+scheduleSh("left", false, `[{"name":"l","instances":3,"maxRetries":0}]`)+
		scheduleSh("right", false, `[{"name":"r","instances":3,"maxRetries":0}]`)+`
fi
sleep 0.3
`+stamp("end"), map[string]string{"l": "exit 0\n", "r": "exit 0\n"})
	s := newStack(t, root, options{Workers: 2})
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, s.trigger("twin", nil))
	}
	for _, id := range ids {
		run := s.wait(id, 30*time.Second)
		require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	}
	data, err := os.ReadFile(filepath.Join(rec.dir, "calls"))
	require.NoError(t, err)
	type call struct {
		start, end int64
		stage      string
	}
	perRun := map[string][]call{}
	open := map[string]*call{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		at, err := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, err)
		stage := ""
		if len(f) > 3 {
			stage = f[3]
		}
		switch f[1] {
		case "start":
			require.Nil(t, open[f[0]], "two calls of run %s at once", f[0])
			open[f[0]] = &call{start: at, stage: stage}
		case "end":
			c := open[f[0]]
			require.NotNil(t, c)
			c.end = at
			perRun[f[0]] = append(perRun[f[0]], *c)
			open[f[0]] = nil
		}
	}
	require.Len(t, perRun, 5)
	for run, calls := range perRun {
		var stages []string
		for _, c := range calls {
			stages = append(stages, c.stage)
		}
		sort.Strings(stages)
		require.Equal(t, []string{"", "left", "right"}, stages, "run %s: one first call and one per stage", run)
	}
}

func TestFinalStageEndsRun(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "fin", rec.sh("start")+`[ -n "$MAXQ_COMPLETED_STAGE" ] || `+
		scheduleSh("only", true, `[{"name":"x","instances":1,"maxRetries":0}]`), map[string]string{"x": "exit 0\n"})
	s := newStack(t, root, options{})
	id := s.trigger("fin", nil)
	run := s.wait(id, 30*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	time.Sleep(300 * time.Millisecond)
	calls := 0
	for _, e := range rec.events() {
		if e.Name == "flow" {
			calls++
		}
	}
	require.Equal(t, 1, calls, "no callback after a final stage")
}

func TestFlowFailureFailsRun(t *testing.T) {
	t.Parallel()
	root := flowDir(t, "broken", "echo 'cannot go on' >&2\nexit 3\n", nil)
	s := newStack(t, root, options{})
	id := s.trigger("broken", nil)
	run := s.wait(id, 30*time.Second)
	require.Equal(t, "failed", run.Status)
	var runErr map[string]any
	require.NoError(t, json.Unmarshal(run.Error, &runErr))
	require.Equal(t, "flow_failed", runErr["reason"])
	require.Equal(t, 3.0, runErr["exitCode"])
	require.Equal(t, "cannot go on\n", runErr["stderr"])
}

func TestTwentyConcurrentRuns(t *testing.T) {
	t.Parallel()
	root := flowDir(t, "busy", `case "$MAXQ_COMPLETED_STAGE" in
"") `+scheduleSh("one", false, `[{"name":"a","instances":2,"maxRetries":0}]`)+` ;;
one) `+scheduleSh("two", true, `[{"name":"b","dependsOn":["a"],"instances":1,"maxRetries":0}]`)+` ;;
esac
`, map[string]string{"a": "sleep 0.05\n", "b": "exit 0\n"})
	s := newStack(t, root, options{})
	var ids []string
	for i := 0; i < 20; i++ {
		ids = append(ids, s.trigger("busy", map[string]any{"i": i}))
	}
	for _, id := range ids {
		run := s.wait(id, 60*time.Second)
		require.Equal(t, "completed", run.Status, "error: %s", run.Error)
		require.Len(t, run.Stages, 2)
	}
}

// Two workers and one API share a database: 500 steps, each run exactly once.
func TestTwoWorkersRunEachStepOnce(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	root := flowDir(t, "wide", `[ -n "$MAXQ_COMPLETED_STAGE" ] || `+
		scheduleSh("all", true, `[{"name":"one","instances":250,"maxRetries":0},{"name":"two","instances":250,"maxRetries":0}]`),
		map[string]string{
			"one": `echo "$MAXQ_STEP_NAME $MAXQ_STEP_SEQUENCE $MAXQ_STEP_ID" >> ` + rec.dir + "/done\n",
			"two": `echo "$MAXQ_STEP_NAME $MAXQ_STEP_SEQUENCE $MAXQ_STEP_ID" >> ` + rec.dir + "/done\n",
		})
	s := newStack(t, root, options{Workers: 2})
	id := s.trigger("wide", nil)
	run := s.wait(id, 120*time.Second)
	require.Equal(t, "completed", run.Status, "error: %s", run.Error)
	data, err := os.ReadFile(filepath.Join(rec.dir, "done"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 500)
	seen := map[string]bool{}
	for _, l := range lines {
		require.False(t, seen[l], "executed twice: %s", l)
		seen[l] = true
	}
	var workers int
	require.NoError(t, s.Store.Pool().QueryRow(t.Context(),
		`SELECT count(DISTINCT worker_id) FROM step WHERE run_id = $1`, id).Scan(&workers))
	require.Equal(t, 2, workers, "both workers took a share")
}

// Stages of one run completing at the same moment, on two workers, settle
// without a single deadlock: each stage row is updated once per
// transaction and runs are locked FOR NO KEY UPDATE, so a settle never
// waits on the foreign-key lock another settle takes on the run. (Deadlocks
// are retried, so only the server's count shows them.)
func TestSimultaneousStagesNeverDeadlock(t *testing.T) {
	t.Parallel()
	var stages []string
	steps := map[string]string{}
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("s%d", i)
		stages = append(stages, scheduleSh("stage"+name, false, `[{"name":"`+name+`","instances":2,"maxRetries":0}]`))
		steps[name] = "exit 0\n"
	}
	root := flowDir(t, "many", `[ -n "$MAXQ_COMPLETED_STAGE" ] || { `+strings.Join(stages, "")+` }
`, steps)
	s := newStack(t, root, options{Workers: 2, MaxSteps: 12})
	var ids []string
	for i := 0; i < 15; i++ {
		ids = append(ids, s.trigger("many", nil))
	}
	for _, id := range ids {
		run := s.wait(id, 60*time.Second)
		require.Equal(t, "completed", run.Status, "error: %s", run.Error)
		require.Len(t, run.Stages, 6)
	}
	// The server reports a transaction's statistics once it is idle again.
	time.Sleep(1500 * time.Millisecond)
	var deadlocks int64
	require.NoError(t, s.Store.Pool().QueryRow(t.Context(),
		`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks))
	require.Zero(t, deadlocks, "transitions deadlocked")
}
