package api_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/store"
)

func TestFlowList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A step whose script is not executable is reported, not listed.
	require.NoError(t, os.MkdirAll(filepath.Join(b.root, "demo", "steps", "broken"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(b.root, "demo", "steps", "broken", "step.sh"), []byte("#!/bin/sh\n"), 0o644))

	body := b.do("GET", "/flows", nil).must(t, 200)
	flows := list(body, "flows")
	require.Equal(t, []string{"demo", "other"}, ids(flows, "name"))
	demo := flows[0].(map[string]any)
	require.Equal(t, filepath.Join(b.root, "demo"), demo["path"])
	require.Equal(t, []any{"a", "b", "c", "d"}, demo["steps"])
	problems := list(body, "problems")
	require.Len(t, problems, 1)
	require.Contains(t, problems[0].(map[string]any)["message"], "not executable")

	// Discovery is fresh: a flow added now is listed at once.
	writeScript(t, filepath.Join(b.root, "late", "flow.sh"))
	require.Equal(t, []string{"demo", "late", "other"}, ids(list(b.do("GET", "/flows", nil).must(t, 200), "flows"), "name"))
}

func TestRunTrigger(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("Created", func(t *testing.T) {
		body := b.do("POST", "/flows/demo/runs", map[string]any{
			"input": map[string]any{"any": "json data"}, "metadata": map[string]any{"user": "alice"}}).must(t, 201)
		require.Equal(t, "demo", body["flowName"])
		require.Equal(t, "pending", body["status"])
		require.Equal(t, map[string]any{"any": "json data"}, body["input"])
		require.Equal(t, map[string]any{"user": "alice"}, body["metadata"])
		require.NotZero(t, body["createdAt"])
		require.Nil(t, body["startedAt"])
		require.Nil(t, body["completedAt"])
		require.Len(t, body["id"], 36)

		// The run and its first flow call are both there.
		var calls int
		require.NoError(t, b.store.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM flow_call WHERE run_id = $1 AND status = 'pending' AND completed_stage IS NULL`, body["id"]).Scan(&calls))
		require.Equal(t, 1, calls)
	})
	t.Run("EmptyBody", func(t *testing.T) {
		body := b.do("POST", "/flows/demo/runs", "").must(t, 201)
		require.Nil(t, body["input"])
	})
	t.Run("IdempotencyKey", func(t *testing.T) {
		first := b.do("POST", "/flows/demo/runs", map[string]any{}, "Idempotency-Key", "ci-123").must(t, 201)
		again := b.do("POST", "/flows/demo/runs", map[string]any{}, "Idempotency-Key", "ci-123").must(t, 200)
		require.Equal(t, first["id"], again["id"])
		other := b.do("POST", "/flows/other/runs", map[string]any{}, "Idempotency-Key", "ci-123").must(t, 201)
		require.NotEqual(t, first["id"], other["id"])
	})
	t.Run("UnknownFlow", func(t *testing.T) {
		requireError(t, b.do("POST", "/flows/nope/runs", "{}"), 404, "NOT_FOUND")
	})
}

func TestRunGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	b.schedule(id, "first", false, step("a", 1))
	b.schedule(id, "second", true, step("b", 1, "a"))

	body := b.do("GET", "/runs/"+id, nil).must(t, 200)
	require.Equal(t, id, body["id"])
	for _, k := range []string{"flowName", "status", "input", "output", "error", "metadata", "createdAt", "startedAt", "completedAt", "stages"} {
		require.Contains(t, body, k)
	}
	stages := list(body, "stages")
	require.Equal(t, []string{"first", "second"}, ids(stages, "name"))
	first := stages[0].(map[string]any)
	require.Equal(t, "running", first["status"])
	require.Equal(t, false, first["final"])
	require.Equal(t, true, stages[1].(map[string]any)["final"])

	requireError(t, b.do("GET", "/runs/0190a3c0-0000-7000-8000-000000000000", nil), 404, "NOT_FOUND")
	requireError(t, b.do("GET", "/runs/not-a-uuid", nil), 404, "NOT_FOUND")
}

func TestRunList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var demo []string
	for i := 0; i < 5; i++ {
		demo = append(demo, b.trigger("demo"))
	}
	other := b.trigger("other")
	// One run finished, to filter on.
	_, err := b.store.Pool().Exec(context.Background(), `UPDATE run SET status = 'completed', completed_at = created_at + 5 WHERE id = $1`, demo[0])
	require.NoError(t, err)

	runsOf := func(query string) ([]string, map[string]any) {
		body := b.do("GET", "/runs"+query, nil).must(t, 200)
		return ids(list(body, "runs"), "id"), body["pagination"].(map[string]any)
	}
	all, pg := runsOf("")
	require.Len(t, all, 6)
	require.Equal(t, map[string]any{"total": 6.0, "limit": 20.0, "offset": 0.0}, pg)
	require.Equal(t, other, all[0], "newest first by default")

	got, _ := runsOf("?sortOrder=asc")
	require.Equal(t, demo[0], got[0])
	got, pg = runsOf("?flowName=demo")
	require.ElementsMatch(t, demo, got)
	require.Equal(t, 5.0, pg["total"])
	got, _ = runsOf("?status=completed")
	require.Equal(t, []string{demo[0]}, got)
	got, _ = runsOf("?status=pending&flowName=other")
	require.Equal(t, []string{other}, got)
	got, _ = runsOf("?status=failed")
	require.Empty(t, got)

	// Pagination edges.
	got, pg = runsOf("?limit=2&offset=0&sortOrder=asc")
	require.Equal(t, demo[:2], got)
	require.Equal(t, map[string]any{"total": 6.0, "limit": 2.0, "offset": 0.0}, pg)
	got, _ = runsOf("?limit=2&offset=4&sortOrder=asc")
	require.Equal(t, []string{demo[4], other}, got)
	got, pg = runsOf("?limit=2&offset=6")
	require.Empty(t, got)
	require.Equal(t, 6.0, pg["total"], "the total holds past the end")
	got, pg = runsOf("?limit=100&offset=1000000")
	require.Empty(t, got)
	require.Equal(t, 6.0, pg["total"])
	got, _ = runsOf("?limit=1")
	require.Len(t, got, 1)

	got, _ = runsOf("?sortBy=flowName&sortOrder=desc")
	require.Equal(t, other, got[0])
	got, _ = runsOf("?sortBy=completedAt&sortOrder=asc")
	require.Equal(t, demo[0], got[0], "NULLs sort last ascending")

	for _, q := range []string{"?limit=0", "?limit=101", "?limit=-1", "?limit=abc", "?offset=-1", "?offset=1e3",
		"?status=done", "?sortBy=secret", "?sortOrder=up", "?flowName=../etc", "?limit=99999999999999999999"} {
		requireError(t, b.do("GET", "/runs"+q, nil), 400, "VALIDATION_ERROR")
	}
}

func TestStageSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("Instances", func(t *testing.T) {
		id := b.trigger("demo")
		body := b.schedule(id, "fetch", false, step("a", 1), step("b", 3, "a"))
		require.Equal(t, "fetch", body["stage"])
		require.Equal(t, 4.0, body["scheduled"])
		steps := list(body, "steps")
		var names []string
		for _, s := range steps {
			m := s.(map[string]any)
			names = append(names, fmt.Sprintf("%s[%v]", m["name"], m["sequence"]))
			require.Equal(t, "pending", m["status"])
		}
		require.Equal(t, []string{"a[0]", "b[0]", "b[1]", "b[2]"}, names)

		// A step waits for every instance of its dependencies.
		var left int
		require.NoError(t, b.store.Pool().QueryRow(context.Background(),
			`SELECT deps_left FROM step WHERE run_id = $1 AND name = 'b' AND sequence = 0`, id).Scan(&left))
		require.Equal(t, 1, left)
	})
	t.Run("DependsOnEarlierStage", func(t *testing.T) {
		id := b.trigger("demo")
		b.schedule(id, "one", false, step("a", 2))
		b.schedule(id, "two", false, step("c", 1, "a"))
		var left int
		require.NoError(t, b.store.Pool().QueryRow(context.Background(),
			`SELECT deps_left FROM step WHERE run_id = $1 AND name = 'c'`, id).Scan(&left))
		require.Equal(t, 2, left)
	})
	t.Run("DuplicateStage", func(t *testing.T) {
		id := b.trigger("demo")
		first := b.schedule(id, "one", false, step("a", 1))
		// The same stage again (a flow.sh run twice) is answered as it is.
		again := b.do("POST", "/runs/"+id+"/steps", map[string]any{"stage": "one", "final": false,
			"steps": []any{step("a", 1)}}).must(t, 200)
		require.Equal(t, first, again)
		requireError(t, b.do("POST", "/runs/"+id+"/steps", map[string]any{"stage": "one", "final": true,
			"steps": []any{step("a", 1)}}), 409, "CONFLICT")
		requireError(t, b.do("POST", "/runs/"+id+"/steps", map[string]any{"stage": "one", "final": false,
			"steps": []any{step("b", 1)}}), 409, "CONFLICT")
		requireError(t, b.do("POST", "/runs/"+id+"/steps", map[string]any{"stage": "two", "final": false,
			"steps": []any{step("a", 1)}}), 409, "CONFLICT")
	})
	t.Run("Errors", func(t *testing.T) {
		id := b.trigger("demo")
		cases := []struct {
			name   string
			body   map[string]any
			status int
			field  string
		}{
			{"UnknownStep", map[string]any{"stage": "s", "final": false, "steps": []any{step("zzz", 1)}}, 400, "steps[0].name"},
			{"StepOfOtherFlow", map[string]any{"stage": "s", "final": false, "steps": []any{step("x", 1)}}, 400, "steps[0].name"},
			{"UnknownDependency", map[string]any{"stage": "s", "final": false, "steps": []any{step("a", 1, "nope")}}, 400, "steps"},
			{"Cycle", map[string]any{"stage": "s", "final": false, "steps": []any{step("a", 1, "b"), step("b", 1, "a")}}, 400, "steps"},
			{"SelfDependency", map[string]any{"stage": "s", "final": false, "steps": []any{step("a", 1, "a")}}, 400, "steps"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := b.do("POST", "/runs/"+id+"/steps", c.body)
				requireError(t, r, c.status, "VALIDATION_ERROR")
				require.Contains(t, r.Body["details"], c.field)
			})
		}
		requireError(t, b.do("POST", "/runs/0190a3c0-0000-7000-8000-000000000000/steps",
			map[string]any{"stage": "s", "final": false, "steps": []any{step("a", 1)}}), 404, "NOT_FOUND")
	})
	t.Run("EndedRun", func(t *testing.T) {
		id := b.trigger("demo")
		_, err := b.store.Pool().Exec(context.Background(), `UPDATE run SET status = 'failed', completed_at = 1 WHERE id = $1`, id)
		require.NoError(t, err)
		requireError(t, b.do("POST", "/runs/"+id+"/steps", map[string]any{"stage": "s", "final": true,
			"steps": []any{step("a", 1)}}), 409, "CONFLICT")
	})
	t.Run("Env", func(t *testing.T) {
		id := b.trigger("demo")
		s := step("a", 1)
		s["env"] = map[string]any{"SOURCE": "reuters", "MAXQ_STEP_TIMEOUT": "30"}
		body := b.schedule(id, "s", true, s)
		stepID := list(body, "steps")[0].(map[string]any)["id"].(string)
		got := b.do("GET", "/steps/"+stepID, nil).must(t, 200)
		require.Equal(t, map[string]any{"SOURCE": "reuters", "MAXQ_STEP_TIMEOUT": "30"}, got["env"])
		for _, env := range []map[string]any{{"MAXQ_RUN_ID": "x"}, {"1BAD": "x"}, {"A": 1}, {"MAXQ_STEP_TIMEOUT": "soon"},
			{"MAXQ_STEP_TIMEOUT": "-5"}, {"A=B": "x"}} {
			s := step("b", 1)
			s["env"] = env
			requireError(t, b.do("POST", "/runs/"+id+"/steps", map[string]any{"stage": "t", "final": false, "steps": []any{s}}),
				400, "VALIDATION_ERROR")
		}
	})
}

// A dependency that already failed fails its new dependents at once, and
// the stage with them; the stage's failure is called back to the flow.
func TestStageScheduleOnFailedDependency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	body := b.schedule(id, "one", false, step("a", 1))
	aID := list(body, "steps")[0].(map[string]any)["id"].(string)
	b.do("PATCH", "/steps/"+aID, map[string]any{"status": "failed", "error": "boom"}).must(t, 200)

	body = b.schedule(id, "two", false, step("b", 1, "a"), step("c", 1))
	statuses := map[string]string{}
	for _, s := range list(body, "steps") {
		m := s.(map[string]any)
		statuses[m["name"].(string)] = m["status"].(string)
	}
	require.Equal(t, map[string]string{"b": "failed", "c": "cancelled"}, statuses)
	bID := list(body, "steps")[0].(map[string]any)["id"].(string)
	got := b.do("GET", "/steps/"+bID, nil).must(t, 200)
	require.Equal(t, map[string]any{"reason": "dependency_failed", "failed_step": "a"}, got["error"])

	var calls []string
	rows, err := b.store.Pool().Query(context.Background(),
		`SELECT coalesce(failed_stage, '') FROM flow_call WHERE run_id = $1 AND failed_stage IS NOT NULL ORDER BY created_at`, id)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		calls = append(calls, s)
	}
	require.Equal(t, []string{"one", "two"}, calls)
}

func TestSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	b.schedule(id, "one", false, step("a", 2))
	body := b.schedule(id, "two", false, step("b", 3, "a"), step("c", 1))
	bID := list(body, "steps")[0].(map[string]any)["id"].(string)

	t.Run("Get", func(t *testing.T) {
		got := b.do("GET", "/steps/"+bID, nil).must(t, 200)
		want := map[string]any{"id": bID, "runId": id, "stage": "two", "name": "b", "sequence": 0.0, "status": "pending",
			"dependsOn": []any{"a"}, "retryCount": 0.0, "maxRetries": 0.0, "env": map[string]any{}, "output": nil, "error": nil,
			"startedAt": nil, "completedAt": nil, "durationMs": nil}
		for k, v := range want {
			require.Equal(t, v, got[k], k)
		}
		require.NotZero(t, got["createdAt"])
		requireError(t, b.do("GET", "/steps/0190a3c0-0000-7000-8000-000000000000", nil), 404, "NOT_FOUND")
	})
	t.Run("List", func(t *testing.T) {
		names := func(q string) []string {
			body := b.do("GET", "/runs/"+id+"/steps"+q, nil).must(t, 200)
			var out []string
			for _, s := range list(body, "steps") {
				m := s.(map[string]any)
				out = append(out, fmt.Sprintf("%s[%v]", m["name"], m["sequence"]))
			}
			return out
		}
		require.Equal(t, []string{"a[0]", "a[1]", "b[0]", "b[1]", "b[2]", "c[0]"}, names(""))
		require.Equal(t, []string{"b[0]", "b[1]", "b[2]", "c[0]"}, names("?stage=two"))
		require.Equal(t, []string{"b[0]", "b[1]", "b[2]"}, names("?name=b"))
		require.Equal(t, []string{"b[1]"}, names("?name=b&sequence=1"))
		require.Equal(t, []string{"a[1]", "b[1]"}, names("?sequence=1"))
		require.Equal(t, []string{"a[0]", "a[1]", "b[0]", "b[1]", "b[2]", "c[0]"}, names("?status=pending"))
		require.Empty(t, names("?status=running"))
		require.Equal(t, []string{"c[0]", "b[2]"}, names("?sortOrder=desc&limit=2"))
		require.Equal(t, []string{"b[2]", "c[0]"}, names("?limit=2&offset=4"))
		require.Equal(t, []string{"a[0]", "b[0]", "c[0]", "a[1]", "b[1]", "b[2]"}, names("?sortBy=sequence"))
		body := b.do("GET", "/runs/"+id+"/steps?limit=2&offset=10", nil).must(t, 200)
		require.Equal(t, map[string]any{"total": 6.0, "limit": 2.0, "offset": 10.0}, body["pagination"])
		requireError(t, b.do("GET", "/runs/0190a3c0-0000-7000-8000-000000000000/steps", nil), 404, "NOT_FOUND")
		for _, q := range []string{"?status=bogus", "?sequence=-1", "?sequence=x", "?limit=1001", "?sortBy=env", "?stage=a/b"} {
			requireError(t, b.do("GET", "/runs/"+id+"/steps"+q, nil), 400, "VALIDATION_ERROR")
		}
	})
}

func TestStepPatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	body := b.schedule(id, "one", false, step("a", 1), step("b", 1, "a"))
	aID := list(body, "steps")[0].(map[string]any)["id"].(string)
	bID := list(body, "steps")[1].(map[string]any)["id"].(string)

	// Output may be reported before the step ends.
	got := b.do("PATCH", "/steps/"+aID, map[string]any{"output": map[string]any{"progress": 0.5}}).must(t, 200)
	require.Equal(t, "pending", got["status"])
	require.Equal(t, map[string]any{"progress": 0.5}, got["output"])

	// Completing a releases b and, when b completes too, the stage calls the flow back.
	got = b.do("PATCH", "/steps/"+aID, map[string]any{"status": "completed", "output": map[string]any{"articles": 42}}).must(t, 200)
	require.Equal(t, map[string]any{"id": aID, "status": "completed", "output": map[string]any{"articles": 42.0},
		"completedAt": got["completedAt"]}, got)
	require.NotNil(t, got["completedAt"])
	var left int
	require.NoError(t, b.store.Pool().QueryRow(context.Background(), `SELECT deps_left FROM step WHERE id = $1`, bID).Scan(&left))
	require.Equal(t, 0, left)
	b.do("PATCH", "/steps/"+bID, map[string]any{"status": "completed"}).must(t, 200)
	run := b.do("GET", "/runs/"+id, nil).must(t, 200)
	require.Equal(t, "completed", list(run, "stages")[0].(map[string]any)["status"])
	var calls int
	require.NoError(t, b.store.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM flow_call WHERE run_id = $1 AND completed_stage = 'one'`, id).Scan(&calls))
	require.Equal(t, 1, calls)

	// A finished step cannot change.
	requireError(t, b.do("PATCH", "/steps/"+aID, map[string]any{"status": "failed"}), 409, "CONFLICT")
	requireError(t, b.do("PATCH", "/steps/"+aID, map[string]any{"output": 1}), 409, "CONFLICT")
	for _, bad := range []any{map[string]any{}, map[string]any{"status": "running"}, map[string]any{"status": "done"},
		map[string]any{"status": 3}, map[string]any{"error": "x"}, map[string]any{"status": "completed", "error": "x"}} {
		requireError(t, b.do("PATCH", "/steps/"+bID, bad), 400, "VALIDATION_ERROR")
	}
	requireError(t, b.do("PATCH", "/steps/0190a3c0-0000-7000-8000-000000000000", map[string]any{"status": "failed"}), 404, "NOT_FOUND")
}

func TestArtifacts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	body := b.schedule(id, "one", false, step("a", 1), step("b", 3))
	steps := list(body, "steps")
	stepRef := func(i int) (string, string, float64) {
		m := steps[i].(map[string]any)
		return m["id"].(string), m["name"].(string), m["sequence"].(float64)
	}
	put := func(i int, name string, value any, tags ...string) map[string]any {
		sid, sname, seq := stepRef(i)
		req := map[string]any{"stepId": sid, "stepName": sname, "sequence": seq, "name": name, "value": value,
			"metadata": map[string]any{"source": "test"}}
		if tags != nil {
			req["tags"] = tags
		}
		return b.do("POST", "/runs/"+id+"/artifacts", req).must(t, 201)
	}
	raw := put(0, "raw_data", map[string]any{"articles": []any{"x"}}, "news", "reuters")
	require.Equal(t, "a[0]/raw_data", raw["fullPath"])
	require.Equal(t, id, raw["runId"])
	require.Equal(t, []any{"news", "reuters"}, raw["tags"])
	require.Equal(t, map[string]any{"source": "test"}, raw["metadata"])
	for i := 1; i <= 3; i++ {
		put(i, "page_data", map[string]any{"i": i}, "processed")
	}
	put(2, "page_meta", 7)
	put(3, "other", "text", "validated")

	fullPaths := func(q string) []string {
		return ids(list(b.do("GET", "/runs/"+id+"/artifacts"+q, nil).must(t, 200), "artifacts"), "fullPath")
	}
	require.Equal(t, []string{"b[2]/other", "b[1]/page_meta", "b[2]/page_data", "b[1]/page_data", "b[0]/page_data", "a[0]/raw_data"}, fullPaths(""))
	require.Equal(t, []string{"a[0]/raw_data"}, fullPaths("?stepName=a"))
	require.Equal(t, []string{"b[2]/other", "b[2]/page_data"}, fullPaths("?stepName=b&sequence=2"))
	require.Equal(t, []string{"b[0]/page_data", "b[1]/page_data", "b[2]/page_data"}, fullPaths("?name=page_data&sortOrder=asc"))
	require.Equal(t, []string{"b[0]/page_data", "b[1]/page_meta", "b[1]/page_data", "b[2]/page_data"}[0:1], fullPaths("?namePrefix=page&sortBy=fullPath&sortOrder=asc&limit=1"))
	require.ElementsMatch(t, []string{"b[2]/other", "b[0]/page_data", "b[1]/page_data", "b[2]/page_data"}, fullPaths("?tags=processed,validated"))
	require.Equal(t, []string{"a[0]/raw_data"}, fullPaths("?tags=reuters"))
	require.Empty(t, fullPaths("?tags=none"))
	body = b.do("GET", "/runs/"+id+"/artifacts?limit=2&offset=1", nil).must(t, 200)
	require.Equal(t, map[string]any{"total": 6.0, "limit": 2.0, "offset": 1.0}, body["pagination"])

	got := b.do("GET", "/runs/"+id+"/artifacts/"+raw["id"].(string), nil).must(t, 200)
	require.Equal(t, raw, got)
	requireError(t, b.do("GET", "/runs/"+id+"/artifacts/0190a3c0-0000-7000-8000-000000000000", nil), 404, "NOT_FOUND")
	other := b.trigger("demo")
	requireError(t, b.do("GET", "/runs/"+other+"/artifacts/"+raw["id"].(string), nil), 404, "NOT_FOUND")

	// Immutable: the same path again is a conflict and changes nothing.
	sid, sname, seq := stepRef(0)
	requireError(t, b.do("POST", "/runs/"+id+"/artifacts", map[string]any{"stepId": sid, "stepName": sname, "sequence": seq,
		"name": "raw_data", "value": "changed"}), 409, "CONFLICT")
	require.Equal(t, raw["value"], b.do("GET", "/runs/"+id+"/artifacts/"+raw["id"].(string), nil).must(t, 200)["value"])

	// Validated against the step.
	for _, bad := range []map[string]any{
		{"stepId": sid, "stepName": "b", "sequence": seq, "name": "n", "value": 1},
		{"stepId": sid, "stepName": sname, "sequence": 3, "name": "n", "value": 1},
		{"stepId": "0190a3c0-0000-7000-8000-000000000000", "stepName": sname, "sequence": seq, "name": "n", "value": 1},
	} {
		requireError(t, b.do("POST", "/runs/"+id+"/artifacts", bad), 400, "VALIDATION_ERROR")
	}
	// A step of another run is not a step of this one.
	requireError(t, b.do("POST", "/runs/"+other+"/artifacts", map[string]any{"stepId": sid, "stepName": sname,
		"sequence": seq, "name": "n", "value": 1}), 400, "VALIDATION_ERROR")
	requireError(t, b.do("GET", "/runs/0190a3c0-0000-7000-8000-000000000000/artifacts", nil), 404, "NOT_FOUND")
	for _, q := range []string{"?sequence=-2", "?limit=0", "?sortBy=value", "?stepName=..", "?offset=x"} {
		requireError(t, b.do("GET", "/runs/"+id+"/artifacts"+q, nil), 400, "VALIDATION_ERROR")
	}

	// A finished step stores no more artifacts.
	_, _, err := b.store.StepFinish(context.Background(), store.StepFinishParams{StepID: sid, Completed: true})
	require.NoError(t, err)
	requireError(t, b.do("POST", "/runs/"+id+"/artifacts", map[string]any{"stepId": sid, "stepName": sname,
		"sequence": seq, "name": "late", "value": 1}), 409, "CONFLICT")
}

