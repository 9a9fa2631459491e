package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// loadTick is how often the load generator schedules a stage.
	loadTick = 50 * time.Millisecond
	// loadStagesPerRun is how many stages one load run takes (each needs
	// step names of its own) before the generator moves to another run.
	loadStagesPerRun = 50
	// triggerEvery paces the one-step runs of probe (b).
	triggerEvery = 200 * time.Millisecond
	// pacedStep is the step of probe (c)'s flow: it sleeps so that its
	// callbacks come a few a second, not as fast as they can.
	pacedStep = "#!/bin/sh\nexec sleep 0.2\n"
	// holdStep keeps a load run open until it is cancelled.
	holdStep = "#!/bin/sh\nexec sleep 3600\n"
)

// runLatency measures hand-off latencies while the worker runs no-op steps
// at half the maximum rate measured by the burn-down:
//
//	(a) a dependency completed → its dependent started,
//	(b) a one-step flow triggered → its run completed,
//	(c) a stage completed → the next call of flow.sh started.
//
// The load is open-loop — its rate does not depend on how fast MaxQ goes:
// every 50 ms the benchmark schedules a stage of no-op steps into a load
// run: l<i> (k-2 instances), p<i>, q<i> which depends on p<i> — a probe for
// (a), taken while l's instances and the other stages keep the worker busy —
// and w<i>, which depends on the run's first step, hold, a sleep that lasts
// until the run is cancelled. w<i> keeps the stage from completing: a stage
// completion costs a call of flow.sh, and two stages of one run completing
// at once deadlock (see BENCHMARKS.md).
func runLatency(ctx context.Context, s *suite) error {
	if s.maxRate == 0 || math.IsNaN(s.maxRate) {
		r, err := s.burnDown(ctx, "max-rate", 32, s.size.burnSteps)
		if err != nil {
			return err
		}
		s.maxRate = r.rate
		s.report.value("latency", "maximum rate (burn-down, 32 at a time)", r.rate, "steps/s")
	}
	// The probes run steps too: (b) five a second, (c) about four.
	rate := max(s.maxRate/2-1/triggerEvery.Seconds()-4, 3/loadTick.Seconds())

	dir := filepath.Join(s.st.dir, "latency")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	qLog := filepath.Join(dir, "q.log")
	loadSteps := map[string]string{"hold": holdStep}
	for i := range loadStagesPerRun {
		n := strconv.Itoa(i)
		loadSteps["l"+n], loadSteps["p"+n], loadSteps["q"+n], loadSteps["w"+n] = noopScript, noopScript, recordScript, noopScript
	}
	pacedStages := int(s.size.window/(200*time.Millisecond)) + 20
	flows := []flowSpec{
		{name: "load", flow: driverFlow, steps: loadSteps,
			stage: &stageSpec{Stage: "hold", Steps: []stepSpec{{Name: "hold", Instances: 1}}}},
		{name: "one", flow: driverFlow, steps: sameSteps(noopScript, "noop"),
			stage: &stageSpec{Stage: "one", Final: true, Steps: []stepSpec{{Name: "noop", Instances: 1}}}},
		{name: "paced", flow: stagesFlow(pacedStages), steps: sameSteps(pacedStep, numbered("n", pacedStages, 0)...)},
	}
	for _, f := range flows {
		if _, err := s.st.writeFlow(f); err != nil {
			return err
		}
	}

	var res latencyRuns
	var cpu cpuUse
	var window [2]int64
	err := s.withWorker(ctx, "load", map[string]string{"MAXQ_MAX_CONCURRENT_STEPS": "32"}, func(w *workerProc) error {
		gen := &loadGenerator{st: s.st, rate: rate, qLog: qLog}
		loadCtx, stopLoad := context.WithCancel(ctx)
		defer stopLoad()
		loadDone := make(chan error, 1)
		go func() { loadDone <- gen.run(loadCtx) }()
		select {
		case <-time.After(min(time.Second, s.size.window/4)): // warm up
		case err := <-loadDone:
			return err
		}

		before := s.cpuNow(w)
		window[0] = time.Now().UnixMilli()
		probeCtx, stopProbes := context.WithTimeout(ctx, s.size.window)
		var wg sync.WaitGroup
		var oneErr, pacedErr error
		wg.Go(func() { res.one, oneErr = s.triggerEvery(probeCtx, "one", triggerEvery) })
		wg.Go(func() { res.paced, pacedErr = s.stagesUntil(probeCtx, "paced") })
		wg.Wait()
		stopProbes()
		window[1] = time.Now().UnixMilli()
		cpu = before.to(s.cpuNow(w))
		stopLoad()
		loadErr := <-loadDone
		res.load = gen.started()
		if err := errors.Join(oneErr, pacedErr, loadErr); err != nil {
			return err
		}
		if err := s.st.waitRuns(ctx, res.one, time.Minute); err != nil {
			return err
		}
		return gen.finish(ctx)
	})
	if err != nil {
		return err
	}
	return s.latencyRows(ctx, res, window, cpu, qLog, filepath.Join(s.st.flows, "paced", "starts.log"))
}

