package api_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMalformedRequests sends hostile and malformed requests to every
// endpoint. Each must be answered with a specific 4xx and the spec's error
// body — never a 500 — and none may create, change or lose anything.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// What the bad requests aim at: a run with a stage of three pending steps
	// and one artifact.
	run := b.trigger("demo")
	steps := list(b.schedule(run, "one", false, step("a", 1), step("b", 2)), "steps")
	stepA := steps[0].(map[string]any)["id"].(string)
	b.do("POST", "/runs/"+run+"/artifacts", map[string]any{"stepId": stepA, "stepName": "a", "sequence": 0,
		"name": "kept", "value": map[string]any{"n": 1}}).must(t, 201)
	before := counts(b, run, stepA)

	const (
		bad      = 400
		notFound = 404
		method   = 405
		tooLarge = 413
	)
	const (
		codeInvalid  = "VALIDATION_ERROR"
		codeNotFound = "NOT_FOUND"
		codeMethod   = "METHOD_NOT_ALLOWED"
		codeTooLarge = "PAYLOAD_TOO_LARGE"
	)
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	encode := func(v any) string {
		data, err := json.Marshal(v)
		require.NoError(t, err)
		return string(data)
	}
	// schedule returns a valid stage request for step c, changed by edit.
	schedule := func(edit func(req, st map[string]any)) string {
		st := map[string]any{"name": "c", "dependsOn": []string{}, "instances": 1, "maxRetries": 0, "env": map[string]any{}}
		req := map[string]any{"stage": "bad", "final": false, "steps": []any{st}}
		edit(req, st)
		return encode(req)
	}
	// artifact returns a valid artifact request for step a, changed by edit.
	artifact := func(edit func(req map[string]any)) string {
		req := map[string]any{"stepId": stepA, "stepName": "a", "sequence": 0, "name": "bad", "value": 1,
			"tags": []string{"t"}, "metadata": map[string]any{}}
		edit(req)
		return encode(req)
	}
	set := func(k string, v any) func(req map[string]any) {
		return func(req map[string]any) { req[k] = v }
	}
	del := func(k string) func(req map[string]any) {
		return func(req map[string]any) { delete(req, k) }
	}
	stepSet := func(k string, v any) func(req, st map[string]any) {
		return func(_, st map[string]any) { st[k] = v }
	}
	stepDel := func(k string) func(req, st map[string]any) {
		return func(_, st map[string]any) { delete(st, k) }
	}
	deep := strings.Repeat("[", 1000) + strings.Repeat("]", 1000)
	huge := strings.Repeat("x", 100<<10) // over the 64 KiB limit
	long := strings.Repeat("a", 129)     // over the 128-character name limit
	valid := schedule(func(_, _ map[string]any) {})
	manyTags := make([]string, 65) // over the 64-tag limit
	for i := range manyTags {
		manyTags[i] = "t" + strconv.Itoa(i)
	}

	runs := "/runs/" + run
	stepPath := "/steps/" + stepA
	cases := []struct {
		name    string
		method  string
		path    string
		body    any
		headers []string
		status  int
		code    string
	}{
		// POST /flows/{flowName}/runs: the name in the path.
		{"FlowDotDot", "POST", "/flows/../runs", "{}", nil, bad, codeInvalid},
		{"FlowDotDotEncodedSlash", "POST", "/flows/..%2Fother/runs", "{}", nil, bad, codeInvalid},
		{"FlowEncodedDotDot", "POST", "/flows/%2e%2e/runs", "{}", nil, bad, codeInvalid},
		{"FlowEncodedTraversal", "POST", "/flows/%2e%2e%2f%2e%2e%2fetc/runs", "{}", nil, bad, codeInvalid},
		{"FlowEncodedSlash", "POST", "/flows/demo%2Fsteps/runs", "{}", nil, bad, codeInvalid},
		{"FlowSpace", "POST", "/flows/de%20mo/runs", "{}", nil, bad, codeInvalid},
		{"FlowLeadingDot", "POST", "/flows/.demo/runs", "{}", nil, bad, codeInvalid},
		{"FlowDot", "POST", "/flows/./runs", "{}", nil, bad, codeInvalid},
		{"FlowTooLong", "POST", "/flows/" + long + "/runs", "{}", nil, bad, codeInvalid},
		{"FlowInvalidUTF8", "POST", "/flows/%ff%fe/runs", "{}", nil, bad, codeInvalid},
		{"FlowNUL", "POST", "/flows/demo%00/runs", "{}", nil, bad, codeInvalid},
		{"FlowUnknown", "POST", "/flows/nope/runs", "{}", nil, notFound, codeNotFound},
		// POST /flows/{flowName}/runs: the body and headers.
		{"TriggerTrailingGarbage", "POST", "/flows/demo/runs", `{"input":1} x`, nil, bad, codeInvalid},
		{"TriggerTwoObjects", "POST", "/flows/demo/runs", `{}{}`, nil, bad, codeInvalid},
		{"TriggerTruncated", "POST", "/flows/demo/runs", `{"input":`, nil, bad, codeInvalid},
		{"TriggerTopLevelArray", "POST", "/flows/demo/runs", `[]`, nil, bad, codeInvalid},
		{"TriggerTopLevelString", "POST", "/flows/demo/runs", `"demo"`, nil, bad, codeInvalid},
		{"TriggerTopLevelNumber", "POST", "/flows/demo/runs", `42`, nil, bad, codeInvalid},
		{"TriggerUnknownField", "POST", "/flows/demo/runs", `{"inputs":{}}`, nil, bad, codeInvalid},
		{"TriggerSingleQuotes", "POST", "/flows/demo/runs", `{'input':1}`, nil, bad, codeInvalid},
		{"TriggerComment", "POST", "/flows/demo/runs", `{"input":1 /* hi */}`, nil, bad, codeInvalid},
		{"TriggerNaN", "POST", "/flows/demo/runs", `{"input":NaN}`, nil, bad, codeInvalid},
		{"TriggerMetadataArray", "POST", "/flows/demo/runs", `{"metadata":[1]}`, nil, bad, codeInvalid},
		{"TriggerMetadataString", "POST", "/flows/demo/runs", `{"metadata":"x"}`, nil, bad, codeInvalid},
		{"TriggerMetadataNumber", "POST", "/flows/demo/runs", `{"metadata":7}`, nil, bad, codeInvalid},
		{"TriggerInputNUL", "POST", "/flows/demo/runs", `{"input":"a\u0000b"}`, nil, bad, codeInvalid},
		{"TriggerInputNULKey", "POST", "/flows/demo/runs", `{"input":{"a\u0000":1}}`, nil, bad, codeInvalid},
		{"TriggerMetadataNUL", "POST", "/flows/demo/runs", `{"metadata":{"a":"\u0000"}}`, nil, bad, codeInvalid},
		{"TriggerInputHugeNumber", "POST", "/flows/demo/runs", `{"input":{"n":1e999}}`, nil, bad, codeInvalid},
		{"TriggerInputLongNumber", "POST", "/flows/demo/runs", `{"input":` + strings.Repeat("9", 400) + `}`, nil, bad, codeInvalid},
		{"TriggerInputInvalidUTF8", "POST", "/flows/demo/runs", "{\"input\":\"\xff\xfe\"}", nil, bad, codeInvalid},
		{"TriggerInvalidUTF8Key", "POST", "/flows/demo/runs", "{\"\xc3\x28\":1}", nil, bad, codeInvalid},
		{"TriggerNested1000", "POST", "/flows/demo/runs", `{"input":` + deep + `}`, nil, bad, codeInvalid},
		{"TriggerOversize", "POST", "/flows/demo/runs", `{"input":"` + huge + `"}`, nil, tooLarge, codeTooLarge},
		{"IdempotencyKeyTooLong", "POST", "/flows/demo/runs", "{}", []string{"Idempotency-Key", strings.Repeat("k", 256)}, bad, codeInvalid},
		{"IdempotencyKeyTab", "POST", "/flows/demo/runs", "{}", []string{"Idempotency-Key", "a\tb"}, bad, codeInvalid},
		{"IdempotencyKeyInvalidUTF8", "POST", "/flows/demo/runs", "{}", []string{"Idempotency-Key", "k\xff"}, bad, codeInvalid},

		// POST /runs/{runId}/steps: wrong JSON types.
		{"StageNumber", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["stage"] = 1 }), nil, bad, codeInvalid},
		{"StageArray", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["stage"] = []string{"s"} }), nil, bad, codeInvalid},
		{"FinalString", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["final"] = "yes" }), nil, bad, codeInvalid},
		{"FinalNumber", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["final"] = 1 }), nil, bad, codeInvalid},
		{"StepsObject", "POST", runs + "/steps", schedule(func(req, st map[string]any) { req["steps"] = st }), nil, bad, codeInvalid},
		{"StepsString", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["steps"] = "c" }), nil, bad, codeInvalid},
		{"StepNotObject", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["steps"] = []any{"c"} }), nil, bad, codeInvalid},
		{"StepNameNumber", "POST", runs + "/steps", schedule(stepSet("name", 3)), nil, bad, codeInvalid},
		{"InstancesString", "POST", runs + "/steps", schedule(stepSet("instances", "4")), nil, bad, codeInvalid},
		{"InstancesFraction", "POST", runs + "/steps", schedule(stepSet("instances", 1.5)), nil, bad, codeInvalid},
		{"InstancesBool", "POST", runs + "/steps", schedule(stepSet("instances", true)), nil, bad, codeInvalid},
		{"MaxRetriesString", "POST", runs + "/steps", schedule(stepSet("maxRetries", "3")), nil, bad, codeInvalid},
		{"DependsOnString", "POST", runs + "/steps", schedule(stepSet("dependsOn", "a")), nil, bad, codeInvalid},
		{"DependsOnNumbers", "POST", runs + "/steps", schedule(stepSet("dependsOn", []int{1})), nil, bad, codeInvalid},
		{"EnvArray", "POST", runs + "/steps", schedule(stepSet("env", []string{"A=1"})), nil, bad, codeInvalid},
		{"EnvString", "POST", runs + "/steps", schedule(stepSet("env", "A=1")), nil, bad, codeInvalid},
		{"EnvValueNumber", "POST", runs + "/steps", schedule(stepSet("env", map[string]any{"A": 1})), nil, bad, codeInvalid},
		{"EnvValueObject", "POST", runs + "/steps", schedule(stepSet("env", map[string]any{"A": map[string]any{}})), nil, bad, codeInvalid},
		{"EnvValueNull", "POST", runs + "/steps", schedule(stepSet("env", map[string]any{"A": nil})), nil, bad, codeInvalid},
		// POST /runs/{runId}/steps: out-of-range numbers.
		{"InstancesZero", "POST", runs + "/steps", schedule(stepSet("instances", 0)), nil, bad, codeInvalid},
		{"InstancesNegative", "POST", runs + "/steps", schedule(stepSet("instances", -1)), nil, bad, codeInvalid},
		{"InstancesExponent", "POST", runs + "/steps", schedule(stepSet("instances", raw("1e9"))), nil, bad, codeInvalid},
		{"InstancesBillion", "POST", runs + "/steps", schedule(stepSet("instances", 1000000000)), nil, bad, codeInvalid},
		{"InstancesOverflow", "POST", runs + "/steps", schedule(stepSet("instances", raw("99999999999999999999"))), nil, bad, codeInvalid},
		{"InstancesHugeNumber", "POST", runs + "/steps", schedule(stepSet("instances", raw("1e999"))), nil, bad, codeInvalid},
		{"InstancesOverLimit", "POST", runs + "/steps", schedule(stepSet("instances", 10001)), nil, bad, codeInvalid},
		{"InstancesOverStageLimit", "POST", runs + "/steps", schedule(func(req, st map[string]any) {
			st["instances"] = 6000
			other := map[string]any{"name": "d", "instances": 6000, "maxRetries": 0}
			req["steps"] = []any{st, other}
		}), nil, bad, codeInvalid},
		{"MaxRetriesNegative", "POST", runs + "/steps", schedule(stepSet("maxRetries", -1)), nil, bad, codeInvalid},
		{"MaxRetriesThousand", "POST", runs + "/steps", schedule(stepSet("maxRetries", 1000)), nil, bad, codeInvalid},
		{"MaxRetriesOverflow", "POST", runs + "/steps", schedule(stepSet("maxRetries", raw("-99999999999999999999"))), nil, bad, codeInvalid},
		{"StepTimeoutHuge", "POST", runs + "/steps", schedule(stepSet("env", map[string]any{"MAXQ_STEP_TIMEOUT": "99999999999999999999"})), nil, bad, codeInvalid},
		// POST /runs/{runId}/steps: missing required fields.
		{"MissingStage", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { delete(req, "stage") }), nil, bad, codeInvalid},
		{"NullStage", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["stage"] = nil }), nil, bad, codeInvalid},
		{"MissingFinal", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { delete(req, "final") }), nil, bad, codeInvalid},
		{"MissingSteps", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { delete(req, "steps") }), nil, bad, codeInvalid},
		{"EmptySteps", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["steps"] = []any{} }), nil, bad, codeInvalid},
		{"MissingStepName", "POST", runs + "/steps", schedule(stepDel("name")), nil, bad, codeInvalid},
		{"MissingInstances", "POST", runs + "/steps", schedule(stepDel("instances")), nil, bad, codeInvalid},
		{"MissingMaxRetries", "POST", runs + "/steps", schedule(stepDel("maxRetries")), nil, bad, codeInvalid},
		// POST /runs/{runId}/steps: names.
		{"UnknownFieldDependOn", "POST", runs + "/steps", schedule(stepSet("dependOn", []string{"a"})), nil, bad, codeInvalid},
		{"UnknownTopLevelField", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["Stages"] = "x" }), nil, bad, codeInvalid},
		{"StageDotDot", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["stage"] = "../x" }), nil, bad, codeInvalid},
		{"StageSlash", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["stage"] = "a/b" }), nil, bad, codeInvalid},
		{"StageSpace", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["stage"] = "a b" }), nil, bad, codeInvalid},
		{"StageLeadingDot", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["stage"] = ".s" }), nil, bad, codeInvalid},
		{"StageEmpty", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["stage"] = "" }), nil, bad, codeInvalid},
		{"StageTooLong", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["stage"] = long }), nil, bad, codeInvalid},
		{"StageNUL", "POST", runs + "/steps", schedule(func(req, _ map[string]any) { req["stage"] = "s\x00" }), nil, bad, codeInvalid},
		{"StepNameTraversal", "POST", runs + "/steps", schedule(stepSet("name", "../../etc/passwd")), nil, bad, codeInvalid},
		{"StepNameSlash", "POST", runs + "/steps", schedule(stepSet("name", "c/step.sh")), nil, bad, codeInvalid},
		{"StepNameSpace", "POST", runs + "/steps", schedule(stepSet("name", "c ")), nil, bad, codeInvalid},
		{"StepNameLeadingDot", "POST", runs + "/steps", schedule(stepSet("name", ".c")), nil, bad, codeInvalid},
		{"StepNameDotDot", "POST", runs + "/steps", schedule(stepSet("name", "..")), nil, bad, codeInvalid},
		{"StepNameTooLong", "POST", runs + "/steps", schedule(stepSet("name", long)), nil, bad, codeInvalid},
		{"StepNameUnknown", "POST", runs + "/steps", schedule(stepSet("name", "zzz")), nil, bad, codeInvalid},
		{"StepNameTwice", "POST", runs + "/steps", schedule(func(req, st map[string]any) { req["steps"] = []any{st, st} }), nil, bad, codeInvalid},
		{"DependsOnTraversal", "POST", runs + "/steps", schedule(stepSet("dependsOn", []string{"../a"})), nil, bad, codeInvalid},
		{"EnvKeyInvalid", "POST", runs + "/steps", schedule(stepSet("env", map[string]any{"A-B": "x"})), nil, bad, codeInvalid},
		{"EnvKeyEmpty", "POST", runs + "/steps", schedule(stepSet("env", map[string]any{"": "x"})), nil, bad, codeInvalid},
		{"EnvKeyMaxq", "POST", runs + "/steps", schedule(stepSet("env", map[string]any{"MAXQ_API": "http://evil"})), nil, bad, codeInvalid},
		{"EnvValueNUL", "POST", runs + "/steps", schedule(stepSet("env", map[string]any{"A": "x\x00y"})), nil, bad, codeInvalid},
		{"EnvKeyNUL", "POST", runs + "/steps", schedule(stepSet("env", map[string]any{"A\x00": "x"})), nil, bad, codeInvalid},
		// POST /runs/{runId}/steps: bodies that are not one JSON object.
		{"ScheduleEmptyBody", "POST", runs + "/steps", "", nil, bad, codeInvalid},
		{"ScheduleWhitespaceBody", "POST", runs + "/steps", " \n\t ", nil, bad, codeInvalid},
		{"ScheduleNull", "POST", runs + "/steps", "null", nil, bad, codeInvalid},
		{"TriggerNull", "POST", "/flows/demo/runs", "null", nil, bad, codeInvalid},
		{"ScheduleTopLevelArray", "POST", runs + "/steps", "[" + valid + "]", nil, bad, codeInvalid},
		{"ScheduleTopLevelString", "POST", runs + "/steps", `"stage"`, nil, bad, codeInvalid},
		{"ScheduleTrailingGarbage", "POST", runs + "/steps", valid + "garbage", nil, bad, codeInvalid},
		{"ScheduleTrailingBrace", "POST", runs + "/steps", valid + "}", nil, bad, codeInvalid},
		{"ScheduleTwoObjects", "POST", runs + "/steps", valid + valid, nil, bad, codeInvalid},
		{"ScheduleTruncated", "POST", runs + "/steps", valid[:len(valid)-2], nil, bad, codeInvalid},
		{"ScheduleNested1000", "POST", runs + "/steps", `{"stage":` + deep + `}`, nil, bad, codeInvalid},
		{"ScheduleInvalidUTF8", "POST", runs + "/steps", strings.Replace(valid, `"bad"`, "\"b\xffd\"", 1), nil, bad, codeInvalid},
		{"ScheduleOversize", "POST", runs + "/steps", schedule(stepSet("env", map[string]any{"A": huge})), nil, tooLarge, codeTooLarge},
		{"ScheduleRunDotDot", "POST", "/runs/../steps", valid, nil, bad, codeInvalid},
		{"ScheduleRunDotDotEncodedSlash", "POST", "/runs/..%2F..%2Fflows/steps", valid, nil, bad, codeInvalid},
		{"ScheduleRunEncodedDotDot", "POST", "/runs/%2e%2e/steps", valid, nil, bad, codeInvalid},
		{"ScheduleRunUnknown", "POST", "/runs/0190a3c0-0000-7000-8000-000000000000/steps", valid, nil, notFound, codeNotFound},
		{"ScheduleRunNotUUID", "POST", "/runs/run'%3B--/steps", valid, nil, notFound, codeNotFound},

		// PATCH /steps/{stepId}.
		{"PatchStatusRunning", "PATCH", stepPath, `{"status":"running"}`, nil, bad, codeInvalid},
		{"PatchStatusPending", "PATCH", stepPath, `{"status":"pending"}`, nil, bad, codeInvalid},
		{"PatchStatusCancelled", "PATCH", stepPath, `{"status":"cancelled"}`, nil, bad, codeInvalid},
		{"PatchStatusUnknown", "PATCH", stepPath, `{"status":"done"}`, nil, bad, codeInvalid},
		{"PatchStatusUpperCase", "PATCH", stepPath, `{"status":"COMPLETED"}`, nil, bad, codeInvalid},
		{"PatchStatusEmpty", "PATCH", stepPath, `{"status":""}`, nil, bad, codeInvalid},
		{"PatchStatusNumber", "PATCH", stepPath, `{"status":3}`, nil, bad, codeInvalid},
		{"PatchStatusBool", "PATCH", stepPath, `{"status":true}`, nil, bad, codeInvalid},
		{"PatchNothing", "PATCH", stepPath, `{}`, nil, bad, codeInvalid},
		{"PatchNull", "PATCH", stepPath, `null`, nil, bad, codeInvalid},
		{"PatchEmptyBody", "PATCH", stepPath, "", nil, bad, codeInvalid},
		{"PatchErrorWithoutStatus", "PATCH", stepPath, `{"error":"x"}`, nil, bad, codeInvalid},
		{"PatchCompletedWithError", "PATCH", stepPath, `{"status":"completed","error":"x"}`, nil, bad, codeInvalid},
		{"PatchUnknownField", "PATCH", stepPath, `{"state":"completed"}`, nil, bad, codeInvalid},
		{"PatchOutputNUL", "PATCH", stepPath, `{"output":"\u0000"}`, nil, bad, codeInvalid},
		{"PatchErrorNUL", "PATCH", stepPath, `{"status":"failed","error":{"m":"\u0000"}}`, nil, bad, codeInvalid},
		{"PatchOutputHugeNumber", "PATCH", stepPath, `{"output":-1e999}`, nil, bad, codeInvalid},
		{"PatchOutputNested1000", "PATCH", stepPath, `{"output":` + deep + `}`, nil, bad, codeInvalid},
		{"PatchTrailingGarbage", "PATCH", stepPath, `{"status":"completed"},`, nil, bad, codeInvalid},
		{"PatchTwoObjects", "PATCH", stepPath, `{"status":"completed"} {"status":"failed"}`, nil, bad, codeInvalid},
		{"PatchInvalidUTF8", "PATCH", stepPath, "{\"output\":\"\xed\xa0\x80\"}", nil, bad, codeInvalid},
		{"PatchOversize", "PATCH", stepPath, `{"output":"` + huge + `"}`, nil, tooLarge, codeTooLarge},
		{"PatchStepDotDot", "PATCH", "/steps/..", `{"status":"failed"}`, nil, bad, codeInvalid},
		{"PatchStepEncodedDotDot", "PATCH", "/steps/%2e%2e", `{"status":"failed"}`, nil, bad, codeInvalid},
		{"PatchStepUnknown", "PATCH", "/steps/0190a3c0-0000-7000-8000-000000000000", `{"status":"failed"}`, nil, notFound, codeNotFound},
		{"PatchStepNotUUID", "PATCH", "/steps/x%00y", `{"status":"failed"}`, nil, notFound, codeNotFound},

		// POST /runs/{runId}/artifacts: missing fields.
		{"ArtifactMissingStepID", "POST", runs + "/artifacts", artifact(del("stepId")), nil, bad, codeInvalid},
		{"ArtifactEmptyStepID", "POST", runs + "/artifacts", artifact(set("stepId", "")), nil, bad, codeInvalid},
		{"ArtifactMissingStepName", "POST", runs + "/artifacts", artifact(del("stepName")), nil, bad, codeInvalid},
		{"ArtifactMissingSequence", "POST", runs + "/artifacts", artifact(del("sequence")), nil, bad, codeInvalid},
		{"ArtifactMissingName", "POST", runs + "/artifacts", artifact(del("name")), nil, bad, codeInvalid},
		{"ArtifactMissingValue", "POST", runs + "/artifacts", artifact(del("value")), nil, bad, codeInvalid},
		{"ArtifactNullValue", "POST", runs + "/artifacts", artifact(set("value", nil)), nil, bad, codeInvalid},
		// POST /runs/{runId}/artifacts: wrong types and ranges.
		{"ArtifactStepIDNumber", "POST", runs + "/artifacts", artifact(set("stepId", 1)), nil, bad, codeInvalid},
		{"ArtifactSequenceNegative", "POST", runs + "/artifacts", artifact(set("sequence", -1)), nil, bad, codeInvalid},
		{"ArtifactSequenceString", "POST", runs + "/artifacts", artifact(set("sequence", "0")), nil, bad, codeInvalid},
		{"ArtifactSequenceFraction", "POST", runs + "/artifacts", artifact(set("sequence", 0.5)), nil, bad, codeInvalid},
		{"ArtifactSequenceOverflow", "POST", runs + "/artifacts", artifact(set("sequence", raw("99999999999999999999"))), nil, bad, codeInvalid},
		{"ArtifactSequenceOverInt32", "POST", runs + "/artifacts", artifact(set("sequence", 1<<31)), nil, bad, codeInvalid},
		{"ArtifactSequenceWrong", "POST", runs + "/artifacts", artifact(set("sequence", 1)), nil, bad, codeInvalid},
		{"ArtifactStepNameTraversal", "POST", runs + "/artifacts", artifact(set("stepName", "../a")), nil, bad, codeInvalid},
		{"ArtifactStepNameWrong", "POST", runs + "/artifacts", artifact(set("stepName", "b")), nil, bad, codeInvalid},
		{"ArtifactStepIDUnknown", "POST", runs + "/artifacts", artifact(set("stepId", "0190a3c0-0000-7000-8000-000000000000")), nil, bad, codeInvalid},
		{"ArtifactStepIDInjection", "POST", runs + "/artifacts", artifact(set("stepId", "' OR 1=1 --")), nil, bad, codeInvalid},
		// POST /runs/{runId}/artifacts: names, values, tags, metadata.
		{"ArtifactNameBell", "POST", runs + "/artifacts", artifact(set("name", "a\u0007b")), nil, bad, codeInvalid},
		{"ArtifactNameNewline", "POST", runs + "/artifacts", artifact(set("name", "a\nb")), nil, bad, codeInvalid},
		{"ArtifactNameEscape", "POST", runs + "/artifacts", artifact(set("name", "\x1b[31mred")), nil, bad, codeInvalid},
		{"ArtifactNameDelete", "POST", runs + "/artifacts", artifact(set("name", "a\x7f")), nil, bad, codeInvalid},
		{"ArtifactNameBidiOverride", "POST", runs + "/artifacts", artifact(set("name", "a\u202eb")), nil, bad, codeInvalid},
		{"ArtifactNameNUL", "POST", runs + "/artifacts", artifact(set("name", "a\x00")), nil, bad, codeInvalid},
		{"ArtifactNameEmpty", "POST", runs + "/artifacts", artifact(set("name", "")), nil, bad, codeInvalid},
		{"ArtifactNameSpaces", "POST", runs + "/artifacts", artifact(set("name", " a ")), nil, bad, codeInvalid},
		{"ArtifactNameTooLong", "POST", runs + "/artifacts", artifact(set("name", strings.Repeat("n", 257))), nil, bad, codeInvalid},
		{"ArtifactValueNUL", "POST", runs + "/artifacts", artifact(set("value", "\x00")), nil, bad, codeInvalid},
		{"ArtifactValueNestedNUL", "POST", runs + "/artifacts", artifact(set("value", map[string]any{"v": []any{"ok", "\x00"}})), nil, bad, codeInvalid},
		{"ArtifactValueHugeNumber", "POST", runs + "/artifacts", artifact(set("value", raw("1e999"))), nil, bad, codeInvalid},
		{"ArtifactValueNested1000", "POST", runs + "/artifacts", artifact(set("value", raw(deep))), nil, bad, codeInvalid},
		{"ArtifactValueInvalidUTF8", "POST", runs + "/artifacts", strings.Replace(artifact(set("value", "VALUE")), "VALUE", "\xc0\xaf", 1), nil, bad, codeInvalid},
		{"ArtifactValueOversize", "POST", runs + "/artifacts", artifact(set("value", huge)), nil, tooLarge, codeTooLarge},
		{"ArtifactTagsString", "POST", runs + "/artifacts", artifact(set("tags", "news")), nil, bad, codeInvalid},
		{"ArtifactTagsObject", "POST", runs + "/artifacts", artifact(set("tags", map[string]any{"news": true})), nil, bad, codeInvalid},
		{"ArtifactTagsNumbers", "POST", runs + "/artifacts", artifact(set("tags", []int{1, 2})), nil, bad, codeInvalid},
		{"ArtifactTooManyTags", "POST", runs + "/artifacts", artifact(set("tags", manyTags)), nil, bad, codeInvalid},
		{"ArtifactTagEmpty", "POST", runs + "/artifacts", artifact(set("tags", []string{""})), nil, bad, codeInvalid},
		{"ArtifactTagControl", "POST", runs + "/artifacts", artifact(set("tags", []string{"a\tb"})), nil, bad, codeInvalid},
		{"ArtifactTagTooLong", "POST", runs + "/artifacts", artifact(set("tags", []string{strings.Repeat("t", 129)})), nil, bad, codeInvalid},
		{"ArtifactMetadataArray", "POST", runs + "/artifacts", artifact(set("metadata", []any{1})), nil, bad, codeInvalid},
		{"ArtifactMetadataString", "POST", runs + "/artifacts", artifact(set("metadata", "x")), nil, bad, codeInvalid},
		{"ArtifactMetadataNumber", "POST", runs + "/artifacts", artifact(set("metadata", 1)), nil, bad, codeInvalid},
		{"ArtifactMetadataNUL", "POST", runs + "/artifacts", artifact(set("metadata", map[string]any{"k": "\x00"})), nil, bad, codeInvalid},
		{"ArtifactUnknownField", "POST", runs + "/artifacts", artifact(set("step_id", stepA)), nil, bad, codeInvalid},
		{"ArtifactEmptyBody", "POST", runs + "/artifacts", "", nil, bad, codeInvalid},
		{"ArtifactTopLevelArray", "POST", runs + "/artifacts", "[]", nil, bad, codeInvalid},
		{"ArtifactRunDotDot", "POST", "/runs/..%2F/artifacts", artifact(set("name", "n")), nil, bad, codeInvalid},
		{"ArtifactRunUnknown", "POST", "/runs/0190a3c0-0000-7000-8000-000000000000/artifacts", artifact(set("name", "n")), nil, notFound, codeNotFound},

		// GET list endpoints: query parameters.
		{"RunsLimitHuge", "GET", "/runs?limit=99999999999999999999", nil, nil, bad, codeInvalid},
		{"RunsLimitExponent", "GET", "/runs?limit=1e2", nil, nil, bad, codeInvalid},
		{"RunsLimitZero", "GET", "/runs?limit=0", nil, nil, bad, codeInvalid},
		{"RunsOffsetNegative", "GET", "/runs?offset=-1", nil, nil, bad, codeInvalid},
		{"RunsOffsetHuge", "GET", "/runs?offset=99999999999", nil, nil, bad, codeInvalid},
		{"RunsFlowNameTraversal", "GET", "/runs?flowName=..%2Fetc", nil, nil, bad, codeInvalid},
		{"RunsFlowNameInvalidUTF8", "GET", "/runs?flowName=%ff", nil, nil, bad, codeInvalid},
		{"RunsFlowNameNUL", "GET", "/runs?flowName=demo%00", nil, nil, bad, codeInvalid},
		{"RunsStatusUnknown", "GET", "/runs?status=done", nil, nil, bad, codeInvalid},
		{"RunsSortByInjection", "GET", "/runs?sortBy=created_at%3BDROP+TABLE+run", nil, nil, bad, codeInvalid},
		{"RunsSortOrderInjection", "GET", "/runs?sortOrder=asc,+id", nil, nil, bad, codeInvalid},
		{"StepsLimitHuge", "GET", runs + "/steps?limit=1000000000", nil, nil, bad, codeInvalid},
		{"StepsSequenceNegative", "GET", runs + "/steps?sequence=-1", nil, nil, bad, codeInvalid},
		{"StepsSequenceHuge", "GET", runs + "/steps?sequence=99999999999999999999", nil, nil, bad, codeInvalid},
		{"StepsStageInvalidUTF8", "GET", runs + "/steps?stage=%c3%28", nil, nil, bad, codeInvalid},
		{"StepsNameSlash", "GET", runs + "/steps?name=a%2Fb", nil, nil, bad, codeInvalid},
		{"StepsNameTooLong", "GET", runs + "/steps?name=" + long, nil, nil, bad, codeInvalid},
		{"StepsStatusNUL", "GET", runs + "/steps?status=%00", nil, nil, bad, codeInvalid},
		{"StepsRunEncodedDotDot", "GET", "/runs/%2e%2e/steps", nil, nil, bad, codeInvalid},
		{"StepsRunUnknown", "GET", "/runs/0190a3c0-0000-7000-8000-000000000000/steps", nil, nil, notFound, codeNotFound},
		{"ArtifactsLimitHuge", "GET", runs + "/artifacts?limit=99999999999999999999", nil, nil, bad, codeInvalid},
		{"ArtifactsSequenceFraction", "GET", runs + "/artifacts?sequence=0.5", nil, nil, bad, codeInvalid},
		{"ArtifactsStepNameLeadingDot", "GET", runs + "/artifacts?stepName=.a", nil, nil, bad, codeInvalid},
		{"ArtifactsNameInvalidUTF8", "GET", runs + "/artifacts?name=%ff", nil, nil, bad, codeInvalid},
		{"ArtifactsNamePrefixNUL", "GET", runs + "/artifacts?namePrefix=%00", nil, nil, bad, codeInvalid},
		{"ArtifactsTagsInvalidUTF8", "GET", runs + "/artifacts?tags=a,%fe", nil, nil, bad, codeInvalid},
		{"ArtifactsSortByValue", "GET", runs + "/artifacts?sortBy=value", nil, nil, bad, codeInvalid},
		{"ArtifactsRunUnknown", "GET", "/runs/0190a3c0-0000-7000-8000-000000000000/artifacts", nil, nil, notFound, codeNotFound},

		// POST /runs/{runId}/cancel and /retry: only the path can be wrong.
		{"CancelRunEncodedDotDot", "POST", "/runs/%2e%2e/cancel", nil, nil, bad, codeInvalid},
		{"CancelRunUnknown", "POST", "/runs/0190a3c0-0000-7000-8000-000000000000/cancel", nil, nil, notFound, codeNotFound},
		{"RetryRunNotUUID", "POST", "/runs/..x/retry", nil, nil, notFound, codeNotFound},

		// Unknown routes and wrong methods.
		{"RouteUnknown", "GET", "/nope", nil, nil, notFound, codeNotFound},
		{"RouteFlowWithoutRuns", "GET", "/flows/demo", nil, nil, notFound, codeNotFound},
		{"RouteStepsWithoutID", "GET", "/steps", nil, nil, notFound, codeNotFound},
		{"RouteTrailingSlash", "GET", "/runs/", nil, nil, notFound, codeNotFound},
		{"RouteTooDeep", "GET", runs + "/steps/extra", nil, nil, notFound, codeNotFound},
		{"RouteDoubleSlash", "GET", "/runs//steps", nil, nil, bad, codeInvalid},
		{"RouteDotSegment", "GET", runs + "/./steps", nil, nil, bad, codeInvalid},
		{"RouteEscapeRoot", "GET", "/../../etc/passwd", nil, nil, bad, codeInvalid},
		{"MethodDeleteRun", "DELETE", runs, nil, nil, method, codeMethod},
		{"MethodPatchRun", "PATCH", runs, `{"status":"cancelled"}`, nil, method, codeMethod},
		{"MethodPutStep", "PUT", stepPath, `{"status":"completed"}`, nil, method, codeMethod},
		{"MethodPostStep", "POST", stepPath, `{"status":"completed"}`, nil, method, codeMethod},
		{"MethodDeleteStep", "DELETE", stepPath, nil, nil, method, codeMethod},
		{"MethodPostFlows", "POST", "/flows", "{}", nil, method, codeMethod},
		{"MethodGetTrigger", "GET", "/flows/demo/runs", nil, nil, method, codeMethod},
		{"MethodPostRuns", "POST", "/runs", "{}", nil, method, codeMethod},
		{"MethodPutArtifacts", "PUT", runs + "/artifacts", "{}", nil, method, codeMethod},
		{"MethodDeleteArtifact", "DELETE", runs + "/artifacts/0190a3c0-0000-7000-8000-000000000000", nil, nil, method, codeMethod},
		{"MethodOptions", "OPTIONS", "/flows", nil, nil, method, codeMethod},
		{"MethodCustom", "BREW", "/flows", nil, nil, method, codeMethod},
	}

	t.Run("Requests", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				cb := *b
				cb.t = t
				r := cb.do(c.method, c.path, c.body, c.headers...)
				require.Less(t, r.Status, 500, "body: %s", r.Raw)
				requireError(t, r, c.status, c.code)
				if c.status == method {
					require.NotEmpty(t, r.Header.Get("Allow"))
				}
			})
		}
	})

	// Nothing was created, changed or lost.
	require.Equal(t, before, counts(b, run, stepA))

	// The requests the bad ones were made from are good: each case failed
	// for what it changed.
	b.do("POST", runs+"/steps", valid).must(t, 201)
	b.do("POST", runs+"/artifacts", artifact(func(map[string]any) {})).must(t, 201)
	b.do("PATCH", stepPath, `{"status":"completed"}`).must(t, 200)
}

// snapshot is what the bad requests must leave as it was.
type snapshot struct {
	Runs, Steps, Artifacts int
	StepStatus             string
	StepOutput             any
	Stages                 []string
}

func counts(b *testBundle, runID, stepID string) snapshot {
	b.t.Helper()
	total := func(path string) int {
		return int(b.do("GET", path, nil).must(b.t, http.StatusOK)["pagination"].(map[string]any)["total"].(float64))
	}
	st := b.do("GET", "/steps/"+stepID, nil).must(b.t, http.StatusOK)
	return snapshot{
		Runs:       total("/runs"),
		Steps:      total("/runs/" + runID + "/steps"),
		Artifacts:  total("/runs/" + runID + "/artifacts"),
		StepStatus: st["status"].(string),
		StepOutput: st["output"],
		Stages:     ids(list(b.do("GET", "/runs/"+runID, nil).must(b.t, http.StatusOK), "stages"), "name"),
	}
}
