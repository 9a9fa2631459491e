package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/maxq-dev/maxq/internal/auth"
	"github.com/maxq-dev/maxq/internal/core"
	"github.com/maxq-dev/maxq/internal/flow"
	"github.com/maxq-dev/maxq/internal/script"
	"github.com/maxq-dev/maxq/internal/store"
)

// Config configures a Worker. New fills the zero values with defaults.
type Config struct {
	Store   *store.Store
	Catalog flow.Catalog
	Logger  *slog.Logger
	// APIURL is MAXQ_API in every script's environment.
	APIURL string
	// MaxSteps and MaxFlows bound how many step and flow scripts run at once.
	MaxSteps int // default 10
	MaxFlows int // default 4
	// StepTimeout applies to steps that set no MAXQ_STEP_TIMEOUT; 0: none.
	StepTimeout time.Duration
	// FlowTimeout bounds one call of flow.sh (default 5 minutes).
	FlowTimeout time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL (default 5 s).
	KillGrace time.Duration
	// MaxLogBytes caps what one script attempt writes to the log table
	// (default 10 MiB; negative: no cap).
	MaxLogBytes int64
	// PassEnv lists the worker's variables passed on to scripts.
	PassEnv []string
	// PollInterval is the safety-net poll (default 2 s).
	PollInterval time.Duration
	// HeartbeatInterval is how often the worker renews its row and checks
	// that its scripts are still its own (default 1 s).
	HeartbeatInterval time.Duration
	// Listen turns on LISTEN/NOTIFY wake-ups (default on; off behind
	// poolers that cannot hold a LISTEN session).
	Listen *bool
	// ScratchDir holds each script's MAXQ_WORK_DIR (default: the OS temp
	// directory).
	ScratchDir string
	// LeaseTTL is the reaper's lease: a worker that has not renewed its
	// heartbeat for most of it stops its own scripts (default 15 s).
	LeaseTTL time.Duration
	// Tokens issues each script's MAXQ_TOKEN, valid for its own run.
	Tokens auth.Tokens
	// BinDir, when set, goes first on every script's PATH; it holds the
	// maxq CLI.
	BinDir string
	// ShutdownGrace is how long a stopping worker lets running scripts
	// finish before it stops them and hands their work back (default 30 s).
	ShutdownGrace time.Duration
}

// Worker runs flows and steps.
type Worker struct {
	cfg         Config
	store       *store.Store
	logger      *slog.Logger
	logs        *logBatcher
	finish      *finisher
	launch      launcher
	scratchDirs scratchDirs

	wake   chan struct{}
	checkN chan struct{} // run a heartbeat now (a run was cancelled)

	draining atomic.Bool // shutting down: stopped scripts hand their work back
	deadline time.Time   // a draining (serverless) pass ends by then

	// claiming is held by a claim of the loop (fill) and by a batch of
	// results that claims (finisher), so that the two take turns: neither
	// reserves the free slots while the other's claim is in flight, when
	// the work that claim is about to make claimable could not use them.
	claiming sync.Mutex

	mu       sync.Mutex
	id       string
	steps    map[string]*running        // by step id
	calls    map[string]*running        // by flow call id
	reserved struct{ steps, calls int } // slots held for claims in flight (reserve)
	wg       sync.WaitGroup
	stopping bool
	report   Report
}

// running is a script this worker runs.
type running struct {
	stop context.CancelFunc
}

