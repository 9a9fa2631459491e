package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// mb is a byte count in megabytes (MiB).
func mb(b int64) float64 { return float64(b) / (1 << 20) }

// runMemory reads the worker's own RSS (its scripts are other processes)
// with many concurrent steps, and while one step prints far more than the
// log keeps.
func runMemory(ctx context.Context, s *suite) error {
	if err := s.memoryConcurrent(ctx); err != nil {
		return err
	}
	return s.memoryOutput(ctx)
}

// memoryConcurrent runs a stage of sleeping steps with as many slots as
// steps, so they all run at once.
func (s *suite) memoryConcurrent(ctx context.Context) error {
	n := s.size.sleepers
	sleeper := "#!/bin/sh\nexec sleep " + strconv.Itoa(s.size.sleepSeconds) + "\n"
	if _, err := s.st.writeFlow(flowSpec{name: "sleepers", flow: driverFlow, steps: sameSteps(sleeper, "nap"),
		stage: &stageSpec{Stage: "nap", Final: true, Steps: []stepSpec{{Name: "nap", Instances: n}}}}); err != nil {
		return err
	}
	return s.withWorker(ctx, "sleepers", map[string]string{"MAXQ_MAX_CONCURRENT_STEPS": strconv.Itoa(n)}, func(w *workerProc) error {
		if err := sleep(ctx, time.Second); err != nil { // settle after start-up
			return err
		}
		idle, err := rss(w.pid)
		if err != nil {
			return err
		}
		id, err := s.st.trigger(ctx, "sleepers")
		if err != nil {
			return err
		}
		var peak memUse
		most := 0
		done := make(chan error, 1)
		go func() { done <- s.st.waitRuns(ctx, []string{id}, s.size.memoryTimeout) }()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case err := <-done:
				if err != nil {
					return err
				}
				end, _ := rss(w.pid)
				s.report.value("memory", "worker RSS, idle", mb(idle.rss), "MB")
				s.report.value("memory", fmt.Sprintf("worker RSS, %d concurrent steps (peak sampled; %d seen running at once)", n, most), mb(peak.rss), "MB").
					target("≤ 20 MB", mb(peak.rss) <= 20)
				s.report.value("memory", "worker RSS high-water mark (VmHWM) at the end", mb(end.hwm), "MB")
				s.report.text("memory", "worker RSS by kind, idle → that peak", fmt.Sprintf(
					"anonymous (heap, stacks, runtime) %.1f → %.1f MB; file-backed (the binary's pages) %.1f → %.1f MB",
					mb(idle.anon), mb(peak.anon), mb(idle.file), mb(peak.file)))
				return nil
			case <-tick.C:
			}
			if cur, err := rss(w.pid); err == nil && cur.rss > peak.rss {
				peak = cur
			}
			if i%4 == 0 {
				if running, err := s.st.runningSteps(ctx); err == nil {
					if running == n && most < n {
						// All of them at once: where the memory is.
						time.AfterFunc(time.Duration(s.size.sleepSeconds)*time.Second/3, w.heapProfile)
					}
					most = max(most, running)
				}
			}
		}
	})
}

// memoryOutput runs one step that prints outputBytes in 100-byte lines.
func (s *suite) memoryOutput(ctx context.Context) error {
	size := s.size.outputBytes
	talker := "#!/bin/sh\nyes \"$(printf '%099d' 0)\" | head -c " + strconv.FormatInt(size, 10) + "\n"
	if _, err := s.st.writeFlow(flowSpec{name: "talker", flow: driverFlow, steps: sameSteps(talker, "talk"),
		stage: &stageSpec{Stage: "talk", Final: true, Steps: []stepSpec{{Name: "talk", Instances: 1}}}}); err != nil {
		return err
	}
	var settings map[string]string
	if s.size.logCap != "" {
		settings = map[string]string{"MAXQ_MAX_LOG_BYTES": s.size.logCap}
	}
	return s.withWorker(ctx, "talker", settings, func(w *workerProc) error {
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
		m, err := rss(w.pid)
		if err != nil {
			return err
		}
		before := m.rss
		start := time.Now()
		id, err := s.st.trigger(ctx, "talker")
		if err != nil {
			return err
		}
		peak := before
		done := make(chan error, 1)
		go func() { done <- s.st.waitRuns(ctx, []string{id}, s.size.memoryTimeout) }()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		profiled := time.AfterFunc(2*time.Second, w.heapProfile)
		defer profiled.Stop()
		for {
			select {
			case err := <-done:
				if err != nil {
					return err
				}
				elapsed := time.Since(start)
				var lines, kept int64
				if err := s.st.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(octet_length(message) + 1), 0) FROM log WHERE run_id = $1`,
					id).Scan(&lines, &kept); err != nil {
					return err
				}
				s.report.value("memory", fmt.Sprintf("worker RSS growth while one step prints %.0f MB", float64(size)/1e6), mb(peak-before), "MB").
					target("≤ 2 MB", mb(peak-before) <= 2)
				s.report.text("memory", "that step's output: time, log kept",
					fmt.Sprintf("%.1f s (%.0f MB/s read); %d lines, %.1f MB in the log table", elapsed.Seconds(),
						float64(size)/1e6/elapsed.Seconds(), lines, mb(kept)))
				return nil
			case <-tick.C:
			}
			if cur, err := rss(w.pid); err == nil {
				peak = max(peak, cur.rss)
			}
		}
	})
}
