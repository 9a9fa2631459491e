package script

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testPath is the PATH the test scripts run with.
const testPath = "PATH=/usr/local/bin:/usr/bin:/bin"

// truncationPrefix starts the line the collector emits at the cap.
const truncationPrefix = "[maxq] output truncated"

// writeScript writes body as an executable bash script in a fresh temporary
// directory and returns its path.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	return writeExecutable(t, "#!/bin/bash\n"+body+"\n")
}

// writeExecutable writes content as step.sh, mode 0755, in a fresh
// temporary directory.
//
// It writes under syscall.ForkLock: a child forked by a parallel test while
// the file is open for writing would hold that descriptor until its exec,
// and running the script meanwhile fails with ETXTBSY (go.dev/issue/22315).
func writeExecutable(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "step.sh")
	syscall.ForkLock.RLock()
	err := os.WriteFile(path, []byte(content), 0o755)
	syscall.ForkLock.RUnlock()
	require.NoError(t, err)
	return path
}

// recorder collects the lines a script prints. Output is called from one
// goroutine per stream, so it locks.
type recorder struct {
	mu    sync.Mutex
	lines []Line
}

func (r *recorder) add(l Line) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, l)
}

func (r *recorder) all() []Line {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Line(nil), r.lines...)
}

// texts returns the text of the lines from one stream, in order.
func (r *recorder) texts(stream Stream) []string {
	var out []string
	for _, l := range r.all() {
		if l.Stream == stream {
			out = append(out, l.Text)
		}
	}
	return out
}

// run runs a script with the test PATH, recording its output.
func run(t *testing.T, ctx context.Context, s Spec) (Result, *recorder) {
	t.Helper()
	rec := &recorder{}
	if s.Env == nil {
		s.Env = []string{testPath}
	}
	s.Output = rec.add
	return Run(ctx, s), rec
}

// firstLinePID reads the process group id a script printed as the first
// word of its first stdout line ("echo $$").
func firstLinePID(t *testing.T, rec *recorder) int {
	t.Helper()
	out := rec.texts(Stdout)
	require.NotEmpty(t, out, "the script printed no pid")
	pid, err := strconv.Atoi(strings.Fields(out[0])[0])
	require.NoError(t, err)
	require.Greater(t, pid, 1)
	return pid
}

// requireGroupGone asserts that nothing in the process group survives:
// first that no live (non-zombie) member remains, then that the group is
// gone altogether. Orphans are reaped by PID 1, which in some containers
// takes a few seconds, hence the longer second wait.
func requireGroupGone(t *testing.T, pgid int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(liveGroupMembers(pgid)) == 0 },
		2*time.Second, 20*time.Millisecond, "process group %d still has live members", pgid)
	require.Eventually(t, func() bool {
		return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
	}, 10*time.Second, 50*time.Millisecond, "process group %d still exists", pgid)
}

// liveGroupMembers lists the pids in process group pgid that are not
// zombies, from /proc.
func liveGroupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestRunExitCode(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name string
		body string
		code int
	}{
		{"Zero", "exit 0", 0},
		{"Three", "echo failing >&2; exit 3", 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, _ := run(t, t.Context(), Spec{Path: writeScript(t, tt.body)})
			require.NoError(t, res.StartErr)
			require.Equal(t, tt.code, res.ExitCode)
			require.Equal(t, tt.code == 0, res.Succeeded())
			require.False(t, res.TimedOut)
			require.False(t, res.Stopped)
			require.Positive(t, res.Duration)
		})
	}

	t.Run("KilledBySignal", func(t *testing.T) {
		t.Parallel()
		res, _ := run(t, t.Context(), Spec{Path: writeScript(t, "kill -9 $$")})
		require.NoError(t, res.StartErr)
		require.Equal(t, -1, res.ExitCode)
		require.False(t, res.Succeeded())
		require.False(t, res.TimedOut)
		require.False(t, res.Stopped)
	})
}

