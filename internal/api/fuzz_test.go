package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/store"
)

// FuzzDecodeRequests feeds arbitrary bytes to the strict decoder as every
// request body the API reads. Whatever arrives, nothing panics, every error
// is a 400 with the error body's code and a message, and what is accepted
// holds only what the decoder promises: valid UTF-8 JSON, no NUL, nesting in
// bounds, and for a stage a request the store can take as it is.
//
// The seeds run under plain go test; go test -fuzz=FuzzDecodeRequests
// explores from them.
func FuzzDecodeRequests(f *testing.F) {
	seeds := []string{
		// Valid bodies.
		`{"stage":"fetch","final":false,"steps":[{"name":"a","dependsOn":[],"instances":1,"maxRetries":3,"env":{"SOURCE":"reuters"}},{"name":"b","dependsOn":["a"],"instances":4,"maxRetries":0}]}`,
		`{"stage":"s","final":true,"steps":[{"name":"a","instances":1,"maxRetries":0,"env":{"MAXQ_STEP_TIMEOUT":"30"}}]}`,
		`{"input":{"any":"json data"},"metadata":{"user":"alice"}}`,
		`{"stepId":"0190a3c0-0000-7000-8000-000000000000","stepName":"a","sequence":0,"name":"raw_data","value":{"articles":[1,2]},"tags":["news"],"metadata":{"k":1}}`,
		`{"status":"completed","output":{"articles":42},"error":null}`,
		`{"status":"failed","error":{"message":"boom"}}`,
		`{}`,
		// Bodies that are not one JSON object.
		``,
		" \n\t",
		`null`,
		`[]`,
		`"stage"`,
		`{"stage":"s"} trailing`,
		`{}{}`,
		`{"stage":`,
		"\ufeff{}",
		"{'stage':'s'}",
		// Wrong types, ranges and names.
		`{"stage":1,"final":"yes","steps":{"name":"a"}}`,
		`{"stage":"s","final":false,"steps":[{"name":"a","instances":"4","maxRetries":-1,"dependsOn":"a","env":["A=1"]}]}`,
		`{"stage":"s","final":false,"steps":[{"name":"a","instances":1.5,"maxRetries":1000,"env":{"A":1}}]}`,
		`{"stage":"s","final":false,"steps":[{"name":"a","instances":1e9,"maxRetries":99999999999999999999}]}`,
		`{"stage":"../x","final":false,"steps":[{"name":"a/b","instances":10000,"maxRetries":0},{"name":"a/b","instances":10000,"maxRetries":0}]}`,
		`{"stage":"s","final":false,"steps":[{"name":"a","dependOn":["b"],"instances":1,"maxRetries":0}]}`,
		`{"stage":"s","final":false,"steps":[{"name":"a","instances":1,"maxRetries":0,"env":{"MAXQ_RUN_ID":"x","1BAD":"y","A":null,"MAXQ_STEP_TIMEOUT":"-5"}}]}`,
		`{"stage":"s","final":false,"steps":[null,{}]}`,
		`{"":[]}`,
		`{"sequence":-1,"tags":"x","metadata":[1],"value":null}`,
		`{"status":"running","output":1e999}`,
		// Hostile text.
		`{"input":"a\u0000b"}`,
		`{"input":{"\u0000":1}}`,
		`{"input":"\ud800"}`,
		"{\"input\":\"\xff\xfe\"}",
		"{\"stage\":\"\xed\xa0\x80\"}",
		`{"input":` + strings.Repeat("9", 400) + `}`,
		`{"input":1e-400}`,
		`{"input":` + strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth) + `}`,
		`{"input":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`,
		strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100),
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// accepted reports whether err is nil, and fails the test unless a
		// non-nil err is answered as a client error.
		accepted := func(what string, err error) bool {
			t.Helper()
			if err == nil {
				return true
			}
			status, code, msg, _ := statusFor(err)
			if status != http.StatusBadRequest || code != CodeValidation || msg == "" {
				t.Fatalf("%s: %q answered %d %s %q, want 400 %s", what, data, status, code, msg, CodeValidation)
			}
			return false
		}

		checked := accepted("checkJSON", checkJSON(data))
		var sr scheduleRequest
		if accepted("decode schedule", decodeJSON(data, &sr)) {
			requireCleanJSON(t, data, checked)
			p, err := sr.validate()
			if accepted("validate schedule", err) {
				requireSchedulable(t, data, p)
			}
		}
		var tr triggerRequest
		if accepted("decode trigger", decodeJSON(data, &tr)) {
			requireCleanJSON(t, data, checked, tr.Input, tr.Metadata)
		}
		var ar artifactRequest
		if accepted("decode artifact", decodeJSON(data, &ar)) {
			requireCleanJSON(t, data, checked, ar.Value, ar.Metadata)
			for _, tag := range ar.Tags {
				if strings.IndexByte(tag, 0) >= 0 || !utf8.ValidString(tag) {
					t.Fatalf("%q: accepted tag %q", data, tag)
				}
			}
		}
		var pr patchRequest
		if accepted("decode patch", decodeJSON(data, &pr)) {
			requireCleanJSON(t, data, checked, pr.Output, pr.Error)
		}
	})
}