// latencyRuns are the runs of the latency scenario.
type latencyRuns struct {
	load, one, paced []string
}

// latencyRows reads the probes' times and adds the scenario's rows.
func (s *suite) latencyRows(ctx context.Context, res latencyRuns, window [2]int64, cpu cpuUse, qLog, startsLog string) error {
	// (a): p<i> completed → q<i> claimed, and → q<i> running by its own
	// clock, for the stages scheduled in the window.
	steps, err := s.st.steps(ctx, res.load)
	if err != nil {
		return err
	}
	qStarts, err := readRecords(qLog)
	if err != nil {
		return err
	}
	pDone := map[runName]int64{}
	q := map[runName]stepRow{}
	for _, st := range steps {
		if st.Status != "completed" || st.CreatedAt < window[0] || st.CreatedAt > window[1] {
			continue
		}
		switch st.Name[0] {
		case 'p':
			pDone[runName{st.RunID, st.Name[1:]}] = *st.CompletedAt
		case 'q':
			q[runName{st.RunID, st.Name[1:]}] = st
		}
	}
	var claimed, running samples
	for k, st := range q {
		done, ok := pDone[k]
		if !ok {
			continue
		}
		claimed = append(claimed, float64(*st.StartedAt-done))
		if at, ok := qStarts[runName{k.run, st.Name}]; ok {
			running = append(running, at-float64(done))
		}
	}

	// The load actually run: every step claimed in the window.
	var inWindow int
	if err := s.st.pool.QueryRow(ctx, `SELECT count(*) FROM step WHERE started_at BETWEEN $1 AND $2`,
		window[0], window[1]).Scan(&inWindow); err != nil {
		return err
	}
	rate := float64(inWindow) / (float64(window[1]-window[0]) / 1000)

	// (b): trigger → completed.
	runs, err := s.st.runs(ctx, res.one)
	if err != nil {
		return err
	}
	var e2e samples
	for _, r := range runs {
		if r.CompletedAt != nil {
			e2e = append(e2e, float64(*r.CompletedAt-r.CreatedAt))
		}
	}

	// (c): stage completed → next flow.sh.
	cb, err := s.callbacks(ctx, res.paced, startsLog)
	if err != nil {
		return err
	}

	r := s.report
	r.versus("latency", "load: steps/s run during the probes (target half the burn-down rate)", rate, s.maxRate, "steps/s")
	// The targets are on the script's own first line: a dependent is
	// claimed in the transaction that records its dependency's result, so
	// the claim alone says little.
	r.value("latency", fmt.Sprintf("(a) dependency completed → dependent claimed, p50 (%d samples)", len(claimed)), claimed.pct(50), "ms")
	r.value("latency", "(a) dependency completed → dependent claimed, p99", claimed.pct(99), "ms")
	p50, p99 := running.pct(50), running.pct(99)
	r.value("latency", fmt.Sprintf("(a) dependency completed → dependent running (its clock), p50 (%d samples)", len(running)), p50, "ms").
		target("≤ 5 ms", p50 <= 5)
	r.value("latency", "(a) dependency completed → dependent running (its clock), p99", p99, "ms").target("≤ 25 ms", p99 <= 25)
	r.value("latency", fmt.Sprintf("(b) trigger → run completed, one-step flow, p50 (%d runs)", len(e2e)), e2e.pct(50), "ms")
	r.value("latency", "(b) trigger → run completed, one-step flow, p99", e2e.pct(99), "ms").
		target("≤ 100 ms", e2e.pct(99) <= 100)
	r.value("latency", fmt.Sprintf("(c) stage completed → next flow.sh claimed, p50 (%d samples)", len(cb.completedToClaimed)), cb.completedToClaimed.pct(50), "ms")
	r.value("latency", "(c) stage completed → next flow.sh claimed, p99", cb.completedToClaimed.pct(99), "ms")
	c99 := cb.completedToRunning.pct(99)
	r.value("latency", "(c) stage completed → next flow.sh running (its clock), p50", cb.completedToRunning.pct(50), "ms")
	r.value("latency", "(c) stage completed → next flow.sh running (its clock), p99", c99, "ms").target("≤ 25 ms", c99 <= 25)
	r.text("latency", "CPU during the probes", cpu.perItem(inWindow, "step"))
	return nil
}

