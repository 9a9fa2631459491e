package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/store"
)

const testAPIToken = "test-api-token-0123456789"

// authBundle is a testBundle whose API requires tokens, with two runs, A
// and B, each holding a stage and an artifact.
type authBundle struct {
	*testBundle
	tokens       auth.Tokens
	runA, runB   string
	stepA, stepB string
	artA, artB   string
	bodies       [][]byte // every response body, to look for the API token in
	n            int      // makes stage and artifact names unique
}

func setupAuth(t *testing.T) *authBundle {
	t.Helper()
	root := t.TempDir()
	writeScript(t, filepath.Join(root, "demo", "flow.sh"))
	st := store.New(pgtest.Pool(t))
	tokens := auth.New(testAPIToken)
	srv := httptest.NewServer(api.New(api.Config{Store: st, Catalog: flow.Catalog{Root: root}, Tokens: tokens}))
	t.Cleanup(srv.Close)
	b := &authBundle{testBundle: &testBundle{t: t, url: srv.URL + api.Prefix, root: root, store: st}, tokens: tokens}
	b.runA, b.stepA, b.artA = b.seed()
	b.runB, b.stepB, b.artB = b.seed()
	return b
}

// seed triggers a run as the admin, schedules a stage and stores an
// artifact; it returns their ids.
func (b *authBundle) seed() (runID, stepID, artifactID string) {
	runID = b.call(testAPIToken, "POST", "/flows/demo/runs", map[string]any{}).must(b.t, 201)["id"].(string)
	steps := list(b.call(testAPIToken, "POST", "/runs/"+runID+"/steps", b.stage()).must(b.t, 201), "steps")
	stepID = steps[0].(map[string]any)["id"].(string)
	artifactID = b.call(testAPIToken, "POST", "/runs/"+runID+"/artifacts", b.artifact(stepID)).must(b.t, 201)["id"].(string)
	return runID, stepID, artifactID
}

// stage is the body of a new stage of a new step: a step name is
// scheduled once per run, and the catalog is read afresh on each request.
func (b *authBundle) stage() map[string]any {
	b.n++
	name := fmt.Sprintf("x%d", b.n)
	writeScript(b.t, filepath.Join(b.root, "demo", "steps", name, "step.sh"))
	return map[string]any{"stage": fmt.Sprintf("s%d", b.n), "final": false, "steps": []any{step(name, 1)}}
}

// artifact is the body of a new artifact of step stepID, the first step
// of a stage of this bundle (sequence 0).
func (b *authBundle) artifact(stepID string) map[string]any {
	b.n++
	st, err := b.store.StepGet(b.t.Context(), stepID)
	require.NoError(b.t, err)
	return map[string]any{"stepId": stepID, "stepName": st.Name, "sequence": 0, "name": fmt.Sprintf("art%d", b.n), "value": map[string]any{"n": b.n}}
}

// call sends a request with token as its bearer token ("" for none, or a
// whole Authorization header when it has a space).
func (b *authBundle) call(token, method, path string, body any) response {
	b.t.Helper()
	var headers []string
	switch {
	case token == "":
	case strings.Contains(token, " "):
		headers = []string{"Authorization", token}
	default:
		headers = []string{"Authorization", "Bearer " + token}
	}
	r := b.do(method, path, body, headers...)
	b.bodies = append(b.bodies, r.Raw)
	return r
}

// authRoute is one route of the API and what the admin gets from it.
type authRoute struct {
	name   string
	method string
	path   func(runID, stepID, artifactID string) string
	body   func(b *authBundle, stepID string) any
	status int // the admin's answer
}

// authRoutes lists all 13 routes.
func authRoutes() []authRoute {
	runPath := func(suffix string) func(string, string, string) string {
		return func(runID, _, _ string) string { return "/runs/" + runID + suffix }
	}
	stepPath := func(_, stepID, _ string) string { return "/steps/" + stepID }
	none := func(*authBundle, string) any { return nil }
	return []authRoute{
		{"FlowList", "GET", func(string, string, string) string { return "/flows" }, none, 200},
		{"RunTrigger", "POST", func(string, string, string) string { return "/flows/demo/runs" },
			func(*authBundle, string) any { return map[string]any{} }, 201},
		{"RunList", "GET", func(string, string, string) string { return "/runs" }, none, 200},
		{"RunGet", "GET", runPath(""), none, 200},
		// Cancelling a run ends it; only the admin's call gets this far,
		// and it runs last (see TestAuth).
		{"RunCancel", "POST", runPath("/cancel"), none, 200},
		// The run is pending: a retry changes nothing.
		{"RunRetry", "POST", runPath("/retry"), none, 200},
		{"StageSchedule", "POST", runPath("/steps"), func(b *authBundle, _ string) any { return b.stage() }, 201},
		{"StepList", "GET", runPath("/steps"), none, 200},
		{"StepGet", "GET", stepPath, none, 200},
		{"StepPatch", "PATCH", stepPath, func(*authBundle, string) any { return map[string]any{"output": map[string]any{"ok": true}} }, 200},
		{"ArtifactCreate", "POST", runPath("/artifacts"), func(b *authBundle, stepID string) any { return b.artifact(stepID) }, 201},
		{"ArtifactList", "GET", runPath("/artifacts"), none, 200},
		{"ArtifactGet", "GET", func(runID, _, artifactID string) string { return "/runs/" + runID + "/artifacts/" + artifactID }, none, 200},
	}
}

