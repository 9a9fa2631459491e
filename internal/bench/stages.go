package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/maxq-dev/maxq/internal/config"
)

// runStages runs a flow whose flow.sh schedules one one-step stage after
// the other: every stage costs a callback. The floor is the same flow.sh
// and step.sh run one after the other by a plain loop, flow.sh's curl
// answered by a handler that does nothing.
func runStages(ctx context.Context, s *suite) error {
	n := s.size.stageCount
	dir, err := s.st.writeFlow(flowSpec{name: "stages", flow: stagesFlow(n), steps: sameSteps(noopScript, numbered("n", n, 0)...)})
	if err != nil {
		return err
	}
	floor, err := stagesFloor(ctx, dir, n)
	if err != nil {
		return err
	}
	var runID string
	var cpu cpuUse
	err = s.withWorker(ctx, "stages", nil, func(w *workerProc) error {
		before := s.cpuNow(w)
		runID, err = s.st.trigger(ctx, "stages")
		if err != nil {
			return err
		}
		if err := s.st.waitRuns(ctx, []string{runID}, s.size.burnTimeout); err != nil {
			return err
		}
		cpu = before.to(s.cpuNow(w))
		return nil
	})
	if err != nil {
		return err
	}
	cb, err := s.callbacks(ctx, []string{runID}, filepath.Join(dir, "starts.log"))
	if err != nil {
		return err
	}
	s.report.versus("stages", fmt.Sprintf("time per stage (callback and its step), %d stages", n), cb.cycle, floor, "ms")
	s.report.value("stages", "overhead per callback above the floor", cb.cycle-floor, "ms")
	cb.addRows(s.report, "stages")
	s.report.text("stages", "CPU", cpu.perItem(n, "stage"))
	return nil
}

// runName names a stage or a step of a run.
type runName struct{ run, name string }

// callbackTimes break the cycle of a stage-by-stage flow into its parts.
type callbackTimes struct {
	cycle float64 // ms from one stage's completion to the next one's
	// completed → claimed: stage completed → flow call claimed (the engine).
	completedToClaimed samples
	// completed → running: stage completed → flow.sh running (its clock).
	completedToRunning samples
	// claimed → scheduled: flow call claimed → next stage created
	// (spawning flow.sh, its curl, the API's transaction).
	claimedToScheduled samples
	// scheduled → claimed: stage created → its step claimed.
	scheduledToClaimed samples
}

func (cb callbackTimes) addRows(r *Report, scenario string) {
	r.value(scenario, "stage completed → next flow.sh claimed, p50", cb.completedToClaimed.pct(50), "ms")
	r.value(scenario, "stage completed → next flow.sh claimed, p99", cb.completedToClaimed.pct(99), "ms")
	r.value(scenario, "stage completed → next flow.sh running (its clock), p50", cb.completedToRunning.pct(50), "ms")
	r.value(scenario, "stage completed → next flow.sh running (its clock), p99", cb.completedToRunning.pct(99), "ms")
	r.value(scenario, "flow.sh claimed → next stage scheduled (flow.sh, curl, API), mean", cb.claimedToScheduled.mean(), "ms")
	r.value(scenario, "stage scheduled → its step claimed, p50", cb.scheduledToClaimed.pct(50), "ms")
	r.value(scenario, "stage scheduled → its step claimed, p99", cb.scheduledToClaimed.pct(99), "ms")
}

// callbacks reads the times of stage-by-stage runs (stagesFlow) from the
// database and from the flow's starts.log.
func (s *suite) callbacks(ctx context.Context, runIDs []string, startsLog string) (callbackTimes, error) {
	var cb callbackTimes
	stages, err := s.st.stages(ctx, runIDs)
	if err != nil {
		return cb, err
	}
	calls, err := s.st.flowCalls(ctx, runIDs)
	if err != nil {
		return cb, err
	}
	steps, err := s.st.steps(ctx, runIDs)
	if err != nil {
		return cb, err
	}
	starts, err := readRecords(startsLog)
	if err != nil {
		return cb, err
	}
	stageBy := map[runName]stageRow{}
	for _, g := range stages {
		stageBy[runName{g.RunID, g.Name}] = g
	}
	stepBy := map[runName]stepRow{}
	for _, st := range steps {
		stepBy[runName{st.RunID, st.Name}] = st
	}
	var cycles samples
	for _, c := range calls {
		if c.CompletedStage == nil || c.StartedAt == nil {
			continue
		}
		done, ok := stageBy[runName{c.RunID, *c.CompletedStage}]
		if !ok || done.CompletedAt == nil {
			continue
		}
		cb.completedToClaimed = append(cb.completedToClaimed, float64(*c.StartedAt-*done.CompletedAt))
		if at, ok := starts[runName{c.RunID, *c.CompletedStage}]; ok {
			cb.completedToRunning = append(cb.completedToRunning, at-float64(*done.CompletedAt))
		}
		i, err := strconv.Atoi(strings.TrimPrefix(*c.CompletedStage, "st"))
		if err != nil {
			continue
		}
		next, ok := stageBy[runName{c.RunID, "st" + strconv.Itoa(i+1)}]
		if !ok {
			continue
		}
		cb.claimedToScheduled = append(cb.claimedToScheduled, float64(next.CreatedAt-*c.StartedAt))
		if next.CompletedAt != nil {
			cycles = append(cycles, float64(*next.CompletedAt-*done.CompletedAt))
		}
	}
	for _, g := range stages {
		i := strings.TrimPrefix(g.Name, "st")
		if st, ok := stepBy[runName{g.RunID, "n" + i}]; ok && st.StartedAt != nil {
			cb.scheduledToClaimed = append(cb.scheduledToClaimed, float64(*st.StartedAt-g.CreatedAt))
		}
	}
	cb.cycle = cycles.mean()
	return cb, nil
}

// stagesFloor runs the stages flow's flow.sh and its step one after the
// other, n times, with flow.sh's curl answered by a handler that does
// nothing, and returns the time per pair in milliseconds.
func stagesFloor(ctx context.Context, flowDir string, n int) (float64, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("{}\n"))
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// A copy, so that its starts.log is its own.
	dir, err := os.MkdirTemp(filepath.Dir(flowDir), "stages-floor-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	flowSH, err := os.ReadFile(filepath.Join(flowDir, "flow.sh"))
	if err != nil {
		return 0, err
	}
	if err := writeExe(filepath.Join(dir, "flow.sh"), string(flowSH)); err != nil {
		return 0, err
	}
	stepDir := filepath.Join(flowDir, "steps", "n0")
	var base []string
	for _, k := range config.Defaults().PassEnv {
		if v, ok := os.LookupEnv(k); ok {
			base = append(base, k+"="+v)
		}
	}
	start := time.Now()
	for i := range n {
		completed := ""
		if i > 0 {
			completed = "st" + strconv.Itoa(i-1)
		}
		flow := exec.CommandContext(ctx, filepath.Join(dir, "flow.sh"))
		flow.Dir = dir
		flow.Env = slices.Concat(base, []string{"MAXQ_API=http://" + ln.Addr().String(), "MAXQ_RUN_ID=floor", "MAXQ_COMPLETED_STAGE=" + completed})
		if out, err := flow.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("floor flow.sh: %w: %s", err, out)
		}
		step := exec.CommandContext(ctx, filepath.Join(stepDir, "step.sh"))
		step.Dir, step.Env = stepDir, base
		if err := step.Run(); err != nil {
			return 0, fmt.Errorf("floor step.sh: %w", err)
		}
	}
	return ms(time.Since(start)) / float64(n), nil
}
