package api_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/store"
)

// What POST /runs/{id}/artifacts answers when the step does not fit, in
// the order a caller hears it: an unknown run before anything about the
// step, a step that is not the run's or not the one named before its state.
func TestArtifactRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	steps := list(b.schedule(id, "one", false, step("a", 1), step("b", 1)), "steps")
	aID := steps[0].(map[string]any)["id"].(string)
	bID := steps[1].(map[string]any)["id"].(string)
	other := b.trigger("demo")
	art := func(runID string, fields map[string]any) response {
		req := map[string]any{"stepId": aID, "stepName": "a", "sequence": 0, "name": "n", "value": 1}
		for k, v := range fields {
			req[k] = v
		}
		return b.do("POST", "/runs/"+runID+"/artifacts", req)
	}
	unknown := "0190a3c0-0000-7000-8000-000000000000"

	t.Run("UnknownRunFirst", func(t *testing.T) {
		for _, fields := range []map[string]any{nil, {"stepId": unknown}, {"stepName": "b"}, {"attempt": 5}} {
			r := art(unknown, fields)
			requireError(t, r, 404, "NOT_FOUND")
			require.Contains(t, r.Body["error"], unknown)
		}
		requireError(t, art("not-a-uuid", nil), 404, "NOT_FOUND")
	})
	t.Run("StepNotOfTheRun", func(t *testing.T) {
		for _, stepID := range []string{unknown, "not-a-uuid", bID + " "} {
			r := art(id, map[string]any{"stepId": stepID})
			requireError(t, r, 400, "VALIDATION_ERROR")
			require.Contains(t, r.Body["details"], "stepId")
		}
		r := art(other, nil)
		requireError(t, r, 400, "VALIDATION_ERROR")
		require.Equal(t, map[string]any{"stepId": "no step " + aID + " in this run"}, r.Body["details"])
	})
	t.Run("StepNamedOtherwise", func(t *testing.T) {
		r := art(id, map[string]any{"stepName": "b", "sequence": 1})
		requireError(t, r, 400, "VALIDATION_ERROR")
		require.Equal(t, map[string]any{"stepName": fmt.Sprintf("step %s is named \"a\", not \"b\"", aID)}, r.Body["details"])
		for _, seq := range []any{1, 1 << 31, 1 << 40} {
			r := art(id, map[string]any{"sequence": seq})
			requireError(t, r, 400, "VALIDATION_ERROR")
			require.Equal(t, map[string]any{"sequence": fmt.Sprintf("step %s has sequence 0, not %d", aID, seq)}, r.Body["details"])
		}
	})
	t.Run("AttemptOfAPendingStep", func(t *testing.T) {
		// Step a is pending: no attempt of it is running.
		for _, attempt := range []any{1, 1 << 31, 1 << 40} {
			requireError(t, art(id, map[string]any{"attempt": attempt}), 409, "CONFLICT")
		}
		art(id, map[string]any{"name": "unfenced"}).must(t, 201)
	})
	t.Run("FinishedStep", func(t *testing.T) {
		_, _, err := b.store.StepFinish(context.Background(), store.StepFinishParams{StepID: bID, Completed: true})
		require.NoError(t, err)
		for _, fields := range []map[string]any{{"name": "late"}, {"name": "late", "attempt": 1}} {
			fields["stepId"], fields["stepName"] = bID, "b"
			r := art(id, fields)
			requireError(t, r, 409, "CONFLICT")
			require.Contains(t, r.Body["error"], "is completed and can store no more artifacts")
		}
	})
}

// An artifact stored without tags or metadata is answered as it is read
// back: tags [], metadata null, the value as PostgreSQL keeps it.
func TestArtifactDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	sid := list(b.schedule(id, "one", false, step("a", 1)), "steps")[0].(map[string]any)["id"].(string)
	created := b.do("POST", "/runs/"+id+"/artifacts",
		`{"stepId":"`+sid+`","stepName":"a","sequence":0,"name":"plain","value":{"b": [1, 2.50], "a": "x"}}`).must(t, 201)
	require.Equal(t, []any{}, created["tags"])
	require.Nil(t, created["metadata"])
	require.Equal(t, sid, created["stepId"])
	require.Equal(t, "a[0]/plain", created["fullPath"])
	got := b.do("GET", "/runs/"+id+"/artifacts/"+created["id"].(string), nil)
	require.Equal(t, created, got.must(t, 200))
	require.Contains(t, string(got.Raw), `"value":{"a":"x","b":[1,2.50]}`)
}

// Steps storing artifacts at once, which the API stores together, each get
// their own answer; of requests for one full path exactly one stores it and
// the others are conflicts.
func TestConcurrentArtifacts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.trigger("demo")
	const n = 8
	steps := list(b.schedule(id, "one", false, step("a", n)), "steps")
	var wg sync.WaitGroup
	statuses := make([][]int, n)
	for i := range n {
		m := steps[i].(map[string]any)
		wg.Go(func() {
			for j := range 4 {
				// Its own path, then one every step's requests compete for
				// (three times each), then its own path again.
				name := []string{fmt.Sprint("own-", i), "shared", "shared", "shared"}[j]
				sid, seq := m["id"].(string), m["sequence"].(float64)
				if name == "shared" {
					sid, seq = steps[0].(map[string]any)["id"].(string), 0
				}
				r := b.do("POST", "/runs/"+id+"/artifacts", map[string]any{"stepId": sid, "stepName": "a",
					"sequence": seq, "name": name, "value": i})
				statuses[i] = append(statuses[i], r.Status)
			}
		})
	}
	// Beside them, a value PostgreSQL refuses fails only its own request.
	wg.Go(func() {
		m := steps[n-1].(map[string]any)
		for j := range 4 {
			requireError(t, b.do("POST", "/runs/"+id+"/artifacts", fmt.Sprintf(
				`{"stepId":%q,"stepName":"a","sequence":%v,"name":"bad-%d","value":"\ud800"}`, m["id"], m["sequence"], j)),
				400, "VALIDATION_ERROR")
		}
	})
	wg.Wait()
	created, conflicts := 0, 0
	for i := range n {
		require.Equal(t, 201, statuses[i][0])
		for _, s := range statuses[i][1:] {
			switch s {
			case 201:
				created++
			case 409:
				conflicts++
			default:
				t.Fatalf("status %d", s)
			}
		}
	}
	require.Equal(t, 1, created)
	require.Equal(t, 3*n-1, conflicts)
	body := b.do("GET", "/runs/"+id+"/artifacts?limit=100", nil).must(t, 200)
	require.Equal(t, float64(n+1), body["pagination"].(map[string]any)["total"])
}
