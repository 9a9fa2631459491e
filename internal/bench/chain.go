package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// runChain runs a stage of no-op steps s000 … s199 in which each depends on
// the one before, and sets the time per step against the floor's single
// spawn: what MaxQ adds to every hand-off of a sequential flow.
func runChain(ctx context.Context, s *suite) error {
	floor, err := s.floor(ctx, 1)
	if err != nil {
		return err
	}
	n := s.size.chainSteps
	names := numbered("s", n, 3)
	stage := stageSpec{Stage: "chain", Final: true}
	for i, name := range names {
		st := stepSpec{Name: name, Instances: 1}
		if i > 0 {
			st.DependsOn = []string{names[i-1]}
		}
		stage.Steps = append(stage.Steps, st)
	}
	if _, err := s.st.writeFlow(flowSpec{name: "chain", flow: driverFlow, steps: sameSteps(noopScript, names...), stage: &stage}); err != nil {
		return err
	}
	var steps []stepRow
	var cpu cpuUse
	err = s.withWorker(ctx, "chain", nil, func(w *workerProc) error {
		before := s.cpuNow(w)
		id, err := s.st.trigger(ctx, "chain")
		if err != nil {
			return err
		}
		if err := s.st.waitRuns(ctx, []string{id}, s.size.burnTimeout); err != nil {
			return err
		}
		cpu = before.to(s.cpuNow(w))
		steps, err = s.st.steps(ctx, []string{id})
		return err
	})
	if err != nil {
		return err
	}
	slices.SortFunc(steps, func(a, b stepRow) int { return strings.Compare(a.Name, b.Name) })
	first, last := span(steps)
	perStep := float64(last-first) / float64(len(steps))
	var handoff, inStep samples
	for i, st := range steps {
		inStep = append(inStep, float64(*st.CompletedAt-*st.StartedAt))
		if i > 0 {
			handoff = append(handoff, float64(*st.StartedAt-*steps[i-1].CompletedAt))
		}
	}
	s.report.versus("chain", fmt.Sprintf("time per step, %d steps in a chain", len(steps)), perStep, floor.perSpawn, "ms")
	s.report.value("chain", "overhead per step above the floor's spawn", perStep-floor.perSpawn, "ms").
		target("≤ 4 ms", perStep-floor.perSpawn <= 4)
	s.report.value("chain", "dependency completed → dependent claimed, p50", handoff.pct(50), "ms")
	s.report.value("chain", "dependency completed → dependent claimed, p99", handoff.pct(99), "ms")
	s.report.value("chain", "claimed → completed (spawn, script, output, result), mean", inStep.mean(), "ms")
	s.report.text("chain", "CPU", cpu.perItem(len(steps), "step"))
	return nil
}
