package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/maxq-dev/maxq/internal/app"
	"github.com/maxq-dev/maxq/internal/config"
)

// Environment variables between the benchmark and the workers it starts.
const (
	envRole       = "MAXQ_BENCH_ROLE" // "worker": run as a worker
	envCPUProfile = "MAXQ_BENCH_CPUPROFILE"
	// envHeapProfile is where a worker writes a heap profile each time it
	// gets SIGUSR1 (-1.pprof, -2.pprof, …).
	envHeapProfile = "MAXQ_BENCH_HEAPPROFILE"
)

// IsWorker reports whether this process was started by the benchmark to be
// a worker; main (or TestMain) then calls WorkerMain.
func IsWorker() bool { return os.Getenv(envRole) == "worker" }

// WorkerMain runs a worker and its reaper exactly as cmd/worker does,
// configured by the MAXQ_* variables, until SIGTERM, and returns the exit
// code. It writes a CPU profile when the benchmark asks for one.
func WorkerMain() int {
	cfg, err := config.Parse(os.Getenv, config.Defaults())
	if err != nil {
		fmt.Fprintln(os.Stderr, "maxq-bench worker: bad configuration:", err)
		return 2
	}
	if path := os.Getenv(envCPUProfile); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "maxq-bench worker:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "maxq-bench worker:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if path := os.Getenv(envHeapProfile); path != "" {
		runtime.MemProfileRate = 4096 // fine enough to see what each step holds
		heapOnSignal(path)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.RunWorker(ctx, cfg, app.Logger(cfg)); err != nil {
		fmt.Fprintln(os.Stderr, "maxq-bench worker:", err)
		return 1
	}
	return 0
}

// heapOnSignal writes, on every SIGUSR1, a heap profile to prefix-N.pprof
// and the runtime's memory statistics, which include the goroutine stacks
// a heap profile leaves out, to prefix-N.txt.
func heapOnSignal(prefix string) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGUSR1)
	go func() {
		for n := 1; ; n++ {
			<-signals
			runtime.GC() // a heap profile is as of the last collection
			name := prefix + "-" + strconv.Itoa(n)
			if f, err := os.Create(name + ".pprof"); err == nil {
				_ = pprof.Lookup("heap").WriteTo(f, 0)
				_ = f.Close()
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			stats := fmt.Sprintf("goroutines %d\nheap in use %d kB\nstacks in use %d kB\nruntime's own (mspan, mcache, gc, other) %d kB\nreleased to the OS %d kB\ntotal from the OS (Sys) %d kB\n",
				runtime.NumGoroutine(), m.HeapInuse>>10, m.StackInuse>>10,
				(m.MSpanInuse+m.MCacheInuse+m.GCSys+m.OtherSys+m.BuckHashSys)>>10, m.HeapReleased>>10, m.Sys>>10)
			_ = os.WriteFile(name+".txt", []byte(stats), 0o644)
		}
	}()
}

// heapProfile asks the worker for a heap profile, when profiling.
func (w *workerProc) heapProfile() {
	if w.profiling {
		_ = w.cmd.Process.Signal(syscall.SIGUSR1)
	}
}

// errWorkerExited is returned when a worker process ends before it
// registered.
var errWorkerExited = errors.New("worker exited")

// workerProc is a worker process the benchmark started.
type workerProc struct {
	cmd *exec.Cmd
	pid int
	log string
	// profiling: the worker writes profiles (see envHeapProfile).
	profiling bool
	exited    chan struct{}
	err       error // once exited is closed
}

// startWorker starts a worker with the given MAXQ_* settings over the
// stack's defaults, and returns once it has registered in the database.
func (s *suite) startWorker(ctx context.Context, name string, settings map[string]string) (*workerProc, error) {
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MAXQ_") {
			env = append(env, kv)
		}
	}
	vars := map[string]string{
		envRole:               "worker",
		"MAXQ_DATABASE_URL":   s.st.dbURL,
		"MAXQ_FLOWS_ROOT":     s.st.flows,
		"MAXQ_API_URL":        s.st.apiURL,
		"MAXQ_LOG_LEVEL":      "warn",
		"MAXQ_SHUTDOWN_GRACE": "10",
	}
	if s.st.profileDir != "" {
		vars[envCPUProfile] = filepath.Join(s.st.profileDir, "worker-"+s.current+"-"+name+".pprof")
		vars[envHeapProfile] = filepath.Join(s.st.profileDir, "worker-"+s.current+"-"+name+"-heap")
	}
	for k, v := range settings {
		vars[k] = v
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	logPath := filepath.Join(s.st.dir, "worker-"+s.current+"-"+name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(s.st.workerCmd[0], s.st.workerCmd[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	w := &workerProc{cmd: cmd, pid: cmd.Process.Pid, log: logPath, profiling: s.st.profileDir != "", exited: make(chan struct{})}
	go func() {
		w.err = cmd.Wait()
		close(w.exited)
	}()

	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := s.st.pool.QueryRow(ctx, `SELECT count(*) FROM worker WHERE pid = $1`, w.pid).Scan(&n); err != nil {
			w.kill()
			return nil, err
		}
		if n > 0 {
			return w, nil
		}
		select {
		case <-w.exited:
			return nil, fmt.Errorf("%w before it registered (%v); its log %s:\n%s", errWorkerExited, w.err, logPath, tail(logPath))
		case <-ctx.Done():
			w.kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			w.kill()
			return nil, fmt.Errorf("worker did not register within 30 s; its log %s:\n%s", logPath, tail(logPath))
		}
	}
}

// stop asks the worker to shut down gracefully and waits for it.
func (w *workerProc) stop() error {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(60 * time.Second):
		w.kill()
		return fmt.Errorf("worker %d did not stop within 60 s after SIGTERM; killed", w.pid)
	}
	if w.err != nil {
		return fmt.Errorf("worker: %w; its log %s:\n%s", w.err, w.log, tail(w.log))
	}
	return nil
}

func (w *workerProc) kill() {
	_ = w.cmd.Process.Kill()
	<-w.exited
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// withWorker runs fn with a worker started for it, and stops the worker
// afterwards.
func (s *suite) withWorker(ctx context.Context, name string, settings map[string]string, fn func(w *workerProc) error) error {
	w, err := s.startWorker(ctx, name, settings)
	if err != nil {
		return err
	}
	err = fn(w)
	return errors.Join(err, w.stop())
}
