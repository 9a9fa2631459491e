package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Machine is what the figures depend on most.
type Machine struct {
	Cores      int
	CPU        string
	PostgreSQL string // version and durability settings
	// FsyncPerSec is how many 8 kB write+fdatasync pairs a second the
	// disk under the data directory takes: the ceiling on commits.
	FsyncPerSec float64
	Go          string
	LoadBefore  string
	LoadAfter   string
}

// Line is the machine line printed with every result.
func (m Machine) Line() string {
	s := fmt.Sprintf("machine: %d cores (%s), PostgreSQL %s, fsync %.0f/s (8 kB write+fdatasync), %s, load average %s before",
		m.Cores, m.CPU, m.PostgreSQL, m.FsyncPerSec, m.Go, m.LoadBefore)
	if m.LoadAfter != "" {
		s += ", " + m.LoadAfter + " after"
	}
	return s
}

func measureMachine(ctx context.Context, st *stack) (Machine, error) {
	m := Machine{Cores: runtime.NumCPU(), CPU: cpuModel(), Go: runtime.Version(), LoadBefore: loadAverage()}
	var version, fsync, syncCommit string
	if err := st.pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		    current_setting('synchronous_commit')`).Scan(&version, &fsync, &syncCommit); err != nil {
		return Machine{}, fmt.Errorf("ask PostgreSQL its version: %w", err)
	}
	m.PostgreSQL = fmt.Sprintf("%s (fsync %s, synchronous_commit %s)", version, fsync, syncCommit)
	dir := st.dir
	if st.cluster != nil {
		dir = st.cluster.Dir()
	}
	rate, err := fsyncRate(dir, 200)
	if err != nil {
		return Machine{}, fmt.Errorf("measure fsync rate: %w", err)
	}
	m.FsyncPerSec = rate
	return m, nil
}

// fsyncRate writes an 8 kB block and fdatasyncs it n times, as
// pg_test_fsync does, in a file beside dir, and returns the rate.
func fsyncRate(dir string, n int) (float64, error) {
	f, err := os.CreateTemp(filepath.Dir(dir), "fsync-test-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	const block = 8 << 10
	const blocks = 2048 // a 16 MB file, like a WAL segment
	buf := make([]byte, block)
	for i := range blocks {
		if _, err := f.WriteAt(buf, int64(i)*block); err != nil {
			return 0, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	start := time.Now()
	for i := range n {
		buf[0] = byte(i)
		if _, err := f.WriteAt(buf, int64(i%blocks)*block); err != nil {
			return 0, err
		}
		if err := fdatasync(f); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// cpuModel is the processor's name from /proc/cpuinfo, where there is one.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.Lines(string(b)) {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return runtime.GOARCH
}
