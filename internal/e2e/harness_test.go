// Package e2e runs MaxQ end to end — real PostgreSQL, real HTTP, real
// scripts — through the same wiring as cmd/local.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/store"
	"github.com/maxq-dev/maxq/internal/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// stack is an API server and any number of workers on one database of
// their own, running the flows under root.
type stack struct {
	t     *testing.T
	root  string
	API   string // base URL, …/api/v1
	Store *store.Store
	cfg   config.Config
}

// options tune a stack.
type options struct {
	Workers  int // default 1
	MaxSteps int // per worker; default 10
	Config   func(*config.Config)
}

// newStack starts an API and workers for the flows under root.
func newStack(t *testing.T, root string, opt options) *stack {
	t.Helper()
	cfg := config.Defaults()
	cfg.FlowsRoot = root
	cfg.MaxConcurrentSteps = max(opt.MaxSteps, 10)
	if opt.MaxSteps > 0 {
		cfg.MaxConcurrentSteps = opt.MaxSteps
	}
	cfg.PassEnv = append(cfg.PassEnv, "MAXQ_TEST_OUT")
	if opt.Config != nil {
		opt.Config(&cfg)
	}
	pool, err := app.Connect(context.Background(), pgtest.DatabaseURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st := store.New(pool)
	catalog := flow.Catalog{Root: root}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1+max(opt.Workers, 1))
	go func() {
		done <- app.Serve(ctx, ln, api.New(api.Config{Store: st, Catalog: catalog, Tokens: auth.New(cfg.APIToken)}), 5*time.Second)
	}()
	s := &stack{t: t, root: root, API: app.LocalAPIURL(ln.Addr()), Store: st, cfg: cfg}
	for i := 0; i < max(opt.Workers, 1); i++ {
		w := worker.New(app.WorkerConfig(cfg, st, catalog, nil, s.API))
		go func() { done <- w.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for i := 0; i < 1+max(opt.Workers, 1); i++ {
			require.NoError(t, <-done)
		}
	})
	return s
}

// examplesRoot is the repository's examples directory.
func examplesRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", "examples"))
	require.NoError(t, err)
	return root
}

// call sends a request and decodes the JSON answer into out (if not nil).
func (s *stack) call(method, path string, body any, out any) int {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(s.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.API+path, rd)
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(s.t, err)
	if out != nil {
		require.NoError(s.t, json.Unmarshal(raw, out), "body: %s", raw)
	}
	return res.StatusCode
}

// Run is the run object of the API.
type Run struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Error  json.RawMessage `json:"error"`
	Stages []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
	} `json:"stages"`
}

// Step is a step object of the API.
type Step struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Sequence    int               `json:"sequence"`
	Status      string            `json:"status"`
	Stage       string            `json:"stage"`
	RetryCount  int               `json:"retryCount"`
	Attempt     int               `json:"attempt"`
	Error       json.RawMessage   `json:"error"`
	Output      json.RawMessage   `json:"output"`
	Env         map[string]string `json:"env"`
	StartedAt   *int64            `json:"startedAt"`
	CompletedAt *int64            `json:"completedAt"`
	DurationMs  *int64            `json:"durationMs"`
}

// trigger starts a run of flow with input and returns its id.
func (s *stack) trigger(flow string, input any) string {
	s.t.Helper()
	var run Run
	require.Equal(s.t, 201, s.call("POST", "/flows/"+flow+"/runs", map[string]any{"input": input}, &run))
	return run.ID
}

// wait polls a run until it is terminal, or fails the test after timeout.
func (s *stack) wait(runID string, timeout time.Duration) Run {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var run Run
		require.Equal(s.t, 200, s.call("GET", "/runs/"+runID, nil, &run))
		switch run.Status {
		case "completed", "failed", "cancelled":
			return run
		}
		if time.Now().After(deadline) {
			var steps []string
			for _, st := range s.steps(runID) {
				took := "not started"
				switch {
				case st.StartedAt != nil && st.CompletedAt != nil:
					took = fmt.Sprintf("took %d ms", *st.CompletedAt-*st.StartedAt)
				case st.StartedAt != nil:
					took = fmt.Sprintf("running for %d ms", time.Now().UnixMilli()-*st.StartedAt)
				}
				steps = append(steps, fmt.Sprintf("%s[%d] %s attempt %d, %s", st.Name, st.Sequence, st.Status, st.Attempt, took))
			}
			s.t.Fatalf("run %s still %s after %s; stages %+v; steps %v", runID, run.Status, timeout, run.Stages, steps)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// steps lists a run's steps.
func (s *stack) steps(runID string) []Step {
	s.t.Helper()
	var out struct{ Steps []Step }
	require.Equal(s.t, 200, s.call("GET", "/runs/"+runID+"/steps?limit=1000", nil, &out))
	return out.Steps
}

// flowDir writes a flow under a fresh FLOWS_ROOT: flow.sh and the given
// steps, each a script body run by bash (the shebang is added).
func flowDir(t *testing.T, name, flowScript string, steps map[string]string) string {
	t.Helper()
	root := t.TempDir()
	writeExe(t, filepath.Join(root, name, "flow.sh"), flowScript)
	for step, body := range steps {
		writeExe(t, filepath.Join(root, name, "steps", step, "step.sh"), body)
	}
	return root
}

func writeExe(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/bash\n"+body), 0o755))
}
