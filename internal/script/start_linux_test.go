package script

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// On Linux a running script has no goroutine of its own: hundreds of them
// cost the process a handful of goroutines, all of them the reactor's, and
// no read buffer while they print nothing.
func TestStartHoldsNoGoroutines(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	const n = 200
	path := writeScript(t, `echo "up $N"; exec sleep 4`)
	before := runtime.NumGoroutine()
	var up atomic.Int32
	var wg sync.WaitGroup
	results := make([]Result, n)
	recs := make([]*recorder, n)
	for i := range n {
		recs[i] = &recorder{}
		wg.Add(1)
		Start(t.Context(), Spec{Path: path, Env: []string{testPath, "N=" + strconv.Itoa(i)}, Timeout: time.Minute,
			Output: func(l Line) { recs[i].add(l); up.Add(1) }},
			func(res Result) { results[i] = res; wg.Done() })
	}
	require.Eventually(t, func() bool { return int(up.Load()) == n }, 30*time.Second, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // each has read its line and waits again
	require.LessOrEqual(t, runtime.NumGoroutine()-before, 3, "goroutines while %d scripts run", n)
	require.Zero(t, buffersLent.Load(), "read buffers held by waiting scripts")
	wg.Wait()
	for i, res := range results {
		require.True(t, res.Succeeded(), "script %d: %+v", i, res)
		require.Equal(t, []string{"up " + strconv.Itoa(i)}, recs[i].texts(Stdout), "script %d", i)
	}
}

// A script that prints without pause wakes the reactor for every pipe-full
// of output; each wake starts a reader, which must cost no heap, or a
// worker's memory grows with the output until the next collection.
func TestStartReadsOutputWithoutAllocating(t *testing.T) {
	// Not parallel: it counts the process's allocations.
	path := writeScript(t, `yes "$(printf '%099d' 0)" | head -c 20000000`)
	var lines atomic.Int64
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ended := make(chan Result, 1)
	Start(t.Context(), Spec{Path: path, Env: []string{testPath},
		OutputBytes: func(Stream, []byte, time.Time) { lines.Add(1) }}, func(res Result) { ended <- res })
	res := waitFor(t, ended, time.Minute)
	runtime.ReadMemStats(&after)
	require.True(t, res.Succeeded(), "%+v", res)
	require.Equal(t, int64(200000), lines.Load())
	// About 600 reads of 32 kB; starting the script and its Result take a
	// few dozen allocations.
	require.Less(t, after.Mallocs-before.Mallocs, uint64(200), "allocations for 20 MB of output")
}
