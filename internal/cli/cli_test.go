package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The API's objects, as far as the tests read them.
type (
	apiRun struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	apiStep struct {
		Output json.RawMessage `json:"output"`
	}
	apiArtifact struct {
		ID       string   `json:"id"`
		FullPath string   `json:"fullPath"`
		Tags     []string `json:"tags"`
	}
	apiLog struct {
		Seq int64 `json:"seq"`
	}
	apiPagination struct {
		Total int `json:"total"`
	}
)

var runIDPattern = regexp.MustCompile(`^[0-9a-f-]{36}$`)

// runID is the run id a command printed on stdout.
func runID(t *testing.T, res result) string {
	t.Helper()
	id := strings.TrimSpace(res.Stdout)
	require.Regexp(t, runIDPattern, id, "%s", res)
	return id
}

// stderrLines are the lines of res's stderr.
func stderrLines(res result) []string {
	return strings.Split(strings.TrimRight(res.Stderr, "\n"), "\n")
}

func TestRunWait(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	flowDir(t, root, "ok", oneStage("hello:instances=2"), map[string]string{
		"hello": `echo "hello from $MAXQ_STEP_SEQUENCE"`})
	flowDir(t, root, "fail", oneStage("boom:maxRetries=1"), map[string]string{
		"boom": `echo "about to fail" >&2; exit 7`})
	flowDir(t, root, "slow", oneStage("nap"), map[string]string{
		"nap": `sleep 5`})
	s := newStack(t, root, options{})

	t.Run("Completed", func(t *testing.T) {
		t.Parallel()
		res := s.maxq(t, "run", "ok", "--wait")
		require.Equal(t, 0, res.Code, "%s", res)
		id := runID(t, res)
		require.Contains(t, res.Stderr, "stage main completed: 2/2 steps done", "%s", res)
		require.Contains(t, res.Stderr, "run "+id+" completed", "%s", res)
		// Plain lines, not a live status line: stderr is not a terminal.
		require.NotContains(t, res.Stderr, "\r")

		st := s.maxq(t, "status", id)
		require.Equal(t, 0, st.Code, "%s", st)
		require.Contains(t, st.Stdout, "Run "+id+"  flow ok  completed")
		require.Regexp(t, `main \(final\)\s+completed 2/2`, st.Stdout)
		require.Regexp(t, `├─ hello\[0\]\s+completed\s+0/0`, st.Stdout)
		require.Regexp(t, `└─ hello\[1\]\s+completed\s+0/0`, st.Stdout)

		// A finished run cannot be cancelled: the API's 409, in one line.
		cancel := s.maxq(t, "cancel", id)
		require.Equal(t, 2, cancel.Code, "%s", cancel)
		require.Len(t, stderrLines(cancel), 1, "%s", cancel)
		require.Regexp(t, `^maxq: cancel run `+id+`: .+ \(HTTP 409 CONFLICT\)$`, stderrLines(cancel)[0])
	})

	t.Run("Failed", func(t *testing.T) {
		t.Parallel()
		res := s.maxq(t, "run", "fail", "--wait")
		require.Equal(t, 1, res.Code, "%s", res)
		id := runID(t, res)
		require.Contains(t, res.Stderr, "step boom[0] failed (retry 1/1): exit_code exitCode=7 stderr: about to fail", "%s", res)
		require.Contains(t, res.Stderr, "step boom[0] failed after 1 retries: exit_code exitCode=7", "%s", res)
		require.Contains(t, res.Stderr, "stage main failed: 0/1 steps done, 1 failed", "%s", res)
		lines := stderrLines(res)
		require.Regexp(t, `^maxq: run `+id+` failed in .*: stage_failed stage=main`, lines[len(lines)-1])

		// Retry resumes it; it fails again, with the same exit code.
		again := s.maxq(t, "retry", id, "--wait")
		require.Equal(t, 1, again.Code, "%s", again)
		require.Equal(t, id, runID(t, again))
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		res := s.maxq(t, "run", "slow", "--wait", "--timeout", "1s")
		require.Equal(t, 3, res.Code, "%s", res)
		id := runID(t, res)
		lines := stderrLines(res)
		require.Regexp(t, `^maxq: timed out after 1s waiting for run `+id+` \(still (pending|running)\); the run keeps going`, lines[len(lines)-1])

		// It does keep going, until cancelled.
		st := s.maxq(t, "-o", "json", "status", id)
		require.Equal(t, 0, st.Code, "%s", st)
		var run apiRun
		require.NoError(t, json.Unmarshal([]byte(st.Stdout), &run))
		require.Contains(t, []string{"pending", "running"}, run.Status, "%s", st)

		cancel := s.maxq(t, "cancel", id)
		require.Equal(t, 0, cancel.Code, "%s", cancel)
		require.Equal(t, "run "+id+" cancelled\n", cancel.Stdout)
		require.Equal(t, 0, s.maxq(t, "cancel", id).Code, "cancelling twice is fine")

		// Waiting on a cancelled run ends at once, with exit code 1.
		wait := s.maxq(t, "retry", id, "--wait")
		require.Equal(t, 2, wait.Code, "a cancelled run cannot be retried: %s", wait)
		require.Contains(t, wait.Stderr, "(HTTP 409 CONFLICT)")
	})
}

