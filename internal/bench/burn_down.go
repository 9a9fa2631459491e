package bench

import (
	"context"
	"fmt"
	"strconv"
)

// burnResult is one burn-down: a stage of no-op steps run to the end.
type burnResult struct {
	steps int
	rate  float64 // steps a second, first start to last end
	cpu   cpuUse
}

// burnDown runs one stage of n no-op steps (one step name, n instances) on
// a worker with conc step slots.
func (s *suite) burnDown(ctx context.Context, name string, conc, n int) (burnResult, error) {
	if _, err := s.st.writeFlow(flowSpec{name: "burn", flow: driverFlow, steps: sameSteps(noopScript, "noop"),
		stage: &stageSpec{Stage: "burn", Final: true, Steps: []stepSpec{{Name: "noop", Instances: n}}}}); err != nil {
		return burnResult{}, err
	}
	var r burnResult
	err := s.withWorker(ctx, name, map[string]string{"MAXQ_MAX_CONCURRENT_STEPS": strconv.Itoa(conc)}, func(w *workerProc) error {
		before := s.cpuNow(w)
		id, err := s.st.trigger(ctx, "burn")
		if err != nil {
			return err
		}
		if err := s.st.waitRuns(ctx, []string{id}, s.size.burnTimeout); err != nil {
			return err
		}
		r.cpu = before.to(s.cpuNow(w))
		steps, err := s.st.steps(ctx, []string{id})
		if err != nil {
			return err
		}
		first, last := span(steps)
		r.steps, r.rate = len(steps), perSecond(len(steps), first, last)
		return nil
	})
	return r, err
}

// runBurnDown burns down a stage at 10 and 32 concurrent steps, against
// the floor at the same concurrency.
func runBurnDown(ctx context.Context, s *suite) error {
	for _, conc := range []int{10, 32} {
		floor, err := s.floor(ctx, conc)
		if err != nil {
			return err
		}
		r, err := s.burnDown(ctx, "conc"+strconv.Itoa(conc), conc, s.size.burnSteps)
		if err != nil {
			return err
		}
		row := s.report.versus("burn-down", fmt.Sprintf("steps/s, %d no-op steps, %d at a time", r.steps, conc),
			r.rate, floor.rate, "steps/s")
		if conc == 32 {
			s.maxRate = r.rate
			row.target("≥ 60% of floor and ≥ 500/s", r.rate >= 0.6*floor.rate && r.rate >= 500)
		}
		s.report.text("burn-down", fmt.Sprintf("CPU, %d at a time", conc), r.cpu.perItem(r.steps, "step"))
	}
	return nil
}