func TestRunStdinIsEmpty(t *testing.T) {
	t.Parallel()

	// If stdin were inherited or left open, cat would block until the
	// timeout; /dev/null gives it EOF at once.
	res, rec := run(t, t.Context(), Spec{
		Path:    writeScript(t, `n=$(cat | wc -c); echo "read $n"`),
		Timeout: 10 * time.Second,
	})
	require.True(t, res.Succeeded(), "%+v", res)
	require.Less(t, res.Duration, 5*time.Second)
	require.Equal(t, []string{"read 0"}, rec.texts(Stdout))
}

func TestRunWorkingDirectory(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "marker"), []byte("here"), 0o644))
	// The script lives elsewhere: the directory comes from Spec.Dir alone.
	res, rec := run(t, t.Context(), Spec{
		Path: writeScript(t, "pwd -P; cat marker; echo"),
		Dir:  dir,
	})
	require.True(t, res.Succeeded(), "%+v", res)
	want, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	require.Equal(t, []string{want, "here"}, rec.texts(Stdout))
}

// shellVars are the variables bash exports by itself even from an empty
// environment.
var shellVars = map[string]bool{"PWD": true, "SHLVL": true, "_": true, "OLDPWD": true}

// observedEnv runs /usr/bin/env in a script with the given environment and
// returns what the script saw, without bash's own variables.
func observedEnv(t *testing.T, env []string) map[string]string {
	t.Helper()
	rec := &recorder{}
	res := Run(t.Context(), Spec{Path: writeScript(t, "/usr/bin/env"), Env: env, Output: rec.add})
	require.True(t, res.Succeeded(), "%+v", res)
	got := map[string]string{}
	for _, l := range rec.texts(Stdout) {
		k, v, ok := strings.Cut(l, "=")
		require.True(t, ok, "env line %q", l)
		if !shellVars[k] {
			got[k] = v
		}
	}
	return got
}

// names returns the sorted names of an environment, so that failures show
// which variables leaked without printing their values.
func names(env map[string]string) []string {
	return slices.Sorted(maps.Keys(env))
}

func TestRunEnvironment(t *testing.T) {
	t.Parallel()

	t.Run("ExactlyWhatWasGiven", func(t *testing.T) {
		t.Parallel()
		got := observedEnv(t, []string{testPath, "STAGE_VAR=a b=c", "EMPTY=", "MAXQ_RUN_ID=r1"})
		// Names first: nothing of the test process (HOME, GOPATH, …) leaks in,
		// and a failure does not print the values of what did.
		require.Equal(t, []string{"EMPTY", "MAXQ_RUN_ID", "PATH", "STAGE_VAR"}, names(got))
		require.Equal(t, map[string]string{
			"PATH":        strings.TrimPrefix(testPath, "PATH="),
			"STAGE_VAR":   "a b=c",
			"EMPTY":       "",
			"MAXQ_RUN_ID": "r1",
		}, got)
	})

	t.Run("EmptyListIsEmptyEnvironment", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, names(observedEnv(t, []string{})))
	})

	t.Run("NilIsEmptyEnvironment", func(t *testing.T) {
		t.Parallel()
		// exposes bug: Spec.Env == nil is handed to exec.Cmd.Env as nil,
		// which os/exec defines as "inherit the current process's
		// environment", so the script sees the worker's whole environment
		// (database URL, cloud credentials, …) — the opposite of the
		// package's "never inherited wholesale". Expected: an empty
		// environment, as for []string{}.
		require.Empty(t, names(observedEnv(t, nil)))
	})

	t.Run("FromEnviron", func(t *testing.T) {
		t.Parallel()
		env := Environ([]string{"PATH"},
			map[string]string{"STAGE_VAR": "s", "MAXQ_RUN_ID": "from-stage"},
			map[string]string{"MAXQ_RUN_ID": "r1"})
		got := observedEnv(t, env)
		require.Equal(t, "s", got["STAGE_VAR"])
		require.Equal(t, "r1", got["MAXQ_RUN_ID"])
		require.Equal(t, os.Getenv("PATH"), got["PATH"])
		require.Equal(t, []string{"MAXQ_RUN_ID", "PATH", "STAGE_VAR"}, names(got))
	})
}