// New returns a worker; call Run.
func New(cfg Config) *Worker {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With("component", "worker")
	cfg.MaxSteps = cmp.Or(cfg.MaxSteps, 10)
	cfg.MaxFlows = cmp.Or(cfg.MaxFlows, 4)
	cfg.FlowTimeout = cmp.Or(cfg.FlowTimeout, 5*time.Minute)
	cfg.KillGrace = cmp.Or(cfg.KillGrace, 5*time.Second)
	cfg.MaxLogBytes = cmp.Or(cfg.MaxLogBytes, 10<<20)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 2*time.Second)
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, time.Second)
	cfg.ScratchDir = cmp.Or(cfg.ScratchDir, os.TempDir())
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, 15*time.Second)
	cfg.ShutdownGrace = cmp.Or(cfg.ShutdownGrace, 30*time.Second)
	if cfg.Listen == nil {
		on := true
		cfg.Listen = &on
	}
	return &Worker{
		cfg:         cfg,
		store:       cfg.Store,
		logger:      cfg.Logger,
		wake:        make(chan struct{}, 1),
		checkN:      make(chan struct{}, 1),
		steps:       map[string]*running{},
		calls:       map[string]*running{},
		scratchDirs: scratchDirs{root: filepath.Join(cfg.ScratchDir, "maxq-work")},
	}
}

// ID is the worker's id once Run has registered it.
func (w *Worker) ID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id
}

func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Report is what a worker did.
type Report struct {
	StepsClaimed     int `json:"stepsClaimed"`
	FlowCallsClaimed int `json:"flowCallsClaimed"`
	StepsCompleted   int `json:"stepsCompleted"`
	StepsFailed      int `json:"stepsFailed"` // attempts that failed (some retry)
	FlowCallsFailed  int `json:"flowCallsFailed"`
	HandedBack       int `json:"handedBack"` // stopped and returned to pending
}

// Run claims and runs work until ctx is done, then lets running scripts
// finish (up to ShutdownGrace) and returns.
func (w *Worker) Run(ctx context.Context) error {
	_, err := w.run(ctx, time.Time{})
	return err
}

// drainMargin is how long before an invocation's deadline a draining
// worker stops its scripts and hands their work back.
const drainMargin = 3 * time.Second

// Drain is one pass for a serverless invocation that must end by deadline:
// it claims only work whose timeout fits in the time left, runs it, claims
// what becomes ready meanwhile, and returns once nothing it can run is left
// — after its scripts have finished. A script still running close to the
// deadline (one with no timeout) is stopped and handed back.
func (w *Worker) Drain(ctx context.Context, deadline time.Time) (Report, error) {
	return w.run(ctx, deadline)
}

func (w *Worker) run(ctx context.Context, deadline time.Time) (Report, error) {
	host, _ := os.Hostname()
	id, err := w.store.WorkerRegister(ctx, host)
	if err != nil {
		if ctx.Err() != nil {
			return Report{}, nil // stopped before it started
		}
		return Report{}, err
	}
	w.mu.Lock()
	w.id = id
	w.mu.Unlock()
	w.deadline = deadline
	w.logger = w.logger.With("worker_id", id)
	w.logger.Info("worker started", "max_steps", w.cfg.MaxSteps, "max_flows", w.cfg.MaxFlows, "listen", *w.cfg.Listen)

	// Scripts outlive ctx: a shutdown lets them finish.
	scriptCtx, stopScripts := context.WithCancel(context.WithoutCancel(ctx))
	defer stopScripts()
	loopCtx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		loopCtx, cancel = context.WithDeadline(ctx, deadline.Add(-drainMargin))
		defer cancel()
		stopAt := time.AfterFunc(time.Until(deadline.Add(-drainMargin)), func() {
			w.draining.Store(true)
			stopScripts()
		})
		defer stopAt.Stop()
	}
	w.logs = newLogBatcher(w.store, w.logger)
	w.finish = newFinisher(w, func(c store.ClaimedStep) { w.startStep(scriptCtx, c) },
		func(c store.ClaimedFlowCall) { w.startFlowCall(scriptCtx, c) })
	defer w.scratchDirs.close()
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG sync.WaitGroup
	bgWG.Add(1)
	go func() { defer bgWG.Done(); w.finish.loop(bg) }()
	bgWG.Add(1)
	go func() { defer bgWG.Done(); w.heartbeat(bg) }()
	if *w.cfg.Listen {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); w.listen(bg) }()
	}

	timer := time.NewTimer(0)
	defer timer.Stop()
	for loopCtx.Err() == nil {
		next, claimed := w.fill(loopCtx, scriptCtx)
		if !deadline.IsZero() && claimed == 0 && w.idle() && len(w.wake) == 0 {
			// A serverless pass ends when nothing is left to run. A wake
			// pending means a batch recorded since the claim began may
			// have made work ready.
			break
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
		select {
		case <-loopCtx.Done():
		case <-w.wake:
		case <-timer.C:
		}
	}

	w.mu.Lock()
	w.stopping = true
	n := len(w.steps) + len(w.calls)
	w.mu.Unlock()
	finished := make(chan struct{})
	go func() { w.wg.Wait(); close(finished) }()
	if deadline.IsZero() {
		w.logger.Info("worker stopping: no more claims; waiting for running scripts", "running", n, "grace", w.cfg.ShutdownGrace)
		select {
		case <-finished:
		case <-time.After(w.cfg.ShutdownGrace):
			w.logger.Warn("grace period over: stopping scripts and handing their work back")
			w.draining.Store(true)
			stopScripts()
			<-finished
		}
	} else {
		<-finished // the deadline timer stops what is still running
	}
	stopBG()
	bgWG.Wait()
	w.logs.close()
	if err := w.store.WorkerDeregister(context.WithoutCancel(ctx), id); err != nil {
		w.logger.Warn("deregister worker", "err", err)
	}
	w.mu.Lock()
	report := w.report
	w.mu.Unlock()
	w.logger.Info("worker stopped", "steps_claimed", report.StepsClaimed, "flow_calls_claimed", report.FlowCallsClaimed,
		"steps_completed", report.StepsCompleted, "steps_failed", report.StepsFailed, "handed_back", report.HandedBack)
	return report, nil
}