// requireUnauthorized asserts a 401 with the error body and a challenge.
func requireUnauthorized(t *testing.T, r response) {
	t.Helper()
	requireError(t, r, 401, "UNAUTHORIZED")
	require.True(t, strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer "), "WWW-Authenticate: %q", r.Header.Get("WWW-Authenticate"))
}

func TestAuth(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	routes := authRoutes()
	require.Len(t, routes, 13)

	// Nothing gets through without a valid token.
	forged := auth.New("another-api-token-0123456789").RunToken(b.runA)
	tampered := b.tokens.RunToken(b.runA)[:len(b.tokens.RunToken(b.runA))-2] + "xx"
	stolen := strings.Replace(b.tokens.RunToken(b.runA), b.runA, b.runB, 1) // A's signature, B's id
	bad := map[string]string{
		"NoToken":         "",
		"WrongToken":      "wrong-token-0123456789",
		"APITokenPrefix":  testAPIToken[:len(testAPIToken)-1],
		"APITokenSuffix":  testAPIToken + "x",
		"BasicScheme":     "Basic " + testAPIToken,
		"ForgedRunToken":  forged,
		"TamperedRun":     tampered,
		"OtherRunsID":     stolen,
		"EmptyBearer":     "Bearer  ",
		"NotARunToken":    "mxq_run.",
		"RunTokenNoSig":   "mxq_run." + b.runA,
		"RunTokenEmptyID": "mxq_run..sig",
	}
	for name, token := range bad {
		for _, rt := range routes {
			r := b.call(token, rt.method, rt.path(b.runA, b.stepA, b.artA), rt.body(b, b.stepA))
			require.Equal(t, 401, r.Status, "%s %s with %s: %s", rt.method, rt.name, name, r.Raw)
			requireUnauthorized(t, r)
		}
	}

	// The run token of A: its own run and steps as the admin would, any
	// other run's or step's routes and the admin's routes forbidden.
	runToken := b.tokens.RunToken(b.runA)
	require.NotContains(t, runToken, testAPIToken)
	for _, rt := range routes {
		switch rt.name {
		case "FlowList":
			b.call(runToken, rt.method, rt.path(b.runA, b.stepA, b.artA), nil).must(t, 200)
		case "RunTrigger", "RunList", "RunCancel", "RunRetry":
			for _, runID := range []string{b.runA, b.runB} {
				requireError(t, b.call(runToken, rt.method, rt.path(runID, "", ""), rt.body(b, "")), 403, "FORBIDDEN")
			}
		default:
			r := b.call(runToken, rt.method, rt.path(b.runA, b.stepA, b.artA), rt.body(b, b.stepA))
			require.Equal(t, rt.status, r.Status, "%s on run A: %s", rt.name, r.Raw)
			r = b.call(runToken, rt.method, rt.path(b.runB, b.stepB, b.artB), rt.body(b, b.stepB))
			requireError(t, r, 403, "FORBIDDEN")
		}
	}
	// A step that does not exist is not the run's own: 403, not 404, so a
	// run token learns nothing about other runs' step ids.
	requireError(t, b.call(runToken, "GET", "/steps/0190a3c0-0000-7000-8000-000000000000", nil), 403, "FORBIDDEN")
	requireError(t, b.call(testAPIToken, "GET", "/steps/0190a3c0-0000-7000-8000-000000000000", nil), 404, "NOT_FOUND")
	// Run B was not touched by A's token.
	require.Equal(t, "pending", b.call(testAPIToken, "GET", "/runs/"+b.runB, nil).must(t, 200)["status"])

	// The API token: the normal answers everywhere, in either scheme case.
	for _, rt := range routes {
		if rt.name == "RunCancel" {
			continue
		}
		r := b.call(testAPIToken, rt.method, rt.path(b.runB, b.stepB, b.artB), rt.body(b, b.stepB))
		require.Equal(t, rt.status, r.Status, "%s: %s", rt.name, r.Raw)
	}
	b.call("bearer "+testAPIToken, "GET", "/runs/"+b.runB, nil).must(t, 200)
	cancelled := b.call(testAPIToken, "POST", "/runs/"+b.runB+"/cancel", nil).must(t, 200)
	require.Equal(t, "cancelled", cancelled["status"])
	// A run token still reads its run once the run has ended.
	b.call(b.tokens.RunToken(b.runB), "GET", "/runs/"+b.runB, nil).must(t, 200)

	for _, raw := range b.bodies {
		require.NotContains(t, string(raw), testAPIToken, "the API token leaked into a response")
	}
}

// Errors that are not about the token still come after the token check: an
// unknown route or a wrong method is answered the same with or without one,
// and a bad body needs a valid token before it is looked at.
func TestAuthBeforeValidation(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	requireUnauthorized(t, b.call("", "POST", "/runs/"+b.runA+"/steps", `{"stage":`))
	requireError(t, b.call(testAPIToken, "POST", "/runs/"+b.runA+"/steps", `{"stage":`), 400, "VALIDATION_ERROR")
	requireError(t, b.call(b.tokens.RunToken(b.runA), "POST", "/runs/"+b.runA+"/steps", `{"stage":`), 400, "VALIDATION_ERROR")
	requireError(t, b.call(b.tokens.RunToken(b.runA), "POST", "/runs/"+b.runB+"/steps", `{"stage":`), 403, "FORBIDDEN")
	// A run token of a run that does not exist is valid but owns nothing there.
	ghost := "0190a3c0-0000-7000-8000-000000000000"
	requireError(t, b.call(b.tokens.RunToken(ghost), "GET", "/runs/"+ghost, nil), 404, "NOT_FOUND")
	requireError(t, b.call(b.tokens.RunToken(ghost), "GET", "/runs/"+b.runA, nil), 403, "FORBIDDEN")
	requireError(t, b.call("", "GET", "/nowhere", nil), http.StatusNotFound, "NOT_FOUND")
	for _, raw := range b.bodies {
		require.NotContains(t, string(raw), testAPIToken)
	}
}