// triggerEvery triggers a run of flow every interval until ctx ends, and
// returns their ids. A slow trigger does not hold the next one back.
func (s *suite) triggerEvery(ctx context.Context, flow string, every time.Duration) ([]string, error) {
	var mu sync.Mutex
	var ids []string
	var errs []error
	var wg sync.WaitGroup
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		wg.Go(func() {
			id, err := s.st.trigger(context.WithoutCancel(ctx), flow)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ids = append(ids, id)
		})
		select {
		case <-ctx.Done():
			wg.Wait()
			return ids, errors.Join(errs...)
		case <-tick.C:
		}
	}
}

// stagesUntil runs stage-by-stage runs of flow one after the other until
// ctx ends, then cancels the one still running, and returns their ids.
func (s *suite) stagesUntil(ctx context.Context, flow string) ([]string, error) {
	var ids []string
	for ctx.Err() == nil {
		id, err := s.st.trigger(ctx, flow)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return ids, err
		}
		ids = append(ids, id)
		if err := s.st.waitRuns(ctx, []string{id}, time.Hour); err != nil && ctx.Err() == nil {
			return ids, err
		}
	}
	if len(ids) > 0 {
		return ids, s.st.cancel(context.WithoutCancel(ctx), ids[len(ids)-1])
	}
	return ids, nil
}

// readRecords reads lines "run name epoch" that scripts appended: the
// steps of recordScript, the calls of stagesFlow (the first call, with no
// completed stage, has two fields and is skipped).
func readRecords(path string) (map[runName]float64, error) {
	out := map[runName]float64{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue
		}
		at, err := parseEpoch(fields[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out[runName{fields[0], fields[1]}] = at
	}
	return out, sc.Err()
}

// loadGenerator schedules stages of no-op steps at a steady rate into load
// runs, moving to a new run when one has used its step names.
type loadGenerator struct {
	st   *stack
	rate float64 // steps a second
	qLog string

	mu   sync.Mutex
	runs []string
}

type startedRun struct {
	id  string
	err error
}

func (g *loadGenerator) run(ctx context.Context) error {
	runID, err := g.startRun(ctx)
	if err != nil {
		return err
	}
	var next chan startedRun
	tick := time.NewTicker(loadTick)
	defer tick.Stop()
	var carry float64
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if i == loadStagesPerRun-10 {
			next = make(chan startedRun, 1)
			go func() {
				id, err := g.startRun(ctx)
				next <- startedRun{id, err}
			}()
		}
		if i == loadStagesPerRun {
			started := <-next
			if started.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("start a load run: %w", started.err)
			}
			// The old run's last stages end before it is cancelled.
			old := runID
			time.AfterFunc(time.Second, func() { _ = g.st.cancel(context.WithoutCancel(ctx), old) })
			runID, i = started.id, 0
		}
		carry += g.rate * loadTick.Seconds()
		k := int(carry)
		if k < 3 {
			continue
		}
		carry -= float64(k)
		n := strconv.Itoa(i)
		_, err := g.st.schedule(ctx, runID, stageSpec{Stage: "t" + n, Steps: []stepSpec{
			{Name: "l" + n, Instances: k - 2},
			{Name: "p" + n, Instances: 1},
			{Name: "q" + n, DependsOn: []string{"p" + n}, Instances: 1, Env: map[string]string{"BENCH_OUT": g.qLog}},
			{Name: "w" + n, DependsOn: []string{"hold"}, Instances: 1},
		}})
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("schedule load: %w", err)
		}
	}
}

// startRun triggers a load run and waits until its hold step runs.
func (g *loadGenerator) startRun(ctx context.Context) (string, error) {
	id, err := g.st.trigger(ctx, "load")
	if err != nil {
		return "", err
	}
	g.mu.Lock()
	g.runs = append(g.runs, id)
	g.mu.Unlock()
	return id, g.st.waitStepRunning(ctx, id, "hold")
}

// started returns the runs started so far.
func (g *loadGenerator) started() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.runs)
}

// finish waits for the load's last steps and cancels its runs.
func (g *loadGenerator) finish(ctx context.Context) error {
	runs := g.started()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var open int
		if err := g.st.pool.QueryRow(ctx, `SELECT count(*) FROM step
			WHERE run_id = ANY($1) AND (status = 'running' AND name <> 'hold' OR status = 'pending' AND deps_left = 0)`,
			runs).Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var errs []error
	for _, id := range runs {
		errs = append(errs, g.st.cancel(ctx, id))
	}
	return errors.Join(errs...)
}