// A script that passes its attempt (MAXQ_STEP_ATTEMPT) can write only while
// its attempt is the step's current one.
func TestAttemptFencing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	b.schedule(id, "one", false, step("a", 1))
	claimed, err := b.store.StepClaim(context.Background(), store.StepClaimParams{WorkerID: "w1", Limit: 1})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	sid := claimed[0].ID
	require.Equal(t, 1, claimed[0].Attempt)
	art := func(attempt int, name string) response {
		return b.do("POST", "/runs/"+id+"/artifacts", map[string]any{"stepId": sid, "stepName": "a", "sequence": 0,
			"name": name, "value": 1, "attempt": attempt})
	}
	requireError(t, art(2, "x"), 409, "CONFLICT")
	art(1, "x").must(t, 201)
	requireError(t, art(0, "y"), 400, "VALIDATION_ERROR")
	requireError(t, b.do("PATCH", "/steps/"+sid, map[string]any{"output": 1, "attempt": 2}), 409, "CONFLICT")
	b.do("PATCH", "/steps/"+sid, map[string]any{"output": 1, "attempt": 1}).must(t, 200)
	requireError(t, b.do("PATCH", "/steps/"+sid, map[string]any{"status": "completed", "attempt": 3}), 409, "CONFLICT")
	b.do("PATCH", "/steps/"+sid, map[string]any{"status": "completed", "attempt": 1}).must(t, 200)
}