func TestEnviron(t *testing.T) {
	t.Parallel()

	path, ok := os.LookupEnv("PATH")
	require.True(t, ok, "the test process needs PATH")
	const unset = "MAXQ_SCRIPT_TEST_SURELY_UNSET_7F3A"
	_, ok = os.LookupEnv(unset)
	require.False(t, ok)

	requireUniqueNames := func(t *testing.T, env []string) {
		t.Helper()
		seen := map[string]bool{}
		for _, kv := range env {
			k, _, ok := strings.Cut(kv, "=")
			require.True(t, ok, "entry %q", kv)
			require.False(t, seen[k], "%s appears twice in %q", k, env)
			seen[k] = true
		}
	}

	for _, tt := range []struct {
		name  string
		pass  []string
		extra map[string]string
		maxq  map[string]string
		want  []string
	}{
		{
			name: "NothingIsEmptyNotNil",
			want: []string{},
		},
		{
			name: "PassCopiesPresentVariablesOnly",
			pass: []string{"PATH", unset},
			want: []string{"PATH=" + path},
		},
		{
			name: "UnlistedVariablesAreNotPassed",
			pass: []string{unset},
			want: []string{},
		},
		{
			name:  "ExtraOverridesPass",
			pass:  []string{"PATH"},
			extra: map[string]string{"PATH": "/stage/bin", "A": "1"},
			want:  []string{"PATH=/stage/bin", "A=1"},
		},
		{
			name:  "MaxqOverridesExtra",
			extra: map[string]string{"MAXQ_RUN_ID": "from-stage", "TMPDIR": "/stage/tmp", "B": "2"},
			maxq:  map[string]string{"MAXQ_RUN_ID": "r1", "TMPDIR": "/work"},
			want:  []string{"MAXQ_RUN_ID=r1", "TMPDIR=/work", "B=2"},
		},
		{
			name:  "MaxqOverridesPass",
			pass:  []string{"PATH"},
			extra: map[string]string{"C": "3"},
			maxq:  map[string]string{"PATH": "/maxq/bin", "MAXQ_API": "http://api"},
			want:  []string{"PATH=/maxq/bin", "C=3", "MAXQ_API=http://api"},
		},
		{
			name:  "EmptyValuesKept",
			extra: map[string]string{"EMPTY": ""},
			want:  []string{"EMPTY="},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Environ(tt.pass, tt.extra, tt.maxq)
			// A nil result would make exec inherit the whole environment.
			require.NotNil(t, got)
			require.ElementsMatch(t, tt.want, got)
			requireUniqueNames(t, got)
		})
	}
}

func TestRunOutputLines(t *testing.T) {
	t.Parallel()

	res, rec := run(t, t.Context(), Spec{Path: writeScript(t, `
echo out1
echo err1 >&2
printf 'crlf\r\n'
echo
printf 'err crlf\r\n' >&2
echo out3
echo >&2
echo err3 >&2
printf 'no newline'
printf 'err no newline' >&2
`)})
	require.True(t, res.Succeeded(), "%+v", res)
	require.False(t, res.Truncated)
	require.Equal(t, []string{"out1", "crlf", "", "out3", "no newline"}, rec.texts(Stdout))
	require.Equal(t, []string{"err1", "err crlf", "", "err3", "err no newline"}, rec.texts(Stderr))
	require.Equal(t, "err1\nerr crlf\n\nerr3\nerr no newline\n", res.StderrTail)
	for _, l := range rec.all() {
		require.False(t, l.At.IsZero(), "line %q has no time", l.Text)
	}
}

// longLine is the concatenation of 1, 2, 3, … cut to n bytes, as printed
// by `seq 1 50000 | tr -d '\n' | head -c n`.
func longLine(n int) string {
	var b strings.Builder
	for i := 1; b.Len() < n; i++ {
		b.WriteString(strconv.Itoa(i))
	}
	return b.String()[:n]
}

// lens returns the lengths of lines, which make readable failures where
// the lines themselves are too long to print.
func lens(lines []string) []int {
	out := make([]int, len(lines))
	for i, l := range lines {
		out[i] = len(l)
	}
	return out
}