// logLine matches what --logs and logs print for the printer steps.
var printerLine = regexp.MustCompile(`^\[printer\[(\d+)\]\] line (\d+) of (\d+)$`)

// requireEveryLine checks that out holds lines 1..n of each of the
// instances, each once and in order, and nothing else of theirs but one
// stderr line each.
func requireEveryLine(t *testing.T, out string, instances, n int) {
	t.Helper()
	got := map[int][]int{}
	stderrLines := 0
	for _, l := range strings.Split(out, "\n") {
		if m := printerLine.FindStringSubmatch(l); m != nil {
			seq, _ := strconv.Atoi(m[1])
			i, _ := strconv.Atoi(m[2])
			of, _ := strconv.Atoi(m[3])
			require.Equal(t, seq, of, "line %q printed by the wrong instance", l)
			got[seq] = append(got[seq], i)
			continue
		}
		if strings.HasPrefix(l, "[printer[") && strings.HasSuffix(l, "] a line on stderr") {
			stderrLines++
		}
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	require.Len(t, got, instances)
	for seq := range instances {
		require.Equal(t, want, got[seq], "lines of printer[%d]", seq)
	}
	require.Equal(t, instances, stderrLines)
}

func TestRunLogs(t *testing.T) {
	t.Parallel()
	root := flowDir(t, "", "lines", oneStage("printer:instances=4"), map[string]string{
		"printer": `for ((i = 1; i <= 200; i++)); do echo "line $i of $MAXQ_STEP_SEQUENCE"; done
echo "a line on stderr" >&2`})
	// Several workers write the log at once, each with its own batches.
	s := newStack(t, root, options{Workers: 3})

	res := s.maxq(t, "run", "lines", "--wait", "--logs")
	require.Equal(t, 0, res.Code, "%s", res)
	id := runID(t, res)
	requireEveryLine(t, res.Stderr, 4, 200)
	flowLines := 0 // the line may come first, before the run's status
	for _, l := range strings.Split(res.Stderr, "\n") {
		if l == "[flow] flow scheduling" {
			flowLines++
		}
	}
	require.Equal(t, 1, flowLines, "%s", res)

	t.Run("Logs", func(t *testing.T) {
		t.Parallel()
		out := s.maxq(t, "logs", id)
		require.Equal(t, 0, out.Code, "%s", out)
		requireEveryLine(t, out.Stdout, 4, 200)
		require.Equal(t, 4*201+1, strings.Count(out.Stdout, "\n"))
	})
	t.Run("OneInstance", func(t *testing.T) {
		t.Parallel()
		out := s.maxq(t, "logs", id, "--step", "printer[2]")
		require.Equal(t, 0, out.Code, "%s", out)
		require.Equal(t, 201, strings.Count(out.Stdout, "\n"))
		require.Equal(t, 201, strings.Count(out.Stdout, "[printer[2]] "))
	})
	t.Run("EveryInstance", func(t *testing.T) {
		t.Parallel()
		out := s.maxq(t, "logs", id, "--step", "printer")
		require.Equal(t, 0, out.Code, "%s", out)
		requireEveryLine(t, out.Stdout, 4, 200)
		require.NotContains(t, out.Stdout, "[flow]")
	})
	t.Run("UnknownStep", func(t *testing.T) {
		t.Parallel()
		out := s.maxq(t, "logs", id, "--step", "nope[0]")
		require.Equal(t, 2, out.Code, "%s", out)
		require.Equal(t, "maxq: run "+id+" has no step nope[0]\n", out.Stderr)
	})
	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		out := s.maxq(t, "logs", id, "-o", "json")
		require.Equal(t, 0, out.Code, "%s", out)
		var logs struct {
			Logs []struct {
				apiLog
				Cursor string `json:"cursor"`
			} `json:"logs"`
			Next string `json:"next"`
		}
		require.NoError(t, json.Unmarshal([]byte(out.Stdout), &logs))
		require.Len(t, logs.Logs, 4*201+1)
		require.Equal(t, logs.Logs[len(logs.Logs)-1].Cursor, logs.Next)
	})
}

