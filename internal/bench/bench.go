// Package bench measures MaxQ end to end on one machine: a private
// PostgreSQL with durable settings, the API in this process, and workers as
// child processes running generated flows of no-op shell scripts.
//
// Every figure is printed beside a floor measured in the same run — the
// same scripts spawned by a plain Go pool, a plain INSERT on the same
// database, the same scenario on an empty database — so the table says how
// much of the machine MaxQ leaves unused, not only how fast the machine is.
// Times come from the engine's own rows (started_at, completed_at, epoch
// milliseconds) and, where a script's own start matters, from the script
// itself (bash's $EPOCHREALTIME).
//
// cmd/maxq-bench prints the table; TestSmoke runs every scenario at a tiny
// size so the benchmark keeps working.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// Options configure Run.
type Options struct {
	// Quick runs every scenario at a tiny size, in seconds (for CI).
	Quick bool
	// Scenarios names the scenarios to run, in the suite's order whatever
	// the order given; empty runs them all.
	Scenarios []string
	// DatabaseURL, when set, is used instead of a private PostgreSQL. The
	// benchmark empties MaxQ's tables in it between scenarios: give it a
	// database of its own.
	DatabaseURL string
	// WorkerCommand runs a worker, configured by MAXQ_* variables (a built
	// cmd/worker, say). Empty: this executable again, which must call
	// WorkerMain when IsWorker (cmd/maxq-bench and the tests do).
	WorkerCommand []string
	// ProfileDir, when set, receives a CPU profile per scenario of this
	// process (the API and the benchmark's clients) and of every worker,
	// and the busiest statements of each scenario (pg_stat_statements; a
	// private PostgreSQL only).
	ProfileDir string
	// Fast turns PostgreSQL's durability off: for the smoke test only.
	Fast bool
	// Keep leaves the working directory (data directory, flows, worker
	// logs) in place.
	Keep bool
	// Progress receives a line per step of the run; nil discards.
	Progress io.Writer
}

// scenario is one part of the suite.
type scenario struct {
	name  string
	about string
	run   func(ctx context.Context, s *suite) error
}

// scenarios run in this order: later ones reuse the floors and the maximum
// rate measured by earlier ones, and scale, which leaves a million rows
// behind, runs last.
var scenarios = []scenario{
	{"floor", "the same scripts spawned by a plain Go pool: the best the machine can do", runFloor},
	{"burn-down", "one stage of no-op steps at 10 and 32 concurrent steps", runBurnDown},
	{"chain", "steps that each depend on the previous one", runChain},
	{"stages", "a flow that schedules one-step stages one after the other", runStages},
	{"latency", "hand-off latencies at half the maximum rate", runLatency},
	{"fan-in", "many runs of a few steps triggered at once", runFanIn},
	{"api", "POST artifacts and GET a run from 32 clients, against plain SQL", runAPI},
	{"memory", "worker RSS with many concurrent steps and with one very talkative step", runMemory},
	{"scale", "claim latency and burn-down with a million finished rows, against empty", runScale},
}

// Scenarios lists the scenario names with what each measures.
func Scenarios() [][2]string {
	out := make([][2]string, len(scenarios))
	for i, sc := range scenarios {
		out[i] = [2]string{sc.name, sc.about}
	}
	return out
}

// suite is the state of one Run.
type suite struct {
	opts   Options
	size   sizes
	st     *stack
	report *Report
	floors map[int]floorResult // by concurrency
	// maxRate is the burn-down rate at 32 concurrent steps, once measured.
	maxRate float64
	// current is the scenario running, for file names.
	current string
}

// sizes are how big each scenario is.
type sizes struct {
	burnSteps     int
	chainSteps    int
	stageCount    int
	window        time.Duration // latency: how long the load runs
	fanRuns       int
	fanSteps      int
	apiTime       time.Duration // per API measurement
	apiClients    int
	sleepers      int
	sleepSeconds  int
	outputBytes   int64
	logCap        string // MAXQ_MAX_LOG_BYTES for the talkative step; "": the default
	seedFinished  int    // scale: finished steps, in runs of 100
	seedBlocked   int    // scale: blocked steps, in runs of 100
	claimSamples  int
	floorSpawns   int
	burnTimeout   time.Duration
	memoryTimeout time.Duration
}