// requirePieces asserts that the lines are pieces of at most maxLine bytes,
// none empty, that concatenate to want.
func requirePieces(t *testing.T, want string, pieces []string) {
	t.Helper()
	for i, p := range pieces {
		require.LessOrEqual(t, len(p), maxLine, "piece %d", i)
		require.NotEmpty(t, p, "piece %d of %d is empty", i, len(pieces))
	}
	got := strings.Join(pieces, "")
	require.Equal(t, len(want), len(got), "total length of pieces %v", lens(pieces))
	require.True(t, got == want, "the pieces differ from the line")
}

func TestRunLongLine(t *testing.T) {
	t.Parallel()

	t.Run("200KBSplitIntoPieces", func(t *testing.T) {
		t.Parallel()
		const n = 200 << 10
		// The newline comes on its own, after the line has been read; a newline
		// read together with bytes across a 64 KiB boundary is the next test.
		res, rec := run(t, t.Context(), Spec{Path: writeScript(t,
			"seq 1 50000 | tr -d '\\n' | head -c "+strconv.Itoa(n)+"; sleep 0.2; echo; echo after")})
		require.True(t, res.Succeeded(), "%+v", res)
		out := rec.texts(Stdout)
		require.NotEmpty(t, out)
		require.Equal(t, "after", out[len(out)-1])
		requirePieces(t, longLine(n), out[:len(out)-1])
		require.Len(t, lens(out[:len(out)-1]), 4, "200 KiB is three 64 KiB pieces and the rest")
	})

	t.Run("NewlineReadWithDataAcrossPieceBoundary", func(t *testing.T) {
		t.Parallel()
		// exposes bug: lineWriter.Write, when a partial line is buffered and
		// the write holding its newline would take it past maxLine, appends
		// only p[:maxLine-len(buf)] and then skips to the newline, silently
		// dropping the rest. Input: one 70000-byte line, delivered as 40000
		// bytes, then 30000 bytes plus "\n" in one read. Expected pieces
		// concatenating to all 70000 bytes (65536 + 4464); actual: one
		// 65536-byte piece, the last 4464 bytes lost. Any long line whose
		// final read straddles a 64 KiB boundary loses data.
		dir := t.TempDir()
		part1, part2 := strings.Repeat("a", 40000), strings.Repeat("b", 30000)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "part1"), []byte(part1), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "part2"), []byte(part2+"\n"), 0o644))
		// cat writes each file with one write(2); the sleep lets the first
		// be read before the second arrives.
		res, rec := run(t, t.Context(), Spec{Path: writeScript(t, "cat part1; sleep 0.3; cat part2"), Dir: dir})
		require.True(t, res.Succeeded(), "%+v", res)
		requirePieces(t, part1+part2, rec.texts(Stdout))
	})

	t.Run("LineOfExactlyMaxLineBytes", func(t *testing.T) {
		t.Parallel()
		// exposes bug: when a line's bytes fill the buffer to exactly
		// maxLine without its newline (len(p) == room), lineWriter flushes
		// it as a piece; the newline that follows in the next read then
		// emits a spurious empty line. Input: 65536 bytes, a pause, "\n".
		// Expected: one line of 65536 bytes; actual: that line and "".
		dir := t.TempDir()
		line := strings.Repeat("m", maxLine)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "line"), []byte(line), 0o644))
		res, rec := run(t, t.Context(), Spec{Path: writeScript(t, "cat line; sleep 0.3; echo; echo after"), Dir: dir})
		require.True(t, res.Succeeded(), "%+v", res)
		out := rec.texts(Stdout)
		require.Equal(t, []int{maxLine, len("after")}, lens(out), "line lengths")
		require.True(t, out[0] == line)
	})
}