func (w *Worker) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.steps) == 0 && len(w.calls) == 0 && w.finish.pending.Load() == 0
}

// count updates the report.
func (w *Worker) count(f func(*Report)) {
	w.mu.Lock()
	f(&w.report)
	w.mu.Unlock()
}

// fill claims work for every free slot and starts it. It returns how long
// to sleep before looking again, unless woken, and how much it claimed.
// The free slots are reserved while the claim runs, as the finisher's are,
// so that the two never claim into the same slot, and the two claims take
// turns (w.claiming): a batch of results recorded during the loop's claim
// would find no free slot for the dependents and flow calls it releases.
func (w *Worker) fill(ctx, scriptCtx context.Context) (time.Duration, int) {
	sleep := w.cfg.PollInterval
	params, ok := w.stepClaimParams(0)
	if !ok {
		return sleep, 0
	}
	w.claiming.Lock()
	defer w.claiming.Unlock()
	flows := w.cfg.MaxFlows
	if !w.flowFits(params) {
		flows = 0
	}
	freeSteps, freeFlows := w.reserve(w.cfg.MaxSteps, flows)
	defer w.unreserve(freeSteps, freeFlows)
	if freeFlows == 0 && freeSteps == 0 {
		return sleep, 0
	}
	params.Limit = freeSteps
	got, err := w.store.Claim(ctx, store.ClaimParams{Flows: freeFlows, StepClaimParams: params})
	if err != nil {
		w.logClaimError(ctx, err)
		return sleep, 0
	}
	w.count(func(r *Report) {
		r.FlowCallsClaimed += len(got.Calls)
		r.StepsClaimed += len(got.Steps)
	})
	for _, c := range got.Calls {
		w.startFlowCall(scriptCtx, c)
	}
	for _, s := range got.Steps {
		w.startStep(scriptCtx, s)
	}
	if len(got.Steps) < freeSteps && got.NextReady > 0 {
		// Nothing more is ready now; wake when a backoff ends.
		if d := time.Until(time.UnixMilli(got.NextReady)); d < sleep {
			sleep = max(d, time.Millisecond)
		}
	}
	claimed := len(got.Calls) + len(got.Steps)
	return sleep, claimed
}

