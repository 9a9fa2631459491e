// Package script runs one flow.sh or step.sh: the script itself, so its
// shebang picks the interpreter, in its own process group, with an
// environment built from an allow-list (never inherited wholesale), stdin
// closed, and stdout/stderr read line by line in bounded chunks. Timeout and
// cancellation signal the whole group — SIGTERM, then SIGKILL after a grace
// — and the group is killed once the script has exited, so nothing it
// started outlives it.
//
// A running script costs little: Run's own goroutine is the only one, and
// os/exec copies nothing, for the script writes to pipes Run reads itself.
// On Linux the pipes and a pidfd of the script sit in an epoll set of the
// script's own, which parks that goroutine in the runtime's poller until a
// pipe has data or the script has exited, so no thread waits for it either;
// a read buffer is taken from a pool only while a pipe has data. Elsewhere,
// (*os.Process).Wait holds a thread and each pipe a goroutine while the
// script runs.
package script

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	// Output receives each line as it is read, one call at a time; it must
	// not block for long (while it does, the script's output waits in its
	// pipe). Nil discards output.
	Output func(Line)
	// OutputBytes, if set, receives the lines instead of Output, in the
	// same way, but as bytes that are valid only during the call, so that
	// no string is made of each line: a consumer that copies them anyway
	// saves an allocation per line.
	OutputBytes func(stream Stream, text []byte, at time.Time)
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
func Run(ctx context.Context, s Spec) Result { return execute(ctx, s, true) }

// execute is Run. With pollExit false it waits as on systems without
// pidfds, so tests cover that path too.
func execute(ctx context.Context, s Spec, pollExit bool) Result {
	p, res := launch(ctx, s)
	if p == nil {
		return res
	}
	return p.finish(pollExit)
}

// launch starts the script, or returns why it did not start.
func launch(ctx context.Context, s Spec) (*proc, Result) {
	start := time.Now()
	if s.Grace <= 0 {
		s.Grace = 5 * time.Second
	}
	if ctx.Err() != nil {
		return nil, Result{ExitCode: -1, Stopped: true, Duration: time.Since(start)}
	}
	out := &collector{emit: s.Output, emitBytes: s.OutputBytes, max: s.MaxOutputBytes}
	p := &proc{began: start, grace: s.Grace, col: out, out: [2]*lineWriter{{c: out, stream: Stdout}, {c: out, stream: Stderr}}}
	if err := p.start(s); err != nil {
		if ctx.Err() != nil {
			return nil, Result{ExitCode: -1, Stopped: true, Duration: time.Since(start)}
		}
		return nil, Result{ExitCode: -1, StartErr: err, Duration: time.Since(start)}
	}
	// Timeout and cancellation stop the script only while it runs: neither
	// needs a goroutine until it fires.
	p.stopOnCancel = context.AfterFunc(ctx, p.stop)
	if s.Timeout > 0 {
		p.timeout = time.AfterFunc(s.Timeout-time.Since(start), func() {
			p.mu.Lock()
			p.timedOut = true
			p.mu.Unlock()
			p.stop()
		})
	}
	return p, Result{}
}

// finish waits for the started script and its output, and returns how it
// ended.
func (p *proc) finish(pollExit bool) Result {
	waitErr := p.wait(pollExit)
	p.stopOnCancel()
	p.mu.Lock()
	if p.timeout != nil {
		p.timeout.Stop()
	}
	if p.killTimer != nil {
		p.killTimer.Stop()
	}
	res := Result{ExitCode: p.cmd.ProcessState.ExitCode(), Duration: time.Since(p.began),
		StderrTail: p.col.tail(), Truncated: p.col.truncated}
	// Only a script that was signalled was stopped; one that exited on its
	// own while its pipes were still held open was not.
	if p.signalled {
		res.TimedOut = p.timedOut
		res.Stopped = !res.TimedOut
	}
	p.mu.Unlock()
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		res.StartErr = waitErr
	}
	return res
}

// proc is a started script: its process, the read ends of its output
// pipes, and whether it was signalled.
type proc struct {
	began time.Time
	cmd   *exec.Cmd
	grace time.Duration
	col   *collector
	out   [2]*lineWriter // stdout, stderr
	fds   [2]int         // the pipes' non-blocking read ends

	stopOnCancel func() bool
	timeout      *time.Timer

	mu        sync.Mutex
	exited    bool // seen to have exited: it is not signalled any more
	signalled bool
	timedOut  bool // the timeout passed (it stopped the script if signalled)
	killTimer *time.Timer
}

// pipesOpenAfterExit is how long after the script exits its output is
// still read, for a grandchild that holds the pipes open.
func (p *proc) pipesOpenAfterExit() time.Duration { return p.grace + time.Second }

// devNull is the scripts' stdin, opened once.
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// start starts the script with pipes for its stdout and stderr. The child
// gets the write ends as files, so os/exec copies nothing itself.
func (p *proc) start(s Spec) error {
	stdin, err := devNull()
	if err != nil {
		return err
	}
	cmd := exec.Command(s.Path)
	cmd.Dir = s.Dir
	cmd.Env = s.Env
	if cmd.Env == nil {
		cmd.Env = []string{} // nil would mean the worker's own environment
	}
	cmd.Stdin = stdin
	setProcessGroup(cmd)
	var w [2]*os.File
	for i := range w {
		if p.fds[i], w[i], err = outputPipe(); err != nil {
			for j := range i {
				_ = syscall.Close(p.fds[j])
				_ = w[j].Close()
			}
			return err
		}
	}
	cmd.Stdout, cmd.Stderr = w[0], w[1]
	err = cmd.Start()
	// The child has its copies of the write ends; the pipes reach end of
	// file once it and whatever it started close theirs.
	_ = w[0].Close()
	_ = w[1].Close()
	if err != nil {
		_ = syscall.Close(p.fds[0])
		_ = syscall.Close(p.fds[1])
		return err
	}
	cmd.Env = nil // the child has it; the worker need not keep it
	p.cmd = cmd
	return nil
}

