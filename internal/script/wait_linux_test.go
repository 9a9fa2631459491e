package script

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// threads is the number of the process's threads.
func threads(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no Threads in /proc/self/status")
	return 0
}

// On Linux a running script holds no thread: Run waits through a pidfd
// in the runtime's poller, not in waitid.
func TestRunHoldsNoThreadWhileWaiting(t *testing.T) {
	// Not parallel: it counts the process's threads.
	const n = 40
	before := threads(t)
	whileWaiting(t, n, func() {
		require.Less(t, threads(t)-before, n/4, "threads started for waiting scripts")
	})
}