// stepClaimParams says what this worker can take now, up to limit steps.
// ok is false for a draining worker past its last moment to start work;
// before it, MaxTimeoutMs is the time it has left.
func (w *Worker) stepClaimParams(limit int) (p store.StepClaimParams, ok bool) {
	p = store.StepClaimParams{WorkerID: w.id, Limit: max(limit, 0), DefaultTimeoutMs: w.cfg.StepTimeout.Milliseconds()}
	if !w.deadline.IsZero() {
		left := time.Until(w.deadline.Add(-drainMargin))
		if left < time.Millisecond { // MaxTimeoutMs 0 would mean no bound
			return p, false
		}
		p.MaxTimeoutMs = left.Milliseconds()
	}
	return p, true
}

// flowFits reports whether a call of flow.sh can end before a draining
// worker's deadline (p from stepClaimParams).
func (w *Worker) flowFits(p store.StepClaimParams) bool {
	return p.MaxTimeoutMs == 0 || w.cfg.FlowTimeout.Milliseconds() <= p.MaxTimeoutMs
}

// reserve holds up to steps free step slots and up to calls free flow
// call slots for a claim: fill's, or the finisher's, which claims
// dependents and flow calls as it records results. Neither claims into
// slots the other holds until unreserve, which comes after what was
// claimed has taken its slots. A stopping worker reserves none.
func (w *Worker) reserve(steps, calls int) (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return 0, 0
	}
	steps = min(steps, w.freeSteps())
	calls = min(calls, max(w.cfg.MaxFlows-len(w.calls)-w.reserved.calls, 0))
	w.reserved.steps += steps
	w.reserved.calls += calls
	return steps, calls
}

// reserveForBatch gives a batch of results up to n step slots for the
// dependents it claims: first the held slots its own steps passed to it
// (stepEnded), then free ones, which it reserves (extra; unreserve them).
// A stopping worker gives none.
func (w *Worker) reserveForBatch(held, n int) (slots, extra int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return 0, 0
	}
	own := min(n, held)
	extra = min(n-own, w.freeSteps())
	w.reserved.steps += extra
	return own + extra, extra
}

// freeSteps is how many step slots are neither running nor reserved; the
// caller holds w.mu.
func (w *Worker) freeSteps() int {
	return max(w.cfg.MaxSteps-len(w.steps)-w.reserved.steps, 0)
}

func (w *Worker) unreserve(steps, calls int) {
	w.mu.Lock()
	w.reserved.steps -= steps
	w.reserved.calls -= calls
	w.mu.Unlock()
}

func (w *Worker) logClaimError(ctx context.Context, err error) {
	if ctx.Err() == nil {
		w.logger.Error("claim failed; retrying", "err", err)
	}
}

// startFlowCall runs a claimed call of flow.sh in a goroutine of its own,
// which waits for the script: there are few at a time. It pokes the loop
// when the call ends, so the freed slot is filled.
func (w *Worker) startFlowCall(scriptCtx context.Context, c store.ClaimedFlowCall) {
	ctx, stop := context.WithCancel(scriptCtx)
	w.mu.Lock()
	w.calls[c.ID] = &running{stop: stop}
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer stop()
		w.runFlowCall(ctx, c)
		w.mu.Lock()
		delete(w.calls, c.ID)
		w.mu.Unlock()
		w.poke()
	}()
}

// startStep starts a claimed step attempt and returns at once. The step
// holds its slot (w.steps, where a heartbeat finds it to stop it) and the
// WaitGroup until its outcome is queued, but no goroutine: the launcher
// starts its script, and the script package calls stepEnded once it has
// ended.
func (w *Worker) startStep(scriptCtx context.Context, c store.ClaimedStep) {
	ctx, stop := context.WithCancel(scriptCtx)
	w.mu.Lock()
	w.steps[c.ID] = &running{stop: stop}
	w.mu.Unlock()
	w.wg.Add(1)
	w.launch.add(func() { w.launchStep(ctx, stop, c) })
}

