// Package script runs one flow.sh or step.sh: the script itself, so its
// shebang picks the interpreter, in its own process group, with an
// environment built from an allow-list (never inherited wholesale), stdin
// closed, and stdout/stderr read line by line in bounded chunks. Timeout and
// cancellation signal the whole group — SIGTERM, then SIGKILL after a grace
// — and the group is killed once the script has exited, so nothing it
// started outlives it.
package script

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Stream names where a line came from.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Line is one line of output, without its newline.
type Line struct {
	Stream Stream
	Text   string
	At     time.Time
}

// Spec is a script to run.
type Spec struct {
	Path string
	Dir  string
	Env  []string
	// Timeout bounds the run; zero means none.
	Timeout time.Duration
	// Grace is how long the group has between SIGTERM and SIGKILL.
	Grace time.Duration
	// MaxOutputBytes caps what reaches Output; past it, one line says so
	// and the rest is read and dropped. Zero means no cap.
	MaxOutputBytes int64
	// Output receives each line, from the reading goroutines; it must not
	// block for long. Nil discards output.
	Output func(Line)
}

// Result is how a script ended.
type Result struct {
	ExitCode int  // -1 when killed by a signal or never started
	TimedOut bool // Timeout passed and the script was stopped
	Stopped  bool // the context was cancelled and the script was stopped
	// StartErr is why the script could not be started.
	StartErr   error
	StderrTail string // the last few lines of stderr, for error messages
	Truncated  bool   // output went past MaxOutputBytes
	Duration   time.Duration
}

// Succeeded reports whether the script ran and exited 0.
func (r Result) Succeeded() bool {
	return r.StartErr == nil && r.ExitCode == 0 && !r.TimedOut && !r.Stopped
}

// maxLine is the longest line passed on whole; longer ones are split.
const maxLine = 64 << 10

// tailBytes is how much of stderr a Result keeps.
const tailBytes = 2 << 10

// Run runs the script and waits for it and its output. Cancelling ctx stops
// the script's process group (Result.Stopped).
func Run(ctx context.Context, s Spec) Result {
	start := time.Now()
	if s.Grace <= 0 {
		s.Grace = 5 * time.Second
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut atomic.Bool
	if s.Timeout > 0 {
		t := time.AfterFunc(s.Timeout, func() { timedOut.Store(true); cancel() })
		defer t.Stop()
	}

	cmd := exec.CommandContext(runCtx, s.Path)
	cmd.Dir = s.Dir
	cmd.Env = s.Env
	if cmd.Env == nil {
		cmd.Env = []string{} // nil would mean the worker's own environment
	}
	cmd.Stdin = nil // /dev/null
	setProcessGroup(cmd)
	var killTimer atomic.Pointer[time.Timer]
	var signalled atomic.Bool
	cmd.Cancel = func() error {
		signalled.Store(true)
		signalGroup(cmd, sigTerm)
		killTimer.Store(time.AfterFunc(s.Grace, func() { signalGroup(cmd, sigKill) }))
		return nil
	}
	// A grandchild that keeps the pipes open must not hang Wait.
	cmd.WaitDelay = s.Grace + time.Second

	out := &collector{emit: s.Output, max: s.MaxOutputBytes}
	stdout, stderr := &lineWriter{c: out, stream: Stdout}, &lineWriter{c: out, stream: Stderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return Result{ExitCode: -1, Stopped: true, Duration: time.Since(start)}
		}
		return Result{ExitCode: -1, StartErr: err, Duration: time.Since(start)}
	}
	waitErr := cmd.Wait()
	stdout.flush()
	stderr.flush()
	// Whatever the script started dies with it.
	signalGroup(cmd, sigKill)
	if t := killTimer.Load(); t != nil {
		t.Stop()
	}

	res := Result{ExitCode: cmd.ProcessState.ExitCode(), Duration: time.Since(start),
		StderrTail: out.tail(), Truncated: out.truncated}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		res.StartErr = waitErr
	}
	// Only a script that was signalled was stopped; one that exited on its
	// own while its pipes were still held open was not.
	if signalled.Load() {
		res.TimedOut = timedOut.Load()
		res.Stopped = !res.TimedOut
	}
	return res
}

// collector reads a script's output streams into lines, within the cap.
type collector struct {
	emit      func(Line)
	max       int64
	mu        sync.Mutex
	written   int64
	truncated bool
	stderr    []byte // ring of the last tailBytes of stderr
}

// lineWriter splits one stream into lines for the collector, holding at
// most one partial line of maxLine bytes.
type lineWriter struct {
	c      *collector
	stream Stream
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			// No line end yet: buffer, passing on full pieces.
			for len(p) > 0 {
				room := maxLine - len(w.buf)
				if len(p) <= room {
					w.buf = append(w.buf, p...)
					break
				}
				w.buf = append(w.buf, p[:room]...)
				p = p[room:]
				w.flush()
			}
			break
		}
		line := p[:i]
		p = p[i+1:]
		// A line longer than maxLine is passed on in pieces.
		for len(w.buf)+len(line) > maxLine {
			room := maxLine - len(w.buf)
			w.buf = append(w.buf, line[:room]...)
			line = line[room:]
			w.flush()
		}
		if len(w.buf) == 0 {
			w.c.take(w.stream, line)
			continue
		}
		w.buf = append(w.buf, line...)
		w.flush()
	}
	return n, nil
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.c.take(w.stream, w.buf)
		w.buf = w.buf[:0]
	}
}

func (c *collector) take(stream Stream, text []byte) {
	if n := len(text); n > 0 && text[n-1] == '\r' {
		text = text[:n-1]
	}
	c.mu.Lock()
	if stream == Stderr {
		c.stderr = append(append(c.stderr, text...), '\n')
		if len(c.stderr) > 2*tailBytes {
			c.stderr = append(c.stderr[:0], c.stderr[len(c.stderr)-tailBytes:]...)
		}
	}
	if c.truncated {
		c.mu.Unlock()
		return
	}
	c.written += int64(len(text)) + 1
	over := c.max > 0 && c.written > c.max
	if over {
		c.truncated = true
	}
	// Emitting under the lock keeps the truncation line last.
	defer c.mu.Unlock()
	if c.emit == nil {
		return
	}
	if over {
		c.emit(Line{Stream: Stderr, Text: "[maxq] output truncated: more than " + strconv.FormatInt(c.max, 10) + " bytes; the rest is discarded", At: time.Now()})
		return
	}
	c.emit(Line{Stream: stream, Text: string(text), At: time.Now()})
}

func (c *collector) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.stderr
	if len(t) > tailBytes {
		t = t[len(t)-tailBytes:]
		if i := bytes.IndexByte(t, '\n'); i >= 0 && i < len(t)-1 {
			t = t[i+1:] // start at a line
		}
	}
	return string(t)
}

// Environ builds a script's environment: the variables of pass found in
// the worker's own environment, then extra (the stage's env), then the
// MAXQ_* variables (and, from the worker, any it must set such as PATH),
// which nothing before them can override. Later entries win.
func Environ(pass []string, extra map[string]string, maxq ...map[string]string) []string {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, k := range pass {
		if v, ok := os.LookupEnv(k); ok {
			set(k, v)
		}
	}
	for k, v := range extra {
		set(k, v)
	}
	for _, m := range maxq {
		for k, v := range m {
			set(k, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+env[k])
	}
	return out
}
