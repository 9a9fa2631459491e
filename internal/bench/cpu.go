package bench

import (
	"fmt"
	"os"
	"runtime"
	"time"
)

// cpuSnapshot is the CPU time used so far by each part of the stack and by
// the whole machine.
type cpuSnapshot struct {
	at          time.Time
	busy, total time.Duration // the machine, all cores
	bench       procTimes     // this process: the API and the benchmark's clients
	worker      procTimes     // its children are the scripts
	postgres    time.Duration // the server and its backends
	// ownServer: the server is this benchmark's child, so its CPU is known.
	ownServer bool
}

// cpuNow takes a snapshot; w may be nil.
func (s *suite) cpuNow(w *workerProc) cpuSnapshot {
	c := cpuSnapshot{at: time.Now()}
	c.busy, c.total = machineCPU()
	c.bench, _ = readProc(os.Getpid())
	if w != nil {
		c.worker, _ = readProc(w.pid)
	}
	if pid := s.st.postmasterPID(); pid != 0 {
		c.postgres, c.ownServer = treeCPU(pid), true
	}
	return c
}

// cpuUse is the CPU each part used between two snapshots.
type cpuUse struct {
	wall                                   time.Duration
	worker, scripts, postgres, bench, busy time.Duration
	ownServer                              bool
}

func (a cpuSnapshot) to(b cpuSnapshot) cpuUse {
	return cpuUse{
		wall:      b.at.Sub(a.at),
		worker:    b.worker.self - a.worker.self,
		scripts:   b.worker.children - a.worker.children,
		postgres:  b.postgres - a.postgres,
		bench:     b.bench.self - a.bench.self,
		busy:      b.busy - a.busy,
		ownServer: a.ownServer && b.ownServer,
	}
}

// other is the CPU used by processes outside the stack: noise from
// whatever else runs on the machine.
func (u cpuUse) other() time.Duration {
	return max(u.busy-u.worker-u.scripts-u.postgres-u.bench, 0)
}

// perItem describes where the CPU went per unit of work (a step, a run).
func (u cpuUse) perItem(n int, unit string) string {
	if n == 0 || u.wall <= 0 || u.busy == 0 {
		return "n/a"
	}
	per := func(d time.Duration) float64 { return ms(d) / float64(n) }
	cores := func(d time.Duration) float64 { return float64(d) / float64(u.wall) }
	postgres := fmt.Sprintf("%.2f", per(u.postgres))
	other := "other processes"
	if !u.ownServer {
		postgres, other = "n/a", "PostgreSQL and other processes"
	}
	s := fmt.Sprintf("worker %.2f, scripts %.2f, postgres %s, api+bench %.2f ms/%s", per(u.worker), per(u.scripts),
		postgres, per(u.bench), unit)
	return s + fmt.Sprintf("; machine %.0f%% busy, %s %.2f cores",
		min(100, 100*cores(u.busy)/float64(runtime.NumCPU())), other, cores(u.other()))
}
