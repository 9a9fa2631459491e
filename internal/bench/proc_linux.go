package bench

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procTimes are a process's CPU times: its own, and those of its children
// that it has waited for.
type procTimes struct {
	self, children time.Duration
	ppid           int
}

// readProc reads /proc/pid/stat.
func readProc(pid int) (procTimes, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procTimes{}, err
	}
	// The command name may hold spaces and parentheses: the fields start
	// after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procTimes{}, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return procTimes{}, errors.New("malformed /proc stat")
	}
	n := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * clockTick
	}
	ppid, _ := strconv.Atoi(f[1])
	return procTimes{self: n(11) + n(12), children: n(13) + n(14), ppid: ppid}, nil
}

// treeCPU is the CPU time of process pid, of its live children and of the
// children it has waited for: a PostgreSQL server and all its backends.
func treeCPU(pid int) time.Duration {
	root, err := readProc(pid)
	if err != nil {
		return 0
	}
	total := root.self + root.children
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		child, err := strconv.Atoi(filepath.Base(d))
		if err != nil || child == pid {
			continue
		}
		if p, err := readProc(child); err == nil && p.ppid == pid {
			total += p.self
		}
	}
	return total
}

// machineCPU returns the busy and total CPU time of the machine, all cores
// together, from /proc/stat.
func machineCPU() (busy, total time.Duration) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0
	}
	fields := strings.Fields(sc.Text())
	for i, v := range fields[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		d := time.Duration(n) * clockTick
		total += d
		if i != 3 && i != 4 { // idle, iowait
			busy += d
		}
	}
	return busy, total
}

// memUse is a process's memory as /proc/PID/status gives it, in bytes.
type memUse struct {
	rss  int64 // VmRSS: resident now
	hwm  int64 // VmHWM: the most resident at once
	anon int64 // RssAnon: heap, stacks, the runtime's own
	file int64 // RssFile: file pages, mostly the binary's own
}

// rss reads a process's memory use.
func rss(pid int) (memUse, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return memUse{}, err
	}
	var m memUse
	for line := range strings.Lines(string(b)) {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			m.rss = kb << 10
		case "VmHWM":
			m.hwm = kb << 10
		case "RssAnon":
			m.anon = kb << 10
		case "RssFile":
			m.file = kb << 10
		}
	}
	return m, nil
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

// fdatasync flushes f's data as PostgreSQL's default wal_sync_method does.
func fdatasync(f *os.File) error {
	return syscall.Fdatasync(int(f.Fd()))
}
