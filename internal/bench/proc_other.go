//go:build !linux

package bench

import (
	"errors"
	"os"
	"time"
)

// Without /proc the benchmark reports no CPU breakdown and no RSS.

type procTimes struct {
	self, children time.Duration
	ppid           int
}

type memUse struct{ rss, hwm, anon, file int64 }

var errNoProc = errors.New("process statistics need Linux's /proc")

func readProc(int) (procTimes, error)         { return procTimes{}, errNoProc }
func treeCPU(int) time.Duration               { return 0 }
func machineCPU() (busy, total time.Duration) { return 0, 0 }
func rss(int) (memUse, error)                 { return memUse{}, errNoProc }
func loadAverage() string                     { return "n/a" }

func fdatasync(f *os.File) error { return f.Sync() }