func fullSizes() sizes {
	return sizes{burnSteps: 2000, chainSteps: 200, stageCount: 100, window: 30 * time.Second,
		fanRuns: 100, fanSteps: 10, apiTime: 5 * time.Second, apiClients: 32, sleepers: 500, sleepSeconds: 5,
		outputBytes: 1_000_000_000, seedFinished: 1_000_000, seedBlocked: 100_000, claimSamples: 200,
		floorSpawns: 2000, burnTimeout: 3 * time.Minute, memoryTimeout: 3 * time.Minute}
}

func quickSizes() sizes {
	return sizes{burnSteps: 100, chainSteps: 20, stageCount: 5, window: 3 * time.Second,
		fanRuns: 10, fanSteps: 3, apiTime: 500 * time.Millisecond, apiClients: 32, sleepers: 20, sleepSeconds: 1,
		outputBytes: 5_000_000, logCap: "1048576", seedFinished: 10_000, seedBlocked: 1_000, claimSamples: 20,
		floorSpawns: 100, burnTimeout: time.Minute, memoryTimeout: time.Minute}
}

// Run starts a stack, runs the scenarios and returns their figures. A
// scenario that fails is reported in the table and the others still run;
// the error then names every failure.
func Run(ctx context.Context, opts Options) (*Report, error) {
	var selected []scenario
	for _, name := range opts.Scenarios {
		if !slices.ContainsFunc(scenarios, func(sc scenario) bool { return sc.name == name }) {
			return nil, fmt.Errorf("no scenario %q; the scenarios are %s", name, strings.Join(scenarioNames(), ", "))
		}
	}
	for _, sc := range scenarios {
		if len(opts.Scenarios) == 0 || slices.Contains(opts.Scenarios, sc.name) {
			selected = append(selected, sc)
		}
	}
	if opts.ProfileDir != "" {
		if err := os.MkdirAll(opts.ProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("profile directory: %w", err)
		}
	}
	s := &suite{opts: opts, size: fullSizes(), floors: map[int]floorResult{}}
	if opts.Quick {
		s.size = quickSizes()
	}
	s.progress("starting the stack")
	st, err := startStack(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer st.close()
	s.st = st
	machine, err := measureMachine(ctx, st)
	if err != nil {
		return nil, err
	}
	s.report = &Report{Machine: machine, Quick: opts.Quick}
	s.progress("%s", machine.Line())

	var errs []error
	for _, sc := range selected {
		s.current = sc.name
		s.progress("scenario %s: %s", sc.name, sc.about)
		start := time.Now()
		if err := s.runScenario(ctx, sc); err != nil {
			errs = append(errs, fmt.Errorf("scenario %s: %w", sc.name, err))
			s.report.text(sc.name, "error", err.Error())
			s.progress("scenario %s failed: %v", sc.name, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		s.progress("scenario %s done in %s", sc.name, time.Since(start).Round(100*time.Millisecond))
	}
	s.report.Machine.LoadAfter = loadAverage()
	return s.report, errors.Join(errs...)
}

// runScenario runs one scenario on an empty database, with this process's
// CPU profile and the database's statement statistics when asked for.
func (s *suite) runScenario(ctx context.Context, sc scenario) error {
	if err := s.st.truncate(ctx); err != nil {
		return err
	}
	if s.opts.ProfileDir != "" {
		f, err := os.Create(filepath.Join(s.opts.ProfileDir, "bench-"+sc.name+".pprof"))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
		s.st.statementsReset(ctx)
		defer s.st.statementsDump(ctx, filepath.Join(s.opts.ProfileDir, "pgstat-"+sc.name+".txt"))
	}
	return sc.run(ctx, s)
}

func scenarioNames() []string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.name
	}
	return names
}

func (s *suite) progress(format string, args ...any) {
	if s.opts.Progress != nil {
		fmt.Fprintf(s.opts.Progress, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}