func TestLineWriter(t *testing.T) {
	t.Parallel()

	a := func(n int) string { return strings.Repeat("a", n) }
	b := func(n int) string { return strings.Repeat("b", n) }
	// Writes mirror os/exec, which copies a pipe in reads of at most 32 KiB.
	for _, tt := range []struct {
		name   string
		writes []string
		want   []string
	}{
		{"Lines", []string{"one\ntwo\n"}, []string{"one", "two"}},
		{"LineAcrossWrites", []string{"he", "llo\nwo", "rld\n"}, []string{"hello", "world"}},
		{"CRLF", []string{"x\r\n", "y\r", "\n"}, []string{"x", "y"}},
		{"EmptyLines", []string{"\n", "\n\n"}, []string{"", "", ""}},
		{"FinalLineWithoutNewline", []string{"a\nlast"}, []string{"a", "last"}},
		{"LongLineSplit", []string{a(32768), a(32768), a(32768), a(100) + "\n"}, []string{a(maxLine), a(32868)}},
		{"LongLineNewlineAlone", []string{a(32768), a(32768), a(1000), "\n"}, []string{a(maxLine), a(1000)}},
		// exposes bug: a line of exactly maxLine bytes whose newline comes in
		// a later write is followed by a spurious empty line.
		{"ExactlyMaxLineThenNewline", []string{a(32768), a(32768), "\nnext\n"}, []string{a(maxLine), "next"}},
		// exposes bug: bytes between maxLine and the newline are dropped when
		// one write both crosses the 64 KiB boundary and ends the line.
		{"NewlineWriteCrossesBoundary", []string{a(32768), a(7232), b(30000) + "\n"}, []string{a(40000) + b(25536), b(4464)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			w := &lineWriter{c: &collector{emit: rec.add}, stream: Stdout}
			for _, p := range tt.writes {
				n, err := w.Write([]byte(p))
				require.NoError(t, err)
				require.Equal(t, len(p), n)
			}
			w.flush()
			got := rec.texts(Stdout)
			require.Equal(t, lens(tt.want), lens(got), "line lengths")
			for i := range tt.want {
				require.True(t, tt.want[i] == got[i], "line %d differs", i)
			}
		})
	}
}

func TestRunMaxOutputBytes(t *testing.T) {
	t.Parallel()

	const limit = 100_000
	dir := t.TempDir()
	line := strings.Repeat("x", 99)
	res, rec := run(t, t.Context(), Spec{
		Path: writeScript(t, `
yes "`+line+`" | head -c 10000000
echo end-of-script >&2
touch done`),
		Dir:            dir,
		MaxOutputBytes: limit,
	})
	require.True(t, res.Succeeded(), "%+v", res)
	require.True(t, res.Truncated)
	// The script ran to the end: output past the cap was drained, not left
	// to block the pipe.
	require.FileExists(t, filepath.Join(dir, "done"))
	require.Contains(t, res.StderrTail, "end-of-script")

	lines := rec.all()
	require.NotEmpty(t, lines)
	var delivered, notices int
	for i, l := range lines {
		if strings.HasPrefix(l.Text, truncationPrefix) {
			notices++
			require.Equal(t, len(lines)-1, i, "the truncation line is the last")
			require.Equal(t, Stderr, l.Stream)
			require.Contains(t, l.Text, strconv.Itoa(limit))
			continue
		}
		require.Equal(t, Stdout, l.Stream)
		require.Equal(t, line, l.Text)
		delivered += len(l.Text) + 1
	}
	require.Equal(t, 1, notices)
	require.LessOrEqual(t, delivered, limit)
	require.Greater(t, delivered, limit-len(line)-1, "the cap is used, not undershot")
}

func TestRunMemoryBounded(t *testing.T) {
	t.Parallel()

	var seen atomic.Int64
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()

	// 200 MB in lines of 1000 bytes; the cap lets 1 MB through.
	res := Run(t.Context(), Spec{
		Path:           writeScript(t, `yes "$(printf 'y%.0s' {1..1000})" | head -c 200000000`),
		Env:            []string{testPath},
		MaxOutputBytes: 1 << 20,
		Output:         func(l Line) { seen.Add(int64(len(l.Text)) + 1) },
	})
	close(done)
	<-sampled

	require.True(t, res.Succeeded(), "%+v", res)
	require.True(t, res.Truncated)
	require.LessOrEqual(t, seen.Load(), int64(1<<20+200))
	require.Less(t, res.Duration, 10*time.Second)
	growth := int64(peak.Load()) - int64(before.HeapInuse)
	require.Less(t, growth, int64(20<<20), "heap in use grew by %d bytes", growth)
}

// groupScript starts two sleeps in the script's process group, prints its
// pid (the group id), and waits.
const groupScript = `sleep 60 & echo "$$ $!"; sleep 60; wait`

