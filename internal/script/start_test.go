package script

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitFor returns the Result that done is given, failing the test if that
// takes more than within.
func waitFor(t *testing.T, ended <-chan Result, within time.Duration) Result {
	t.Helper()
	select {
	case res := <-ended:
		return res
	case <-time.After(within):
		t.Fatalf("no Result within %s", within)
		return Result{}
	}
}

// startRecorded starts a script with the test PATH through start (with the
// reactor or without), recording its output, and returns where its Result
// comes.
func startRecorded(ctx context.Context, s Spec, pollExit bool) (<-chan Result, *recorder) {
	rec := &recorder{}
	if s.Env == nil {
		s.Env = []string{testPath}
	}
	s.Output = rec.add
	ended := make(chan Result, 1)
	start(ctx, s, pollExit, func(res Result) { ended <- res })
	return ended, rec
}

// waitModes are the two ways a script is waited for: by the reactor, and
// as where the kernel has no pidfds.
var waitModes = []struct {
	name     string
	pollExit bool
}{{"Reactor", true}, {"BlockingWait", false}}

// Start behaves as Run, with the reactor and without it.
func TestStart(t *testing.T) {
	t.Parallel()

	for _, tt := range waitModes {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			t.Run("OutputAndExitCode", func(t *testing.T) {
				t.Parallel()
				ended, rec := startRecorded(t.Context(), Spec{
					Path: writeScript(t, `for i in $(seq 1 2000); do echo "line $i"; done; echo oops >&2; exit 4`)}, tt.pollExit)
				res := waitFor(t, ended, 10*time.Second)
				require.Equal(t, 4, res.ExitCode)
				require.NoError(t, res.StartErr)
				require.False(t, res.Stopped)
				// Every line was passed on before done was called.
				out := rec.texts(Stdout)
				require.Len(t, out, 2000)
				require.Equal(t, "line 2000", out[1999])
				require.Equal(t, "oops\n", res.StderrTail)
			})

			t.Run("Timeout", func(t *testing.T) {
				t.Parallel()
				began := time.Now()
				ended, rec := startRecorded(t.Context(), Spec{Path: writeScript(t, groupScript),
					Timeout: 300 * time.Millisecond, Grace: time.Second}, tt.pollExit)
				res := waitFor(t, ended, 10*time.Second)
				require.Less(t, time.Since(began), 1300*time.Millisecond, "SIGTERM to the group ends everything")
				require.True(t, res.TimedOut)
				require.False(t, res.Stopped)
				require.Equal(t, -1, res.ExitCode)
				requireGroupGone(t, firstLinePID(t, rec))
			})

			t.Run("SIGTERMIgnoredThenKilled", func(t *testing.T) {
				t.Parallel()
				began := time.Now()
				ended, rec := startRecorded(t.Context(), Spec{
					Path:    writeScript(t, "trap '' TERM; sleep 60 & echo \"$$ $!\"; sleep 60; wait"),
					Timeout: 300 * time.Millisecond, Grace: time.Second}, tt.pollExit)
				res := waitFor(t, ended, 10*time.Second)
				require.GreaterOrEqual(t, time.Since(began), 1250*time.Millisecond, "SIGKILL comes only after the grace")
				require.True(t, res.TimedOut)
				require.Equal(t, -1, res.ExitCode)
				requireGroupGone(t, firstLinePID(t, rec))
			})

			t.Run("Cancel", func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				ended, rec := startRecorded(ctx, Spec{Path: writeScript(t, groupScript), Grace: time.Second}, tt.pollExit)
				require.Eventually(t, func() bool { return len(rec.texts(Stdout)) > 0 }, 10*time.Second, 10*time.Millisecond)
				cancelled := time.Now()
				cancel()
				res := waitFor(t, ended, 10*time.Second)
				require.Less(t, time.Since(cancelled), time.Second)
				require.True(t, res.Stopped)
				require.False(t, res.TimedOut)
				require.Equal(t, -1, res.ExitCode)
				requireGroupGone(t, firstLinePID(t, rec))
			})

			t.Run("GrandchildHoldingThePipe", func(t *testing.T) {
				t.Parallel()
				began := time.Now()
				ended, rec := startRecorded(t.Context(), Spec{Path: writeScript(t, `echo $$; (sleep 30 &); exit 0`),
					Grace: 500 * time.Millisecond}, tt.pollExit)
				res := waitFor(t, ended, 10*time.Second)
				require.Less(t, time.Since(began), 5*time.Second)
				require.True(t, res.Succeeded(), "%+v", res)
				requireGroupGone(t, firstLinePID(t, rec))
			})

			t.Run("StartError", func(t *testing.T) {
				t.Parallel()
				var res Result
				calls := 0
				start(t.Context(), Spec{Path: t.TempDir() + "/nope.sh"}, tt.pollExit, func(r Result) { res = r; calls++ })
				require.Equal(t, 1, calls, "done is called before Start returns")
				require.Error(t, res.StartErr)
				require.Equal(t, -1, res.ExitCode)
			})

			t.Run("AlreadyCancelled", func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				ended, rec := startRecorded(ctx, Spec{Path: writeScript(t, "echo ran")}, tt.pollExit)
				res := waitFor(t, ended, time.Second)
				require.True(t, res.Stopped)
				require.Empty(t, rec.all(), "the script did not run")
			})
		})
	}
}