func TestLogsFollow(t *testing.T) {
	t.Parallel()
	root := flowDir(t, "", "drip", oneStage("printer:instances=2"), map[string]string{
		"printer": `for ((i = 1; i <= 30; i++)); do echo "line $i of $MAXQ_STEP_SEQUENCE"; sleep 0.05; done
echo "a line on stderr" >&2`})
	s := newStack(t, root, options{})

	id := runID(t, s.maxq(t, "run", "drip"))
	out := s.maxq(t, "logs", id, "--follow")
	require.Equal(t, 0, out.Code, "%s", out)
	requireEveryLine(t, out.Stdout, 2, 30)

	// The run had ended when the follow did.
	st := s.maxq(t, "status", id, "-o", "json")
	var run apiRun
	require.NoError(t, json.Unmarshal([]byte(st.Stdout), &run))
	require.Equal(t, "completed", run.Status)

	// With -o json, one JSON object per line.
	js := s.maxq(t, "logs", id, "--follow", "-o", "json")
	require.Equal(t, 0, js.Code, "%s", js)
	lines := strings.Split(strings.TrimSpace(js.Stdout), "\n")
	require.Len(t, lines, 2*31+1)
	for _, l := range lines {
		require.True(t, json.Valid([]byte(l)), l)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	root := flowDir(t, "", "ok", oneStage("hello"), map[string]string{"hello": `echo hi`})
	s := newStack(t, root, options{})

	first := s.maxq(t, "run", "ok", "--idempotency-key", "build-42", "--input", `{"n": 1}`)
	require.Equal(t, 0, first.Code, "%s", first)
	id := runID(t, first)
	require.Empty(t, first.Stderr)

	second := s.maxq(t, "run", "ok", "--idempotency-key", "build-42", "--input", `{"n": 1}`, "--wait")
	require.Equal(t, 0, second.Code, "%s", second)
	require.Equal(t, id, runID(t, second))
	require.Contains(t, second.Stderr, `idempotency key "build-42": run `+id+` of ok exists already`)

	runs := s.maxq(t, "runs", "-o", "json")
	require.Equal(t, 0, runs.Code, "%s", runs)
	var list struct {
		Runs       []apiRun      `json:"runs"`
		Pagination apiPagination `json:"pagination"`
	}
	require.NoError(t, json.Unmarshal([]byte(runs.Stdout), &list))
	require.Equal(t, 1, list.Pagination.Total)
	require.Equal(t, id, list.Runs[0].ID)
}

func TestJSONOutput(t *testing.T) {
	t.Parallel()
	root := flowDir(t, "", "art", oneStage("producer:instances=2"), map[string]string{
		"producer": `"$MAXQ_BIN" artifact put result --tag t1 --value "{\"seq\": $MAXQ_STEP_SEQUENCE, \"who\": \"world\", \"list\": [1, 2, 3]}"
# maxq sends MAXQ_STEP_ATTEMPT along: another attempt's write is refused.
if stale=$(MAXQ_STEP_ATTEMPT=99 "$MAXQ_BIN" output '{"stale": true}' 2>&1); then exit 1; fi
[[ $stale == "maxq: set the output of step $MAXQ_STEP_ID: "*"(HTTP 409 CONFLICT)" ]]
"$MAXQ_BIN" output '{"ok": true}'`})
	s := newStack(t, root, options{})
	res := s.maxq(t, "run", "art", "--input", `{"x": {"y": ["a", "b"]}}`, "--wait")
	require.Equal(t, 0, res.Code, "%s", res)
	id := runID(t, res)

	for _, tc := range []struct {
		name string
		args []string
		key  string
	}{
		{"Flows", []string{"flows"}, "flows"},
		{"Runs", []string{"runs"}, "runs"},
		{"Status", []string{"status", id}, "stages"},
		{"Steps", []string{"steps", id}, "steps"},
		{"Artifacts", []string{"artifacts", id}, "artifacts"},
		{"Logs", []string{"logs", id}, "logs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{append([]string{"-o", "json"}, tc.args...), append(tc.args, "--output", "json")} {
				out := s.maxq(t, args...)
				require.Equal(t, 0, out.Code, "%s", out)
				var v map[string]json.RawMessage
				require.NoError(t, json.Unmarshal([]byte(out.Stdout), &v), out.Stdout)
				require.Contains(t, v, tc.key)
			}
			text := s.maxq(t, tc.args...)
			require.Equal(t, 0, text.Code, "%s", text)
			require.False(t, json.Valid([]byte(text.Stdout)), "text output by default:\n%s", text.Stdout)
		})
	}

	t.Run("Artifact", func(t *testing.T) {
		t.Parallel()
		out := s.maxq(t, "artifacts", id, "--step", "producer[1]", "-o", "json")
		require.Equal(t, 0, out.Code, "%s", out)
		var list struct {
			Artifacts []apiArtifact `json:"artifacts"`
		}
		require.NoError(t, json.Unmarshal([]byte(out.Stdout), &list))
		require.Len(t, list.Artifacts, 1)
		a := list.Artifacts[0]
		require.Equal(t, "producer[1]/result", a.FullPath)
		require.Equal(t, []string{"t1"}, a.Tags)

		value := s.maxq(t, "artifact", id, a.ID)
		require.Equal(t, 0, value.Code, "%s", value)
		require.JSONEq(t, `{"seq": 1, "who": "world", "list": [1, 2, 3]}`, value.Stdout)

		field := s.maxq(t, "artifact", id, a.ID, "--field", ".list[-1]")
		require.Equal(t, "3\n", field.Stdout)
	})

	t.Run("ArtifactGet", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{"MAXQ_RUN_ID": id}
		for args, want := range map[string]string{
			"--step producer --name result --field .who":               "world\n",
			"--step producer[1] --name result --field .seq":            "1\n",
			"--step producer --name result --sequence 1 --field .list": "[1,2,3]\n",
			"--step producer --name result --all --field .seq":         "[0,1]\n",
			"--step producer --name result -o json --field .who":       "\"world\"\n",
		} {
			out := s.run(t, env, "", append([]string{"artifact", "get"}, strings.Fields(args)...)...)
			require.Equal(t, 0, out.Code, "%s: %s", args, out)
			require.Equal(t, want, out.Stdout, args)
		}
		missing := s.run(t, env, "", "artifact", "get", "--step", "producer", "--name", "result", "--field", ".nope")
		require.Equal(t, 2, missing.Code, "%s", missing)
		require.Equal(t, "maxq: field .nope: the value has no key \"nope\"\n", missing.Stderr)
		none := s.run(t, env, "", "artifact", "get", "--step", "producer", "--name", "other")
		require.Equal(t, 2, none.Code)
		require.Equal(t, "maxq: run "+id+" has no artifact producer[0]/other\n", none.Stderr)
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		const unknown = "0190a3c0-0000-7000-8000-000000000000"
		for _, args := range [][]string{{"status", unknown}, {"artifact", id, unknown}, {"run", "nope"}} {
			out := s.maxq(t, args...)
			require.Equal(t, 2, out.Code, "%s", out)
			require.Empty(t, out.Stdout)
			require.Regexp(t, `^maxq: [^\n]+: [^\n]+ not found \(HTTP 404 NOT_FOUND\)\n$`, out.Stderr)
		}
	})

	t.Run("Input", func(t *testing.T) {
		t.Parallel()
		out := s.maxq(t, "input", id, "--field", ".x.y[1]")
		require.Equal(t, "b\n", out.Stdout, "%s", out)
	})

	t.Run("StepOutput", func(t *testing.T) {
		t.Parallel()
		out := s.maxq(t, "steps", id, "-o", "json")
		var list struct {
			Steps []apiStep `json:"steps"`
		}
		require.NoError(t, json.Unmarshal([]byte(out.Stdout), &list))
		require.Len(t, list.Steps, 2)
		for _, st := range list.Steps {
			require.JSONEq(t, `{"ok": true}`, string(st.Output))
		}
	})
}