// stepAttempt is what a step attempt keeps while its script runs: what
// recording its outcome takes, and no more (not its environment).
type stepAttempt struct {
	id, runID, name   string
	sequence, attempt int
	timeout           time.Duration
	workDir           string
	stop              context.CancelFunc
}

// launchStep gives a step attempt its scratch directory and environment
// and starts its script.
func (w *Worker) launchStep(ctx context.Context, stop context.CancelFunc, c store.ClaimedStep) {
	a := &stepAttempt{id: c.ID, runID: c.RunID, name: c.Name, sequence: c.Sequence, attempt: c.Attempt,
		timeout: time.Duration(c.TimeoutMs) * time.Millisecond, workDir: w.scratch(), stop: stop}
	env := script.Environ(w.cfg.PassEnv, c.Env, map[string]string{
		"MAXQ_RUN_ID":         c.RunID,
		"MAXQ_STEP_ID":        c.ID,
		"MAXQ_STEP_NAME":      c.Name,
		"MAXQ_STEP_SEQUENCE":  strconv.Itoa(c.Sequence),
		"MAXQ_STEP_INSTANCES": strconv.Itoa(c.Instances),
		"MAXQ_STEP_ATTEMPT":   strconv.Itoa(c.Attempt),
		"MAXQ_FLOW_NAME":      c.FlowName,
		"MAXQ_STAGE":          c.Stage,
		"MAXQ_API":            w.cfg.APIURL,
		"MAXQ_WORK_DIR":       a.workDir,
		"TMPDIR":              a.workDir,
		"MAXQ_TOKEN":          w.cfg.Tokens.RunToken(c.RunID),
	}, w.pathEnv())
	script.Start(ctx, script.Spec{
		Path:           w.cfg.Catalog.StepScript(c.FlowName, c.Name),
		Dir:            w.cfg.Catalog.StepDir(c.FlowName, c.Name),
		Env:            env,
		Timeout:        a.timeout,
		Grace:          w.cfg.KillGrace,
		MaxOutputBytes: max(w.cfg.MaxLogBytes, 0),
		OutputBytes:    w.logs.sinkBytes(c.RunID, c.ID, "", c.Attempt),
	}, func(res script.Result) { w.stepEnded(ctx, a, res) })
}

// stepEnded records a step attempt's outcome, or hands the step back, and
// frees its slot. It runs in the goroutine script.Start calls back in,
// which serves this step alone, so it may wait for the database.
//
// A step whose outcome is queued passes its slot to the finisher, which
// holds it (as reserved) until its batch is recorded: the batch claims
// into it first (the outcome's dependents), so no claim of the loop that
// happens to run meanwhile can take it, and then the loop is woken for
// what is left.
func (w *Worker) stepEnded(ctx context.Context, a *stepAttempt, res script.Result) {
	defer func() {
		w.scratchDirs.give(a.workDir)
		a.stop()
		w.wg.Done()
	}()
	log := w.logger.With("run_id", a.runID, "step", a.name, "sequence", a.sequence, "attempt", a.attempt)
	if res.Stopped && w.draining.Load() {
		w.count(func(r *Report) { r.HandedBack++ })
		w.logs.sync()
		w.record(ctx, log, "hand step back", func(ctx context.Context) error {
			_, err := w.store.StepRelease(ctx, a.id, a.attempt)
			return err
		})
		w.mu.Lock()
		delete(w.steps, a.id)
		w.mu.Unlock()
		w.poke()
		return
	}
	var stepErr json.RawMessage
	if res.Succeeded() {
		w.count(func(r *Report) { r.StepsCompleted++ })
	} else {
		w.count(func(r *Report) { r.StepsFailed++ })
		stepErr = failure(res, a.timeout)
	}
	w.finish.add(outcome{log: log, p: store.StepFinishParams{
		StepID: a.id, Attempt: a.attempt, Completed: res.Succeeded(), Error: stepErr, ExitCode: exitCode(res), Retry: true}})
}

