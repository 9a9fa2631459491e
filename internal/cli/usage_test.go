package cli_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/cli"
)

// offline is an environment whose API does not exist: the usage checks
// must answer before any request.
var offline = map[string]string{"MAXQ_URL": "http://127.0.0.1:1/api/v1"}

func TestHelp(t *testing.T) {
	t.Parallel()
	maxqBin, _ := binaries(t)
	flags := map[string][]string{
		"run":            {"--input", "--metadata", "--idempotency-key", "--wait", "--timeout", "--logs"},
		"cancel":         nil,
		"retry":          {"--wait", "--timeout", "--logs"},
		"flows":          nil,
		"runs":           {"--flow", "--status", "--limit", "--offset"},
		"status":         nil,
		"steps":          {"--stage", "--status", "--name"},
		"logs":           {"--step", "--follow"},
		"artifacts":      {"--step", "--name", "--tag"},
		"artifact":       {"--field"},
		"stage schedule": {"--run", "--stage", "--final", "--step", "--file"},
		"artifact put":   {"--run", "--value", "--tag", "--metadata", "--step-id", "--step"},
		"artifact get":   {"--run", "--step", "--name", "--sequence", "--all", "--field"},
		"output":         {"--step-id"},
		"input":          {"--field"},
	}
	require.Len(t, cli.CommandNames(), len(flags), "every command has a case here")

	top := runBinary(t, maxqBin, offline, "", "--help")
	require.Equal(t, 0, top.Code, "%s", top)
	for _, want := range []string{"MAXQ_URL", "MAXQ_API", "MAXQ_API_TOKEN", "MAXQ_TOKEN", "MAXQ_RUN_ID", "MAXQ_STEP_ID",
		"Exit codes", "0  success", "1  the run failed", "2  bad usage", "3  --timeout"} {
		require.Contains(t, top.Stdout, want)
	}
	for _, name := range cli.CommandNames() {
		require.Contains(t, flags, name)
		require.Regexp(t, `\n    `+name+` +\S`, top.Stdout, "maxq --help lists %s in one line", name)
	}

	for name, want := range flags {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			args := append(strings.Fields(name), "--help")
			for _, a := range [][]string{args, append([]string{"help"}, strings.Fields(name)...)} {
				res := runBinary(t, maxqBin, offline, "", a...)
				require.Equal(t, 0, res.Code, "%s", res)
				require.Empty(t, res.Stderr)
				require.True(t, strings.HasPrefix(res.Stdout, "Usage: maxq "+name+" "), res.Stdout)
				for _, f := range append(want, "--output", "--url", "--token") {
					require.Regexp(t, `\n  (-o, )?`+f+`\b`, res.Stdout, "%s --help mentions %s", name, f)
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	maxqBin, _ := binaries(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `maxq: unknown command "bogus" (see maxq --help)`},
		{[]string{"--bogus"}, `maxq: unknown flag --bogus (see maxq --help)`},
		{[]string{"runs", "--bogus"}, `maxq: runs: unknown flag --bogus`},
		{[]string{"runs", "--limit"}, `maxq: runs: flag --limit needs a value`},
		{[]string{"runs", "--limit", "x"}, `maxq: runs: invalid value "x" for flag --limit: parse error`},
		{[]string{"runs", "--limit", "500"}, `maxq: runs: --limit must be from 1 to 100, not 500`},
		{[]string{"runs", "-o", "yaml"}, `maxq: --output must be text or json, not "yaml"`},
		{[]string{"status"}, `maxq: status: missing RUN (or set MAXQ_RUN_ID) (usage: maxq status [RUN])`},
		{[]string{"status", "a", "b"}, `maxq: status: unexpected argument "b" (usage: maxq status [RUN])`},
		{[]string{"run"}, `maxq: run: missing FLOW (usage: maxq run FLOW [--input JSON|@FILE|-] [--metadata JSON|@FILE] [--idempotency-key KEY] [--wait] [--timeout DURATION] [--logs])`},
		{[]string{"run", "f", "--input", "{nope"}, `maxq: --input is not valid JSON: invalid character 'n' looking for beginning of object key string (at byte 2)`},
		{[]string{"run", "f", "--input", `{"a": 1} x`}, `maxq: --input is not valid JSON: more than one JSON value (extra text at byte 9)`},
		{[]string{"run", "f", "--idempotency-key", "a\x01"}, `maxq: --idempotency-key must be printable text of at most 255 bytes`},
		{[]string{"--url", "localhost:3000", "flows"}, `maxq: the API URL "localhost:3000" must look like http://host:port/api/v1 (--url, MAXQ_URL, MAXQ_API)`},
		{[]string{"run", "f", "--metadata", `[1]`}, `maxq: --metadata must be a JSON object`},
		{[]string{"run", "f", "--input", "@/nonexistent.json"}, `maxq: --input: open /nonexistent.json: no such file or directory`},
		{[]string{"run", "f", "--timeout", "soon"}, `maxq: run: invalid value "soon" for flag --timeout: want a duration such as 90s, 30m or 1h30m`},
		{[]string{"stage"}, `maxq: stage: unknown subcommand nothing; did you mean 'maxq stage schedule'?`},
		{[]string{"stage", "schedule", "--stage", "s", "--step", "a"}, `maxq: stage schedule: no run: MAXQ_RUN_ID is not set (run it from flow.sh or step.sh) and --run is not given`},
		{[]string{"stage", "schedule", "--run", "r", "--stage", "s", "--step", "a:instances=0,colour=red"},
			`maxq: --step "a:instances=0,colour=red": instances must be a whole number, 1 or more, not "0"; --step "a:instances=0,colour=red": unknown key "colour" (instances, maxRetries, dependsOn, timeout, env.KEY)`},
		{[]string{"artifact", "put", "x", "--run", "r", "--value", "1"}, `maxq: artifact put: MAXQ_STEP_NAME and MAXQ_STEP_SEQUENCE are not set: run it from step.sh, or give --step NAME[SEQ]`},
		{[]string{"artifact", "get", "--run", "r", "--step", "a"}, `maxq: artifact get: --step and --name are required`},
		{[]string{"output", "{}"}, `maxq: output: MAXQ_STEP_ID is not set: run it from step.sh, or give --step-id`},
		{[]string{"artifact"}, `maxq: artifact: missing RUN and ID (usage: maxq artifact RUN ID, or maxq artifact put|get)`},
	} {
		res := runBinary(t, maxqBin, offline, "", tc.args...)
		require.Equal(t, 2, res.Code, "%v: %s", tc.args, res)
		require.Empty(t, res.Stdout, "%v", tc.args)
		require.Equal(t, tc.want+"\n", res.Stderr, "%v", tc.args)
	}
}

// TestMainInProcess runs Main as other binaries do: in their process, at
// the same time, with their own arguments and environment.
func TestMainInProcess(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var stdout, stderr bytes.Buffer
			args := []string{"runs", "--help"}
			if i%2 == 1 {
				args = []string{"-o", "json", "status"}
			}
			env := func(k string) string { return map[string]string{"MAXQ_URL": "http://127.0.0.1:1/api/v1"}[k] }
			code := cli.Main(context.Background(), args, env, nil, &stdout, &stderr)
			if i%2 == 0 {
				assert.Equal(t, 0, code)
				assert.Contains(t, stdout.String(), "Usage: maxq runs")
			} else {
				assert.Equal(t, 2, code)
				assert.Equal(t, "maxq: status: missing RUN (or set MAXQ_RUN_ID) (usage: maxq status [RUN])\n", stderr.String())
			}
		}()
	}
	wg.Wait()
}