// stop signals the group SIGTERM, and SIGKILL after the grace, unless the
// script has exited or was signalled already.
func (p *proc) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited || p.signalled {
		return
	}
	p.signalled = true
	signalGroup(p.cmd, sigTerm)
	p.killTimer = time.AfterFunc(p.grace, func() { signalGroup(p.cmd, sigKill) })
}

// markExited records that the script has exited, so that a timeout or a
// cancellation from now on leaves it be.
func (p *proc) markExited() {
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()
}

// wait reads the script's output until both pipes are closed (or until
// pipesOpenAfterExit after the script exited), kills its group, and reaps
// it, returning what (*exec.Cmd).Wait returned.
func (p *proc) wait(pollExit bool) error {
	if pollExit {
		if ok, err := p.waitPolled(); ok {
			return err
		}
	}
	return p.waitBlocking()
}

// waitBlocking waits for the script in (*exec.Cmd).Wait, which holds a
// thread while it runs, and reads each pipe in a goroutine of its own.
func (p *proc) waitBlocking() error {
	var files [2]*os.File
	for i, fd := range p.fds {
		// Non-blocking, so the runtime's poller takes it.
		files[i] = os.NewFile(uintptr(fd), string(p.out[i].stream))
	}
	var waitErr error
	var wg sync.WaitGroup
	wg.Go(func() { drainFile(files[1], p.out[1]) })
	wg.Go(func() {
		waitErr = p.cmd.Wait()
		p.markExited()
		deadline := time.Now().Add(p.pipesOpenAfterExit())
		for _, f := range files {
			_ = f.SetReadDeadline(deadline)
		}
	})
	drainFile(files[0], p.out[0])
	wg.Wait()
	for _, f := range files {
		_ = f.Close()
	}
	p.end()
	return waitErr
}

// end passes on what is left of a partial line and kills what the script
// started, which dies with it.
func (p *proc) end() {
	p.out[0].flush()
	p.out[1].flush()
	signalGroup(p.cmd, sigKill)
}

// readSize is how much one read of a pipe takes.
const readSize = 32 << 10

// readBuffers lends read buffers: a pipe holds one only while it has data
// to read, never while it waits.
var (
	readBuffers = sync.Pool{New: func() any { return new([readSize]byte) }}
	buffersLent atomic.Int64 // for tests
)

// readOnce reads from the non-blocking pipe fd into w, once. It reports
// whether the pipe is still open and whether it had data (so may have
// more); a pipe that is empty but open would block.
func readOnce(fd int, w *lineWriter) (open, more bool) {
	buf := readBuffers.Get().(*[readSize]byte)
	buffersLent.Add(1)
	defer func() {
		buffersLent.Add(-1)
		readBuffers.Put(buf)
	}()
	for {
		n, err := syscall.Read(fd, buf[:])
		switch {
		case n > 0:
			_, _ = w.Write(buf[:n])
			return true, true
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return true, false
		default: // end of file, or an error that ends the stream as well
			return false, false
		}
	}
}

// drainFile reads a pipe registered with the runtime's poller until end of
// file or its read deadline.
func drainFile(f *os.File, w *lineWriter) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		for {
			open, more := readOnce(int(fd), w)
			if !open {
				return true
			}
			if !more {
				return false // parks until the pipe is readable again
			}
		}
	})
}

// collector reads a script's output streams into lines, within the cap.
type collector struct {
	emit      func(Line)
	emitBytes func(Stream, []byte, time.Time) // instead of emit
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
	if over {
		stream, text = Stderr, []byte("[maxq] output truncated: more than "+strconv.FormatInt(c.max, 10)+" bytes; the rest is discarded")
	}
	switch {
	case c.emitBytes != nil:
		c.emitBytes(stream, text, time.Now())
	case c.emit != nil:
		c.emit(Line{Stream: stream, Text: string(text), At: time.Now()})
	}
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
	n := len(pass) + len(extra)
	for _, m := range maxq {
		n += len(m)
	}
	e := environ{out: make([]string, 0, n)}
	for _, k := range pass {
		if v, ok := os.LookupEnv(k); ok {
			e.set(k, v)
		}
	}
	for k, v := range extra {
		e.set(k, v)
	}
	for _, m := range maxq {
		for k, v := range m {
			e.set(k, v)
		}
	}
	return e.out
}

// environ is an environment being built: one entry per name, in the order
// the names were first set. A handful of names is looked up by scanning;
// an index is built only for many.
type environ struct {
	out   []string
	index map[string]int
}

const environScanned = 32

func (e *environ) set(k, v string) {
	kv := k + "=" + v
	if i, ok := e.find(k); ok {
		e.out[i] = kv
		return
	}
	if e.index != nil {
		e.index[k] = len(e.out)
	}
	e.out = append(e.out, kv)
	if e.index == nil && len(e.out) > environScanned {
		e.index = make(map[string]int, 2*len(e.out))
		for i, kv := range e.out {
			name, _, _ := strings.Cut(kv, "=")
			e.index[name] = i
		}
	}
}

func (e *environ) find(k string) (int, bool) {
	if e.index != nil {
		i, ok := e.index[k]
		return i, ok
	}
	for i, kv := range e.out {
		if len(kv) > len(k) && kv[len(k)] == '=' && kv[:len(k)] == k {
			return i, true
		}
	}
	return 0, false
}
