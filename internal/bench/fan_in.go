package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
)

// runFanIn triggers many runs of a flow of a few parallel steps at once,
// through the API, and reports how fast they drain and how long each took
// from its trigger.
func runFanIn(ctx context.Context, s *suite) error {
	n, width := s.size.fanRuns, s.size.fanSteps
	if _, err := s.st.writeFlow(flowSpec{name: "fan", flow: driverFlow, steps: sameSteps(noopScript, "work"),
		stage: &stageSpec{Stage: "work", Final: true, Steps: []stepSpec{{Name: "work", Instances: width}}}}); err != nil {
		return err
	}
	var ids []string
	var cpu cpuUse
	err := s.withWorker(ctx, "fan", map[string]string{"MAXQ_MAX_CONCURRENT_STEPS": "32"}, func(w *workerProc) error {
		before := s.cpuNow(w)
		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-gate
				id, err := s.st.trigger(ctx, "fan")
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				ids = append(ids, id)
			})
		}
		close(gate)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if err := s.st.waitRuns(ctx, ids, s.size.burnTimeout); err != nil {
			return err
		}
		cpu = before.to(s.cpuNow(w))
		return nil
	})
	if err != nil {
		return err
	}
	runs, err := s.st.runs(ctx, ids)
	if err != nil {
		return err
	}
	first, last := int64(math.MaxInt64), int64(0)
	var durations samples
	for _, r := range runs {
		first, last = min(first, r.CreatedAt), max(last, *r.CompletedAt)
		durations = append(durations, float64(*r.CompletedAt-r.CreatedAt))
	}
	s.report.value("fan-in", fmt.Sprintf("runs/s, %d runs of %d steps triggered at once", n, width), perSecond(len(runs), first, last), "runs/s")
	s.report.value("fan-in", "steps/s over the same span", perSecond(len(runs)*width, first, last), "steps/s")
	s.report.value("fan-in", "run duration from trigger, p50", durations.pct(50), "ms")
	s.report.value("fan-in", "run duration from trigger, p99", durations.pct(99), "ms")
	s.report.text("fan-in", "CPU", cpu.perItem(n, "run"))
	return nil
}