// record retries a write of a script's outcome until it succeeds: the
// database may be restarting, and while the worker keeps its lease no one
// else will record it. It gives up after a lease TTL of failures in a row
// past the first minute, when the reaper will have taken the work anyway.
func (w *Worker) record(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) {
	ctx = context.WithoutCancel(ctx)
	start := time.Now()
	delay := 50 * time.Millisecond
	for {
		err := fn(ctx)
		if err == nil {
			return
		}
		if time.Since(start) > time.Minute+w.cfg.LeaseTTL {
			log.Error(what+": giving up", "err", err)
			return
		}
		log.Warn(what+": retrying", "err", err)
		time.Sleep(delay)
		delay = min(delay*2, 2*time.Second)
	}
}

// runFlowCall runs one call of flow.sh and records its outcome.
func (w *Worker) runFlowCall(ctx context.Context, c store.ClaimedFlowCall) {
	log := w.logger.With("run_id", c.RunID, "flow", c.FlowName, "completed_stage", c.CompletedStage, "failed_stage", c.FailedStage)
	workDir := w.scratch()
	defer w.scratchDirs.give(workDir)
	env := script.Environ(w.cfg.PassEnv, nil, map[string]string{
		"MAXQ_RUN_ID":          c.RunID,
		"MAXQ_FLOW_NAME":       c.FlowName,
		"MAXQ_API":             w.cfg.APIURL,
		"MAXQ_COMPLETED_STAGE": c.CompletedStage,
		"MAXQ_FAILED_STAGE":    c.FailedStage,
		"MAXQ_WORK_DIR":        workDir,
		"TMPDIR":               workDir,
		"MAXQ_TOKEN":           w.cfg.Tokens.RunToken(c.RunID),
	}, w.pathEnv())
	var res script.Result
	if err := w.cfg.Catalog.Check(c.FlowName); err != nil {
		res = script.Result{ExitCode: -1, StartErr: err}
	} else {
		res = script.Run(ctx, script.Spec{
			Path:           w.cfg.Catalog.FlowScript(c.FlowName),
			Dir:            filepath.Dir(w.cfg.Catalog.FlowScript(c.FlowName)),
			Env:            env,
			Timeout:        w.cfg.FlowTimeout,
			Grace:          w.cfg.KillGrace,
			MaxOutputBytes: max(w.cfg.MaxLogBytes, 0),
			OutputBytes:    w.logs.sinkBytes(c.RunID, "", c.ID, c.Attempt),
		})
	}
	w.logs.sync()
	var callErr json.RawMessage
	if !res.Succeeded() {
		var detail map[string]any
		_ = json.Unmarshal(failure(res, w.cfg.FlowTimeout), &detail)
		detail["cause"] = detail["reason"]
		detail["reason"] = core.ReasonFlowFailed
		if c.FailedStage != "" {
			detail["failedStage"] = c.FailedStage
		}
		if c.CompletedStage != "" {
			detail["completedStage"] = c.CompletedStage
		}
		callErr, _ = json.Marshal(detail)
	}
	if callErr != nil {
		w.count(func(r *Report) { r.FlowCallsFailed++ })
	}
	if res.Stopped && w.draining.Load() {
		w.count(func(r *Report) { r.HandedBack++ })
		w.record(ctx, log, "hand flow call back", func(ctx context.Context) error {
			_, err := w.store.FlowCallRelease(ctx, c.ID, c.Attempt)
			return err
		})
		return
	}
	var applied bool
	w.record(ctx, log, "record flow call result", func(ctx context.Context) (err error) {
		applied, err = w.store.FlowCallFinish(ctx, store.FlowCallFinishParams{
			CallID: c.ID, Attempt: c.Attempt, Error: callErr, ExitCode: exitCode(res)})
		return err
	})
	switch {
	case !applied:
		log.Info("flow call result discarded: the call is no longer this attempt's", "exit_code", res.ExitCode)
	case callErr != nil:
		log.Warn("flow.sh failed; run failed", "exit_code", res.ExitCode, "stderr", res.StderrTail)
	}
}

