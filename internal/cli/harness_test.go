package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/maxq-dev/maxq/internal/api"
	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/buildtest"
	"github.com/maxq-dev/maxq/internal/config"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/pgtest"
	"github.com/maxq-dev/maxq/internal/store"
	"github.com/maxq-dev/maxq/internal/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// binaries builds cmd/maxq and cmd/worker once per test binary and returns
// their paths.
func binaries(t *testing.T) (maxq, workerBin string) {
	t.Helper()
	return buildtest.Binary(t, "./cmd/maxq"), buildtest.Binary(t, "./cmd/worker", "maxq-worker")
}

// stack is an in-process API on a database of the test's own, with an
// in-process worker or a worker process.
type stack struct {
	t       *testing.T
	root    string
	API     string
	token   string // the API token; "" for an open API
	maxqBin string // the built binary
}

// options tune a stack.
type options struct {
	// Token turns authentication on.
	Token string
	// Workers is how many in-process workers run (default 1).
	Workers int
	// WorkerEnv, when not nil, runs the worker as a process (cmd/worker)
	// with these variables besides the database, flows root and API URL;
	// else the worker runs in the test process.
	WorkerEnv map[string]string
}

func newStack(t *testing.T, root string, opt options) *stack {
	t.Helper()
	maxqBin, workerBin := binaries(t)
	dbURL := pgtest.DatabaseURL(t)
	pool, err := app.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // before the database is dropped
	st := store.New(pool)
	catalog := flow.Catalog{Root: root}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- app.Serve(ctx, ln, api.New(api.Config{Store: st, Catalog: catalog, Tokens: auth.New(opt.Token)}), 5*time.Second)
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-served)
	})
	s := &stack{t: t, root: root, API: app.LocalAPIURL(ln.Addr()), token: opt.Token, maxqBin: maxqBin}
	if opt.WorkerEnv != nil {
		s.startWorkerProcess(workerBin, dbURL, opt.WorkerEnv)
		return s
	}
	cfg := config.Defaults()
	cfg.FlowsRoot = root
	cfg.APIToken = opt.Token
	cfg.ShutdownGrace = 2 * time.Second
	wctx, stop := context.WithCancel(context.Background())
	workers := max(opt.Workers, 1)
	done := make(chan error, workers)
	for range workers {
		w := worker.New(app.WorkerConfig(cfg, st, catalog, nil, s.API))
		go func() { done <- w.Run(wctx) }()
	}
	// Registered after the API's: runs before it, so the workers stop
	// while their scripts can still call the API.
	t.Cleanup(func() {
		stop()
		for range workers {
			require.NoError(t, <-done)
		}
	})
	return s
}

// startWorkerProcess runs cmd/worker with exactly the environment given
// (plus what it needs to find the database, the flows and the API).
func (s *stack) startWorkerProcess(bin, dbURL string, env map[string]string) {
	t := s.t
	cmd := exec.Command(bin)
	vars := map[string]string{
		"MAXQ_DATABASE_URL":     dbURL,
		"MAXQ_FLOWS_ROOT":       s.root,
		"MAXQ_API_URL":          s.API,
		"MAXQ_API_TOKEN":        s.token,
		"MAXQ_POLL_INTERVAL_MS": "500",
		"MAXQ_SHUTDOWN_GRACE":   "2",
	}
	for k, v := range env {
		vars[k] = v
	}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	})
	cmd.Stdout, cmd.Stderr = w, w
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("--- worker output:\n%s", out.String())
			mu.Unlock()
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// result is how a maxq process ended.
type result struct {
	Code   int
	Stdout string
	Stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s\n--- stderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// run runs the maxq binary against the stack's API with an explicit
// environment (plus env) and returns how it ended.
func (s *stack) run(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	vars := map[string]string{"MAXQ_URL": s.API, "MAXQ_API_TOKEN": s.token}
	for k, v := range env {
		vars[k] = v
	}
	return runBinary(t, s.maxqBin, vars, stdin, args...)
}

// maxq runs maxq with args and no extra environment.
func (s *stack) maxq(t *testing.T, args ...string) result {
	t.Helper()
	return s.run(t, nil, "", args...)
}

func runBinary(t *testing.T, bin string, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{}
	for k, v := range env {
		if v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		exitErr, ok := err.(*exec.ExitError)
		require.True(t, ok, "run maxq %v: %v", args, err)
		code = exitErr.ExitCode()
	}
	return result{Code: code, Stdout: stdout.String(), Stderr: stderr.String()}
}

// flowDir writes a flow under a fresh FLOWS_ROOT (or root, if not empty):
// flow.sh and the given steps, each a bash script body ("#!/bin/bash" is
// added). In the bodies, $MAXQ_BIN is replaced with the maxq binary's path.
func flowDir(t *testing.T, root, name, flowScript string, steps map[string]string) string {
	t.Helper()
	maxqBin, _ := binaries(t)
	if root == "" {
		root = t.TempDir()
	}
	expand := func(s string) string { return strings.ReplaceAll(s, "$MAXQ_BIN", maxqBin) }
	writeExe(t, filepath.Join(root, name, "flow.sh"), expand(flowScript))
	for step, body := range steps {
		writeExe(t, filepath.Join(root, name, "steps", step, "step.sh"), expand(body))
	}
	return root
}

func writeExe(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/bash\nset -euo pipefail\n"+body), 0o755))
}

// oneStage is a flow.sh that schedules one final stage of the steps given
// as maxq --step specs.
func oneStage(specs ...string) string {
	var b strings.Builder
	b.WriteString(`if [[ -z $MAXQ_COMPLETED_STAGE && -z $MAXQ_FAILED_STAGE ]]; then
  echo "flow scheduling"
  "$MAXQ_BIN" stage schedule --stage main --final`)
	for _, s := range specs {
		b.WriteString(" --step " + s)
	}
	b.WriteString("\nfi\n")
	return b.String()
}