// A grandchild that keeps printing after the script exited is read for
// pipesOpenAfterExit, not for ever.
func TestStartGrandchildPrintingAfterExit(t *testing.T) {
	t.Parallel()
	began := time.Now()
	var lines atomic.Int64
	var pid atomic.Int64
	ended := make(chan Result, 1)
	Start(t.Context(), Spec{Path: writeScript(t, `echo $$; (yes &); exit 0`), Env: []string{testPath},
		Grace: 500 * time.Millisecond, MaxOutputBytes: 1 << 20,
		Output: func(l Line) {
			if lines.Add(1) == 1 {
				n, _ := strconv.Atoi(l.Text)
				pid.Store(int64(n))
			}
		}}, func(res Result) { ended <- res })
	res := waitFor(t, ended, 10*time.Second)
	require.Less(t, time.Since(began), 5*time.Second)
	require.True(t, res.Succeeded(), "%+v", res)
	require.Greater(t, lines.Load(), int64(1), "yes printed")
	require.Greater(t, pid.Load(), int64(1))
	requireGroupGone(t, int(pid.Load()))
}

// A script whose lines are not taken holds up no other script, and its
// own done waits for its lines.
func TestStartBlockedOutputHoldsUpNoOther(t *testing.T) {
	t.Parallel()

	for _, tt := range waitModes {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			blocked := make(chan struct{})
			var passed atomic.Int32
			slowEnded := make(chan Result, 1)
			var slowDoneSawLines int32
			start(t.Context(), Spec{Path: writeScript(t, `echo one; echo two; exit 3`), Env: []string{testPath},
				Output: func(Line) {
					if passed.Load() == 0 {
						close(blocked)
						<-release
					}
					passed.Add(1)
				}}, tt.pollExit, func(res Result) {
				slowDoneSawLines = passed.Load()
				slowEnded <- res
			})
			<-blocked

			// Another script starts, prints, exits and is done meanwhile.
			ended, rec := startRecorded(t.Context(), Spec{Path: writeScript(t, `echo fast; exit 0`)}, tt.pollExit)
			res := waitFor(t, ended, 10*time.Second)
			require.True(t, res.Succeeded(), "%+v", res)
			require.Equal(t, []string{"fast"}, rec.texts(Stdout))

			// The slow one has exited, but its lines are not all passed on.
			time.Sleep(100 * time.Millisecond)
			select {
			case res := <-slowEnded:
				t.Fatalf("done called while a line was still being passed on: %+v", res)
			default:
			}
			close(release)
			res = waitFor(t, slowEnded, 10*time.Second)
			require.Equal(t, 3, res.ExitCode)
			require.Equal(t, int32(2), slowDoneSawLines, "both lines were passed on before done")
		})
	}
}

// Many scripts end in any order, each with its own Result.
func TestStartConcurrent(t *testing.T) {
	t.Parallel()
	path := writeScript(t, `echo "hello $N"; sleep 0.$((N % 3)); exit $((N % 5))`)
	const n = 60
	var wg sync.WaitGroup
	results := make([]Result, n)
	recs := make([]*recorder, n)
	for i := range n {
		recs[i] = &recorder{}
		wg.Add(1)
		Start(t.Context(), Spec{Path: path, Env: []string{testPath, "N=" + strconv.Itoa(i)}, Output: recs[i].add},
			func(res Result) { results[i] = res; wg.Done() })
	}
	wg.Wait()
	for i, res := range results {
		require.NoError(t, res.StartErr, "script %d", i)
		require.Equal(t, i%5, res.ExitCode, "script %d", i)
		require.Equal(t, []string{"hello " + strconv.Itoa(i)}, recs[i].texts(Stdout), "script %d", i)
	}
}