// pathEnv puts BinDir first on the PATH the scripts get.
func (w *Worker) pathEnv() map[string]string {
	if w.cfg.BinDir == "" {
		return nil
	}
	path := w.cfg.BinDir
	if p := os.Getenv("PATH"); p != "" && slices.Contains(w.cfg.PassEnv, "PATH") {
		path += string(os.PathListSeparator) + p
	}
	return map[string]string{"PATH": path}
}

// failure describes a failed script run as an error object.
func failure(res script.Result, timeout time.Duration) json.RawMessage {
	e := map[string]any{}
	switch {
	case res.StartErr != nil:
		e["reason"] = core.ReasonStartFailed
		e["detail"] = res.StartErr.Error()
	case res.TimedOut:
		e["reason"] = core.ReasonTimeout
		e["timeoutMs"] = timeout.Milliseconds()
	case res.Stopped:
		e["reason"] = core.ReasonCancelled
	default:
		e["reason"] = core.ReasonExitCode
		e["exitCode"] = res.ExitCode
	}
	if res.StderrTail != "" {
		e["stderr"] = res.StderrTail
	}
	b, _ := json.Marshal(e)
	return b
}

func exitCode(res script.Result) *int {
	if res.StartErr != nil || res.ExitCode < 0 {
		return nil
	}
	return &res.ExitCode
}

// scratch gives a script attempt its MAXQ_WORK_DIR, which
// w.scratchDirs.give takes back once the script has ended.
func (w *Worker) scratch() string {
	dir, err := w.scratchDirs.take()
	if err != nil {
		w.logger.Warn("create scratch directory", "root", w.scratchDirs.root, "err", err)
	}
	return dir
}

// heartbeat renews the worker's row and stops scripts that are no longer
// its own. A worker that cannot renew for most of a lease TTL stops all its
// scripts (self-fencing): the reaper is about to hand their work to others.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.checkN:
		}
		w.mu.Lock()
		steps, calls := keys(w.steps), keys(w.calls)
		w.mu.Unlock()
		lostSteps, lostCalls, err := w.store.WorkerHeartbeat(ctx, w.id, steps, calls)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.logger.Warn("heartbeat failed", "err", err)
			if time.Since(lastOK) > w.cfg.LeaseTTL*4/5 {
				w.logger.Error("lease about to expire: stopping every script this worker runs")
				w.stopAll()
			}
			continue
		}
		lastOK = time.Now()
		w.mu.Lock()
		for _, id := range lostSteps {
			if r := w.steps[id]; r != nil {
				w.logger.Info("stopping step: no longer ours", "step_id", id)
				r.stop()
			}
		}
		for _, id := range lostCalls {
			if r := w.calls[id]; r != nil {
				w.logger.Info("stopping flow call: no longer ours", "flow_call_id", id)
				r.stop()
			}
		}
		w.mu.Unlock()
	}
}

func (w *Worker) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.steps {
		r.stop()
	}
	for _, r := range w.calls {
		r.stop()
	}
}

// listen wakes the loop on every NOTIFY, reconnecting after errors.
func (w *Worker) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := w.listenOnce(ctx, w.store.Pool())
		if ctx.Err() != nil {
			return
		}
		w.logger.Warn("LISTEN connection lost; reconnecting", "err", err)
		w.poke()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (w *Worker) listenOnce(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+store.NotifyChannel); err != nil {
		return err
	}
	defer func() {
		// The connection goes back to the pool: stop listening on it.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "UNLISTEN *")
	}()
	w.poke() // catch up on what was made ready while not listening
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("wait for notification: %w", err)
		}
		if n.Payload == store.NotifyCancel {
			select {
			case w.checkN <- struct{}{}:
			default:
			}
			continue
		}
		w.poke()
	}
}

func keys(m map[string]*running) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