// requireCleanJSON asserts what decodeJSON promises of a body it accepted,
// and of the raw values taken from it: one valid JSON value that checkJSON
// accepts too.
func requireCleanJSON(t *testing.T, data []byte, checked bool, raws ...json.RawMessage) {
	t.Helper()
	if !checked {
		t.Fatalf("%q: decodeJSON accepted what checkJSON rejects", data)
	}
	if !json.Valid(data) {
		t.Fatalf("%q: decodeJSON accepted invalid JSON", data)
	}
	for _, raw := range raws {
		if raw == nil {
			continue
		}
		if err := checkJSON(raw); err != nil || !json.Valid(raw) {
			t.Fatalf("%q: accepted raw value %q fails its own check: %v", data, raw, err)
		}
	}
}

// requireSchedulable asserts that a validated stage request is one the
// store can take without checking anything again.
func requireSchedulable(t *testing.T, data []byte, p store.StageScheduleParams) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%q: validate accepted "+format, append([]any{data}, args...)...)
	}
	if !core.ValidName(p.Stage) {
		fail("stage %q", p.Stage)
	}
	if len(p.Steps) == 0 {
		fail("a stage without steps")
	}
	names := map[string]bool{}
	total := 0
	for _, st := range p.Steps {
		if !core.ValidName(st.Name) || names[st.Name] {
			fail("step name %q", st.Name)
		}
		names[st.Name] = true
		if st.Instances < 1 || st.Instances > maxInstances {
			fail("instances %d", st.Instances)
		}
		total += st.Instances
		if st.MaxRetries < 0 || st.MaxRetries > maxRetries {
			fail("maxRetries %d", st.MaxRetries)
		}
		if st.DependsOn == nil {
			fail("nil dependsOn")
		}
		for _, d := range st.DependsOn {
			if !core.ValidName(d) {
				fail("dependency %q", d)
			}
		}
		if len(st.Env) > maxEnvVars {
			fail("%d env variables", len(st.Env))
		}
		for k, v := range st.Env {
			if !envName(k) || strings.HasPrefix(k, "MAXQ_") && k != "MAXQ_STEP_TIMEOUT" {
				fail("env name %q", k)
			}
			if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
				fail("env value %q", v)
			}
		}
		if st.TimeoutMs < 0 || st.TimeoutMs > 366*24*3600*1000 || (st.TimeoutMs > 0) != (st.Env["MAXQ_STEP_TIMEOUT"] != "") {
			fail("timeout %dms with env %v", st.TimeoutMs, st.Env)
		}
	}
	if total > maxStepsPerStage {
		fail("%d instances in a stage", total)
	}
}