// TestScriptsUseOnlyMaxq runs a flow whose scripts talk to MaxQ through
// maxq alone, on a worker process whose PATH holds maxq and a few shell
// tools but neither curl nor jq, behind an API that wants a token.
func TestScriptsUseOnlyMaxq(t *testing.T) {
	t.Parallel()
	maxqBin, _ := binaries(t)
	bin := t.TempDir()
	require.NoError(t, os.Symlink(maxqBin, filepath.Join(bin, "maxq")))
	for _, tool := range []string{"bash", "sh", "cat", "echo", "sleep", "env"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			require.NotEqual(t, "bash", tool, "bash is needed")
			continue
		}
		require.NoError(t, os.Symlink(path, filepath.Join(bin, tool)))
	}
	root := flowDir(t, "", "pure", `case "$MAXQ_COMPLETED_STAGE" in
  "") maxq stage schedule --stage produce --step 'make:instances=3,maxRetries=1,env.GREETING=hello\,world' ;;
  produce) echo '{"stage": "consume", "final": true, "steps": [{"name": "combine", "instances": 1, "maxRetries": 0}]}' |
    maxq stage schedule --file - ;;
esac
`, map[string]string{
		"make": `if command -v curl || command -v jq; then tools=true; else tools=false; fi
who=$(maxq input --field .who)
value="{\"seq\": $MAXQ_STEP_SEQUENCE, \"who\": \"$who\", \"greeting\": \"$GREETING\", \"curlOrJq\": $tools}"
maxq artifact put item --value "$value" --tag made
# Again, as a retried script would: the same value is no conflict.
echo "$value" | maxq artifact put item --value -
echo "made $MAXQ_STEP_SEQUENCE"`,
		"combine": `seqs=$(maxq artifact get --step make --name item --all --field .seq)
who=$(maxq artifact get --step 'make[1]' --name item --field .who)
maxq output "{\"seqs\": $seqs, \"who\": \"$who\"}"`,
	})
	const token = "a-token-of-at-least-16-characters"
	s := newStack(t, root, options{Token: token, WorkerEnv: map[string]string{"PATH": bin}})

	// Without the token, the API says no, in one line.
	denied := s.run(t, map[string]string{"MAXQ_API_TOKEN": "-"}, "", "flows")
	require.Equal(t, 2, denied.Code, "%s", denied)
	require.Regexp(t, `^maxq: list flows: .* \(HTTP 401 UNAUTHORIZED\); set MAXQ_API_TOKEN or --token\n$`, denied.Stderr)

	res := s.run(t, nil, `{"who": "tester"}`, "run", "pure", "--input", "-", "--wait", "--logs")
	require.Equal(t, 0, res.Code, "%s", res)
	id := runID(t, res)
	for seq := range 3 {
		require.Contains(t, res.Stderr, fmt.Sprintf("[make[%d]] made %d\n", seq, seq))
	}

	steps := s.maxq(t, "steps", id, "--name", "combine", "-o", "json")
	var list struct {
		Steps []apiStep `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(steps.Stdout), &list), "%s", steps)
	require.Len(t, list.Steps, 1)
	require.JSONEq(t, `{"seqs": [0, 1, 2], "who": "tester"}`, string(list.Steps[0].Output))

	item := s.run(t, map[string]string{"MAXQ_RUN_ID": id}, "", "artifact", "get", "--step", "make", "--name", "item", "--sequence", "2")
	require.Equal(t, 0, item.Code, "%s", item)
	require.JSONEq(t, `{"seq": 2, "who": "tester", "greeting": "hello,world", "curlOrJq": false}`, item.Stdout)
}
