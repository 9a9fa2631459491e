package cli

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExtract(t *testing.T) {
	t.Parallel()
	const doc = `{"a": {"b": [10, {"c": "x"}]}, "odd key": 1.50, "n": null, "big": 12345678901234567890}`
	for _, tc := range []struct {
		path string
		want string // JSON of the result
		err  string
	}{
		{path: ".", want: `{"a":{"b":[10,{"c":"x"}]},"big":12345678901234567890,"n":null,"odd key":1.50}`},
		{path: "", want: `{"a":{"b":[10,{"c":"x"}]},"big":12345678901234567890,"n":null,"odd key":1.50}`},
		{path: ".a.b[0]", want: `10`},
		{path: ".a.b[1].c", want: `"x"`},
		{path: ".a.b[-1].c", want: `"x"`},
		{path: `.["odd key"]`, want: `1.50`},
		{path: `["odd key"]`, want: `1.50`},
		{path: `."odd key"`, want: `1.50`},
		{path: ".big", want: `12345678901234567890`},
		{path: ".n", want: `null`},
		{path: ".a.x", err: `field .a.x: .a has no key "x"`},
		{path: ".a.b[2]", err: `field .a.b[2]: .a.b has 2 elements, no [2]`},
		{path: ".a[0]", err: `field .a[0]: .a is an object, not an array`},
		{path: ".a.b.c", err: `field .a.b.c: .a.b is an array, not an object`},
		{path: ".a.b[0].c", err: `field .a.b[0].c: .a.b[0] is a number, not an object or array`},
		{path: "a", err: `field "a": a path starts with . or [`},
		{path: ".a[x]", err: `field ".a[x]": an index must be a whole number, not "x"`},
		{path: ".a[0", err: `field ".a[0": unclosed [`},
		{path: ".a..b", err: `field ".a..b": empty key`},
	} {
		got, err := extract(json.RawMessage(doc), tc.path)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.path)
			continue
		}
		require.NoError(t, err, tc.path)
		b, err := marshalNoEscape(got)
		require.NoError(t, err)
		require.Equal(t, tc.want, string(b), tc.path)
	}
}

func TestParseStepSpec(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec string
		want string
		err  string
	}{
		{spec: "fetch", want: `{"name":"fetch","instances":1,"maxRetries":0,"dependsOn":[],"env":{}}`},
		{spec: "scrape:instances=10,maxRetries=2,dependsOn=a+b,env.URL=http://x/?a=1\\,b=2,timeout=30",
			want: `{"name":"scrape","instances":10,"maxRetries":2,"dependsOn":["a","b"],"env":{"MAXQ_STEP_TIMEOUT":"30","URL":"http://x/?a=1,b=2"}}`},
		{spec: `s:retries=1,env.P=C:\\dir`, want: `{"name":"s","instances":1,"maxRetries":1,"dependsOn":[],"env":{"P":"C:\\dir"}}`},
		{spec: "s:env.EMPTY=", want: `{"name":"s","instances":1,"maxRetries":0,"dependsOn":[],"env":{"EMPTY":""}}`},
		{spec: ":instances=1", err: "the step's name comes first"},
		{spec: "s:instances", err: `"instances" is not KEY=VALUE`},
		{spec: "s:maxRetries=-1", err: "maxRetries must be a whole number, 0 or more"},
		{spec: "s:timeout=0", err: "timeout must be a whole number of seconds"},
		{spec: "s:env.=1", err: "env. needs a variable name"},
	} {
		got, err := parseStepSpec(tc.spec)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.spec)
			continue
		}
		require.NoError(t, err, tc.spec)
		b, _ := json.Marshal(got)
		require.JSONEq(t, tc.want, string(b), tc.spec)
	}
}

func TestErrorSummary(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		`null`: "",
		`{"reason": "exit_code", "exitCode": 7, "stderr": "a\nb\n\nc\nd\n"}`:                              "exit_code exitCode=7 stderr: b | c | d",
		`{"reason": "stage_failed", "stage": "s", "detail": "stage s failed"}`:                            "stage_failed stage=s stage s failed",
		`{"reason": "dependency_failed", "failed_step": "a[0]"}`:                                          "dependency_failed failed_step=a[0]",
		`{"reason": "flow_failed", "cause": "timeout", "timeoutMs": 1000, "completedStage": "x", "z": 1}`: "flow_failed cause=timeout timeoutMs=1000 z=1",
		`"plain"`: `"plain"`,
	} {
		require.Equal(t, want, errorSummary(json.RawMessage(raw)), raw)
	}
}

// TestDisplay checks the terminal's live line: other lines go above it, and
// it is redrawn in place.
func TestDisplay(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	d := newDisplay(&buf, true, "30")
	d.live(func() string { return "run 1 running · stage fetch: 3/10 steps done" })
	d.line("step a[0] failed")
	d.close()
	require.Equal(t, "\r\x1b[Krun 1 running · stage fetch:…"+
		"\r\x1b[Kstep a[0] failed\n"+
		"\r\x1b[Krun 1 running · stage fetch:…"+
		"\r\x1b[K", buf.String())

	buf.Reset()
	plain := newDisplay(&buf, false, "")
	plain.live(func() string { return "never shown" })
	plain.line("one")
	plain.close()
	require.Equal(t, "one\n", buf.String())
}
