package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is a real API server on a database of its own, with a
// FLOWS_ROOT holding flow "demo" (steps a, b, c, d) and flow "other" (x).
type testBundle struct {
	t     *testing.T
	url   string
	root  string
	store *store.Store
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	root := t.TempDir()
	writeScript(t, filepath.Join(root, "demo", "flow.sh"))
	for _, s := range []string{"a", "b", "c", "d"} {
		writeScript(t, filepath.Join(root, "demo", "steps", s, "step.sh"))
	}
	writeScript(t, filepath.Join(root, "other", "flow.sh"))
	writeScript(t, filepath.Join(root, "other", "steps", "x", "step.sh"))
	st := store.New(pgtest.Pool(t))
	srv := httptest.NewServer(api.New(api.Config{Store: st, Catalog: flow.Catalog{Root: root}, MaxBodyBytes: 64 << 10}))
	t.Cleanup(srv.Close)
	return &testBundle{t: t, url: srv.URL + api.Prefix, root: root, store: st}
}

func writeScript(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o755))
}

// response is an answer of the API: its status and decoded JSON body.
type response struct {
	Status int
	Body   map[string]any
	Raw    []byte
	Header http.Header
}

func (b *testBundle) do(method, path string, body any, headers ...string) response {
	b.t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(v)
	case []byte:
		rd = bytes.NewReader(v)
	default:
		data, err := json.Marshal(v)
		require.NoError(b.t, err)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, b.url+path, rd)
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(b.t, err)
	out := response{Status: res.StatusCode, Raw: raw, Header: res.Header}
	require.Equal(b.t, "application/json", res.Header.Get("Content-Type"), "body: %s", raw)
	require.NoError(b.t, json.Unmarshal(raw, &out.Body), "body: %s", raw)
	return out
}

// must asserts the status and returns the body.
func (r response) must(t *testing.T, status int) map[string]any {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Raw)
	return r.Body
}

// requireError asserts an error answer with the spec's error body.
func requireError(t *testing.T, r response, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Raw)
	require.Equal(t, code, r.Body["code"], "body: %s", r.Raw)
	require.NotEmpty(t, r.Body["error"], "body: %s", r.Raw)
	require.IsType(t, map[string]any{}, r.Body["details"], "body: %s", r.Raw)
}

// trigger starts a run of flow and returns its id.
func (b *testBundle) trigger(flow string) string {
	b.t.Helper()
	return b.do("POST", "/flows/"+flow+"/runs", map[string]any{"input": map[string]any{"n": 1}}).must(b.t, 201)["id"].(string)
}

// schedule schedules a stage and returns the answer's body.
func (b *testBundle) schedule(runID, stage string, final bool, steps ...map[string]any) map[string]any {
	b.t.Helper()
	return b.do("POST", "/runs/"+runID+"/steps", map[string]any{"stage": stage, "final": final, "steps": steps}).must(b.t, 201)
}

func step(name string, instances int, deps ...string) map[string]any {
	if deps == nil {
		deps = []string{}
	}
	return map[string]any{"name": name, "dependsOn": deps, "instances": instances, "maxRetries": 0, "env": map[string]string{}}
}

func list(body map[string]any, key string) []any { return body[key].([]any) }

func ids(items []any, key string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.(map[string]any)[key].(string)
	}
	return out
}