func TestRunTimeout(t *testing.T) {
	t.Parallel()

	t.Run("GroupTerminated", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		res, rec := run(t, t.Context(), Spec{
			Path:    writeScript(t, groupScript),
			Timeout: 300 * time.Millisecond,
			Grace:   time.Second,
		})
		// SIGTERM to the group ends everything: no wait for SIGKILL, nor for
		// WaitDelay on a pipe held by an orphaned sleep.
		require.Less(t, time.Since(start), 1300*time.Millisecond)
		require.True(t, res.TimedOut)
		require.False(t, res.Stopped)
		require.False(t, res.Succeeded())
		require.Equal(t, -1, res.ExitCode)
		require.NoError(t, res.StartErr)
		requireGroupGone(t, firstLinePID(t, rec))
	})

	t.Run("SIGTERMIgnoredThenKilled", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		res, rec := run(t, t.Context(), Spec{
			Path:    writeScript(t, "trap '' TERM; sleep 60 & echo \"$$ $!\"; sleep 60; wait"),
			Timeout: 300 * time.Millisecond,
			Grace:   time.Second,
		})
		// SIGKILL comes at Timeout + Grace (1.3s), not at WaitDelay (2.3s).
		elapsed := time.Since(start)
		require.GreaterOrEqual(t, elapsed, 1250*time.Millisecond, "SIGKILL comes only after the grace")
		require.Less(t, elapsed, 2100*time.Millisecond, "SIGKILL comes at the end of the grace")
		require.True(t, res.TimedOut)
		require.False(t, res.Stopped)
		require.Equal(t, -1, res.ExitCode)
		requireGroupGone(t, firstLinePID(t, rec))
	})
}

func TestRunCancel(t *testing.T) {
	t.Parallel()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	rec := &recorder{}
	var cancelledAt atomic.Pointer[time.Time]
	go func() {
		<-started
		time.Sleep(100 * time.Millisecond)
		now := time.Now()
		cancelledAt.Store(&now)
		cancel()
	}()
	res := Run(ctx, Spec{
		Path:  writeScript(t, groupScript),
		Env:   []string{testPath},
		Grace: time.Second,
		Output: func(l Line) {
			rec.add(l)
			once.Do(func() { close(started) })
		},
	})
	require.NoError(t, res.StartErr)
	require.NotNil(t, cancelledAt.Load())
	// SIGTERM to the group ends everything well before the grace is up.
	require.Less(t, time.Since(*cancelledAt.Load()), time.Second)
	require.True(t, res.Stopped)
	require.False(t, res.TimedOut)
	require.False(t, res.Succeeded())
	require.Equal(t, -1, res.ExitCode)
	requireGroupGone(t, firstLinePID(t, rec))
}

func TestRunGrandchild(t *testing.T) {
	t.Parallel()

	t.Run("HoldingThePipe", func(t *testing.T) {
		t.Parallel()
		// The background sleep inherits stdout and stderr and outlives the
		// script; WaitDelay (Grace + 1s) bounds the wait for the pipes.
		start := time.Now()
		res, rec := run(t, t.Context(), Spec{
			Path:  writeScript(t, `echo $$; (sleep 30 &); exit 0`),
			Grace: 500 * time.Millisecond,
		})
		require.Less(t, time.Since(start), 5*time.Second)
		require.True(t, res.Succeeded(), "%+v", res)
		require.Equal(t, 0, res.ExitCode)
		requireGroupGone(t, firstLinePID(t, rec))
	})

	t.Run("NotHoldingThePipe", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		res, rec := run(t, t.Context(), Spec{
			Path:  writeScript(t, `echo $$; sleep 30 >/dev/null 2>&1 & exit 0`),
			Grace: 5 * time.Second,
		})
		require.Less(t, time.Since(start), 3*time.Second, "no pipe is held, so no WaitDelay")
		require.True(t, res.Succeeded(), "%+v", res)
		requireGroupGone(t, firstLinePID(t, rec))
	})

	t.Run("CancelAfterScriptExited", func(t *testing.T) {
		t.Parallel()
		// exposes bug: Run sets Stopped (or TimedOut) whenever runCtx is
		// done by the time Wait returns, even when the script had already
		// exited on its own and was never signalled. Input: a script that
		// exits 0 at once leaving a grandchild on its stdout, Grace 1s (so
		// Wait lingers for WaitDelay = 2s), ctx cancelled 300ms in.
		// Expected: ExitCode 0, Stopped false, Succeeded true — the fields
		// say "the script was stopped", and it was not (cmd.Cancel never
		// ran). Actual: Stopped true, Succeeded false, so a worker records
		// a step that completed as cancelled. Same with Timeout firing in
		// that window (TimedOut true with ExitCode 0).
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		time.AfterFunc(300*time.Millisecond, cancel)
		res, rec := run(t, ctx, Spec{
			Path:  writeScript(t, `echo $$; (sleep 30 &); exit 0`),
			Grace: time.Second,
		})
		require.Equal(t, 0, res.ExitCode)
		requireGroupGone(t, firstLinePID(t, rec))
		require.False(t, res.Stopped, "the script exited before the cancel")
		require.True(t, res.Succeeded(), "%+v", res)
	})
}

