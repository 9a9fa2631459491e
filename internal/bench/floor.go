package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/maxq-dev/maxq/internal/config"
)

// floorResult is how fast a plain Go pool spawns the no-op step script.
type floorResult struct {
	conc, n  int
	elapsed  time.Duration
	rate     float64 // spawns a second
	perSpawn float64 // ms, elapsed per spawn of one goroutine
	cpu      string
}

// floor spawns the no-op step script through os/exec, conc at a time —
// the same script, by its shebang, in its directory, with the environment
// a worker would pass — with no database and no bookkeeping: the best this
// machine can do. It is measured once per concurrency and run.
func (s *suite) floor(ctx context.Context, conc int) (floorResult, error) {
	if r, ok := s.floors[conc]; ok {
		return r, nil
	}
	dir, err := s.st.writeFlow(flowSpec{name: "floor", flow: noopScript, steps: sameSteps(noopScript, "noop")})
	if err != nil {
		return floorResult{}, err
	}
	stepDir := filepath.Join(dir, "steps", "noop")
	script := filepath.Join(stepDir, "step.sh")
	var env []string
	for _, k := range config.Defaults().PassEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	n := s.size.floorSpawns
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	var mu sync.Mutex
	var errs []error
	before := s.cpuNow(nil)
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for range jobs {
				cmd := exec.CommandContext(ctx, script)
				cmd.Dir, cmd.Env = stepDir, env
				if err := cmd.Run(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	after := s.cpuNow(nil)
	if err := errors.Join(errs...); err != nil {
		return floorResult{}, fmt.Errorf("floor: %w", err)
	}
	u := before.to(after)
	pool, scripts := after.bench.self-before.bench.self, after.bench.children-before.bench.children
	perN := func(d time.Duration) float64 { return ms(d) / float64(n) }
	r := floorResult{conc: conc, n: n, elapsed: elapsed, rate: float64(n) / elapsed.Seconds(),
		perSpawn: ms(elapsed) * float64(conc) / float64(n),
		cpu: fmt.Sprintf("Go pool %.2f, scripts %.2f ms/spawn; machine %.0f%% busy, other processes %.2f cores",
			perN(pool), perN(scripts), min(100, 100*float64(u.busy)/float64(u.wall)/float64(runtime.NumCPU())),
			float64(max(u.busy-pool-scripts-u.postgres, 0))/float64(u.wall))}
	s.floors[conc] = r
	return r, nil
}

// runFloor measures the floor at the concurrencies the other scenarios use.
func runFloor(ctx context.Context, s *suite) error {
	for _, conc := range []int{1, 10, 32} {
		r, err := s.floor(ctx, conc)
		if err != nil {
			return err
		}
		s.report.value("floor", fmt.Sprintf("spawns/s, %d at a time (%d spawns)", conc, r.n), r.rate, "spawns/s")
		if conc == 1 {
			s.report.value("floor", "one spawn, 1 at a time", r.perSpawn, "ms")
		}
		s.report.text("floor", fmt.Sprintf("CPU, %d at a time", conc), r.cpu)
	}
	return nil
}
