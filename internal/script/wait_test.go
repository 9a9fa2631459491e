package script

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Run waits the same way without pidfds (as on systems other than Linux):
// each case runs through that path.
func TestRunBlockingWait(t *testing.T) {
	t.Parallel()

	blocking := func(t *testing.T, ctx context.Context, s Spec) (Result, *recorder) {
		t.Helper()
		rec := &recorder{}
		s.Env, s.Output = []string{testPath}, rec.add
		return execute(ctx, s, false), rec
	}

	t.Run("OutputAndExitCode", func(t *testing.T) {
		t.Parallel()
		res, rec := blocking(t, t.Context(), Spec{Path: writeScript(t, `echo out; printf 'no newline' >&2; exit 3`)})
		require.Equal(t, 3, res.ExitCode)
		require.NoError(t, res.StartErr)
		require.Equal(t, []string{"out"}, rec.texts(Stdout))
		require.Equal(t, []string{"no newline"}, rec.texts(Stderr))
		require.Equal(t, "no newline\n", res.StderrTail)
	})

	t.Run("GrandchildHoldingThePipe", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		res, rec := blocking(t, t.Context(), Spec{Path: writeScript(t, `echo $$; (sleep 30 &); exit 0`), Grace: 500 * time.Millisecond})
		require.Less(t, time.Since(start), 5*time.Second)
		require.True(t, res.Succeeded(), "%+v", res)
		requireGroupGone(t, firstLinePID(t, rec))
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		res, rec := blocking(t, t.Context(), Spec{Path: writeScript(t, groupScript), Timeout: 300 * time.Millisecond, Grace: time.Second})
		require.Less(t, time.Since(start), 1300*time.Millisecond, "SIGTERM to the group ends everything")
		require.True(t, res.TimedOut)
		require.False(t, res.Stopped)
		require.Equal(t, -1, res.ExitCode)
		requireGroupGone(t, firstLinePID(t, rec))
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(300*time.Millisecond, cancel)
		res, rec := blocking(t, ctx, Spec{Path: writeScript(t, groupScript), Grace: time.Second})
		require.True(t, res.Stopped)
		require.False(t, res.TimedOut)
		requireGroupGone(t, firstLinePID(t, rec))
	})
}

// OutputBytes gets the lines Output would, the truncation line last, and
// Output is not called.
func TestRunOutputBytes(t *testing.T) {
	t.Parallel()

	var mu sync.Mutex
	var got []Line
	res := Run(t.Context(), Spec{
		// The streams are read apart: stderr's line is read before stdout
		// reaches the cap.
		Path:           writeScript(t, `echo two >&2; sleep 0.2; echo one; printf 'é\r\n'; yes 0123456789 | head -c 1000`),
		Env:            []string{testPath},
		MaxOutputBytes: 100,
		Output:         func(Line) { t.Error("Output called although OutputBytes is set") },
		OutputBytes: func(stream Stream, text []byte, at time.Time) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, Line{Stream: stream, Text: string(text), At: at})
		},
	})
	require.True(t, res.Succeeded(), "%+v", res)
	require.True(t, res.Truncated)
	require.NotEmpty(t, got)
	last := got[len(got)-1]
	require.Equal(t, Stderr, last.Stream)
	require.True(t, strings.HasPrefix(last.Text, truncationPrefix), last.Text)
	texts := map[Stream][]string{}
	for _, l := range got[:len(got)-1] {
		require.False(t, l.At.IsZero())
		texts[l.Stream] = append(texts[l.Stream], l.Text)
	}
	// Within the 100 bytes: one, two, é (11 bytes with their newlines) and
	// 8 lines of 11 bytes.
	want := []string{"one", "é"}
	for range 8 {
		want = append(want, "0123456789")
	}
	require.Equal(t, want, texts[Stdout])
	require.Equal(t, []string{"two"}, texts[Stderr])
}

// While scripts run and print nothing, Run holds nothing but its caller's
// goroutine: no goroutine of its own, and no read buffer.
func TestRunHoldsLittleWhileWaiting(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	const n = 20
	before := runtime.NumGoroutine()
	whileWaiting(t, n, func() {
		require.LessOrEqual(t, runtime.NumGoroutine()-before, n, "goroutines beyond the callers of Run")
		require.Zero(t, buffersLent.Load(), "read buffers held by waiting scripts")
	})
}

// whileWaiting starts n scripts that print a line and sleep, calls check
// once all of them wait, then stops them.
func whileWaiting(t *testing.T, n int, check func()) {
	t.Helper()
	path := writeScript(t, `echo up; exec sleep 30`)
	ctx, cancel := context.WithCancel(t.Context())
	var up atomic.Int32
	var wg sync.WaitGroup
	results := make([]Result, n)
	for i := range n {
		wg.Go(func() {
			results[i] = Run(ctx, Spec{Path: path, Env: []string{testPath, "N=" + strconv.Itoa(i)}, Grace: time.Second,
				Output: func(Line) { up.Add(1) }})
		})
	}
	require.Eventually(t, func() bool { return int(up.Load()) == n }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // each has read its line and waits again
	check()
	cancel()
	wg.Wait()
	for i, res := range results {
		require.True(t, res.Stopped, "script %d: %+v", i, res)
	}
}

// Environ keeps one entry per name, the last value, however many there are.
func TestEnvironManyVariables(t *testing.T) {
	t.Parallel()
	extra := map[string]string{}
	for i := range 3 * environScanned {
		extra["V"+strconv.Itoa(i)] = "stage"
	}
	maxq := map[string]string{"V0": "maxq", "V" + strconv.Itoa(2*environScanned): "maxq", "MAXQ_RUN_ID": "r"}
	got := Environ(nil, extra, maxq)
	require.Len(t, got, 3*environScanned+1)
	seen := map[string]string{}
	for _, kv := range got {
		k, v, _ := strings.Cut(kv, "=")
		require.NotContains(t, seen, k)
		seen[k] = v
	}
	require.Equal(t, "maxq", seen["V0"])
	require.Equal(t, "maxq", seen["V"+strconv.Itoa(2*environScanned)])
	require.Equal(t, "stage", seen["V1"])
	require.Equal(t, "r", seen["MAXQ_RUN_ID"])
}