func TestRunStderrTail(t *testing.T) {
	t.Parallel()

	// 10000 lines of 10 bytes: 100 KB of stderr.
	res, rec := run(t, t.Context(), Spec{Path: writeScript(t,
		`for i in $(seq -w 1 10000); do echo "err $i" >&2; done`)})
	require.True(t, res.Succeeded(), "%+v", res)

	all := strings.Join(rec.texts(Stderr), "\n") + "\n"
	require.Len(t, all, 100_000)
	tail := res.StderrTail
	require.LessOrEqual(t, len(tail), tailBytes)
	require.Greater(t, len(tail), tailBytes/2)
	require.True(t, strings.HasSuffix(all, tail), "the tail is the end of stderr")
	require.True(t, strings.HasSuffix(tail, "err 09999\nerr 10000\n"))
}

func TestRunStartError(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name string
		path func(t *testing.T) string
		dir  func(t *testing.T) string
	}{
		{
			name: "MissingScript",
			path: func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope.sh") },
		},
		{
			name: "NotExecutable",
			path: func(t *testing.T) string {
				p := writeScript(t, "exit 0")
				require.NoError(t, os.Chmod(p, 0o644))
				return p
			},
		},
		{
			name: "NoShebang",
			path: func(t *testing.T) string { return writeExecutable(t, "exit 0\n") },
		},
		{
			name: "MissingDir",
			path: func(t *testing.T) string { return writeScript(t, "exit 0") },
			dir:  func(t *testing.T) string { return filepath.Join(t.TempDir(), "gone") },
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := Spec{Path: tt.path(t)}
			if tt.dir != nil {
				s.Dir = tt.dir(t)
			}
			res, rec := run(t, t.Context(), s)
			require.Error(t, res.StartErr)
			require.Equal(t, -1, res.ExitCode)
			require.False(t, res.Succeeded())
			require.False(t, res.TimedOut)
			require.False(t, res.Stopped)
			require.Empty(t, rec.all())
		})
	}
}

func TestRunConcurrent(t *testing.T) {
	t.Parallel()

	path := writeScript(t, `echo "hello $N"; echo "bye $N" >&2`)
	const n = 50
	results := make([]Result, n)
	recs := make([]*recorder, n)
	var wg sync.WaitGroup
	for i := range n {
		recs[i] = &recorder{}
		wg.Go(func() {
			results[i] = Run(t.Context(), Spec{
				Path:           path,
				Env:            []string{testPath, "N=" + strconv.Itoa(i)},
				Timeout:        30 * time.Second,
				MaxOutputBytes: 1 << 10,
				Output:         recs[i].add,
			})
		})
	}
	wg.Wait()
	for i, res := range results {
		require.True(t, res.Succeeded(), "run %d: %+v", i, res)
		require.Equal(t, []string{"hello " + strconv.Itoa(i)}, recs[i].texts(Stdout), "run %d", i)
		require.Equal(t, []string{"bye " + strconv.Itoa(i)}, recs[i].texts(Stderr), "run %d", i)
		require.Equal(t, "bye "+strconv.Itoa(i)+"\n", res.StderrTail)
	}
}
