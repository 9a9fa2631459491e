// Package script runs one flow.sh or step.sh: the script itself, so its
// shebang picks the interpreter, in its own process group, with an
// environment built from an allow-list (never inherited wholesale), stdin
// closed, and stdout/stderr read line by line in bounded chunks. Timeout and
// cancellation signal the whole group — SIGTERM, then SIGKILL after a grace
// — and the group is killed once the script has exited, so nothing it
// started outlives it.
//
// Start launches a script and returns; a callback gets the Result once the
// script has ended and every line of its output has been passed on. Run is
// Start and a wait for that callback.
//
// A running script costs little more than its process, for a worker runs
// hundreds at once. On Linux, where a pidfd makes a script's exit a
// readable descriptor, every running script of the process sits in one
// epoll set, the reactor: the read ends of its two output pipes and its
// pidfd. One goroutine, parked in the runtime's poller, waits on the set
// and only hands out what is ready. A pipe with data gets a goroutine that
// reads it until it is empty, passing the lines on, and ends, so goroutines
// and read buffers exist only while output flows, and a consumer of lines
// that blocks holds up its own script alone; an exit is noted at once. No
// thread waits for a script, one that prints nothing has no goroutine, and
// nothing of how it was started (its environment, say) stays reachable.
// Elsewhere, and where the kernel has no pidfds, each script has a
// goroutine waiting in (*os.Process).Wait, which holds a thread, and a
// goroutine per pipe.
package script

import (
	"bytes"
	"context"
	"errors"
	"os"
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
	// Output receives each line as it is read, one call at a time. While
	// it blocks, the script's output waits in its pipe (and the script,
	// once the pipe is full); other scripts are not held up. Nil discards
	// output.
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

// Start starts the script and returns without waiting for it. done is
// called once with the Result, after the script has exited, every line of
// its output has been passed on, and its process group has been killed
// and it reaped. done runs in a goroutine that serves no other script, so
// it may block; when the script could not be started, that is the
// caller's, before Start returns. Cancelling ctx stops the script's
// process group (Result.Stopped).
func Start(ctx context.Context, s Spec, done func(Result)) { start(ctx, s, true, done) }

// Run runs the script and waits for it and its output. Cancelling ctx stops
// the script's process group (Result.Stopped).
func Run(ctx context.Context, s Spec) Result { return execute(ctx, s, true) }

// start is Start. With pollExit false it waits as on systems without
// pidfds, so tests cover that path too.
func start(ctx context.Context, s Spec, pollExit bool, done func(Result)) {
	p, res := launch(ctx, s)
	if p == nil {
		done(res)
		return
	}
	if pollExit && p.watch(done) {
		return
	}
	go func() { done(p.wait()) }()
}

// execute is Run, with pollExit as for start.
func execute(ctx context.Context, s Spec, pollExit bool) Result {
	p, res := launch(ctx, s)
	if p == nil {
		return res
	}
	if pollExit {
		ended := make(chan Result, 1)
		if p.watch(func(res Result) { ended <- res }) {
			return <-ended
		}
	}
	return p.wait()
}

// launch starts the script, or returns why it did not start.
func launch(ctx context.Context, s Spec) (*proc, Result) {
	began := time.Now()
	if s.Grace <= 0 {
		s.Grace = 5 * time.Second
	}
	if ctx.Err() != nil {
		return nil, Result{ExitCode: -1, Stopped: true, Duration: time.Since(began)}
	}
	p := &proc{began: began, grace: s.Grace,
		col: collector{emit: s.Output, emitBytes: s.OutputBytes, max: s.MaxOutputBytes}}
	p.out = [2]lineWriter{{c: &p.col, stream: Stdout}, {c: &p.col, stream: Stderr}}
	if err := p.start(s); err != nil {
		if ctx.Err() != nil {
			return nil, Result{ExitCode: -1, Stopped: true, Duration: time.Since(began)}
		}
		return nil, Result{ExitCode: -1, StartErr: err, Duration: time.Since(began)}
	}
	// Timeout and cancellation stop the script only while it runs: neither
	// needs a goroutine until it fires.
	p.stopOnCancel = context.AfterFunc(ctx, p.stop)
	if s.Timeout > 0 {
		p.timeout = time.AfterFunc(s.Timeout-time.Since(began), p.timeUp)
	}
	return p, Result{}
}

// proc is a started script: its process, the read ends of its output
// pipes, and whether it was signalled. It keeps nothing of its Spec but
// what it needs while the script runs: not the environment, say.
type proc struct {
	began time.Time
	pid   int
	// process is the script's os.Process, kept for the blocking wait;
	// the reactor releases it and reaps the script by pid.
	process *os.Process
	grace   time.Duration
	col     collector
	out     [2]lineWriter // stdout, stderr
	fds     [2]int        // the pipes' non-blocking read ends

	stopOnCancel func() bool
	timeout      *time.Timer

	mu        sync.Mutex
	exited    bool // seen to have exited: it is not signalled any more
	ended     bool // about to be reaped, after which its pid may be reused
	signalled bool
	timedOut  bool // the timeout passed (it stopped the script if signalled)
	killTimer *time.Timer

	poll pollState // the reactor's record of it (Linux)
}

// pipesOpenAfterExit is how long after the script exits its output is
// still read, for a grandchild that holds the pipes open.
func (p *proc) pipesOpenAfterExit() time.Duration { return p.grace + time.Second }

// devNull is the scripts' stdin, opened once.
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// start starts the script with pipes for its stdout and stderr. The child
// gets the write ends; the worker keeps the read ends, not as files, and
// nothing else of the start: os.StartProcess rather than os/exec, whose
// Cmd would hold the environment and more while the script runs.
func (p *proc) start(s Spec) error {
	stdin, err := devNull()
	if err != nil {
		return err
	}
	env := s.Env
	if env == nil {
		env = []string{} // nil would mean the worker's own environment
	}
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
	process, err := os.StartProcess(s.Path, []string{s.Path}, &os.ProcAttr{
		Dir: s.Dir, Env: env, Files: []*os.File{stdin, w[0], w[1]}, Sys: scriptAttr})
	// The child has its copies of the write ends; the pipes reach end of
	// file once it and whatever it started close theirs.
	_ = w[0].Close()
	_ = w[1].Close()
	if err != nil {
		_ = syscall.Close(p.fds[0])
		_ = syscall.Close(p.fds[1])
		return err
	}
	p.process, p.pid = process, process.Pid
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
	signalGroup(p.pid, sigTerm)
	p.killTimer = time.AfterFunc(p.grace, p.kill)
}

// timeUp stops the script when its timeout has passed.
func (p *proc) timeUp() {
	p.mu.Lock()
	p.timedOut = true
	p.mu.Unlock()
	p.stop()
}

// kill signals the group SIGKILL at the end of the grace, unless the
// script is being reaped.
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		signalGroup(p.pid, sigKill)
	}
}

// markExited records that the script has exited, so that a timeout or a
// cancellation from now on leaves it be.
func (p *proc) markExited() {
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()
}

// end passes on what is left of a partial line and kills what the script
// started, which dies with it. Nothing reads the pipes any more.
func (p *proc) end() {
	p.out[0].flush()
	p.out[1].flush()
	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
	signalGroup(p.pid, sigKill)
}

// result is how the ended script ended, given its exit code and the error
// of waiting for it.
func (p *proc) result(exitCode int, waitErr error) Result {
	p.stopOnCancel()
	res := Result{ExitCode: exitCode, StartErr: waitErr, Duration: time.Since(p.began),
		StderrTail: p.col.tail(), Truncated: p.col.truncated}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timeout != nil {
		p.timeout.Stop()
	}
	if p.killTimer != nil {
		p.killTimer.Stop()
	}
	// Only a script that was signalled was stopped; one that exited on its
	// own while its pipes were still held open was not.
	if p.signalled {
		res.TimedOut = p.timedOut
		res.Stopped = !res.TimedOut
	}
	return res
}

// wait waits for the script in (*os.Process).Wait, which holds a thread
// while it runs, reads each pipe in a goroutine of its own until both are
// closed (or until pipesOpenAfterExit after the script exited), kills its
// group, and returns how it ended. It is the way without the reactor.
func (p *proc) wait() Result {
	var files [2]*os.File
	for i, fd := range p.fds {
		// Non-blocking, so the runtime's poller takes it.
		files[i] = os.NewFile(uintptr(fd), string(p.out[i].stream))
	}
	var state *os.ProcessState
	var waitErr error
	var wg sync.WaitGroup
	wg.Go(func() { drainFile(files[1], &p.out[1]) })
	wg.Go(func() {
		state, waitErr = p.process.Wait()
		p.markExited()
		deadline := time.Now().Add(p.pipesOpenAfterExit())
		for _, f := range files {
			_ = f.SetReadDeadline(deadline)
		}
	})
	drainFile(files[0], &p.out[0])
	wg.Wait()
	for _, f := range files {
		_ = f.Close()
	}
	p.end()
	return p.result(state.ExitCode(), waitErr)
}

// readSize is how much one read of a pipe takes.
const readSize = 32 << 10

// readBuffers lends read buffers: a pipe holds one only while it has data
// to read, never while it waits.
var (
	readBuffers = sync.Pool{New: func() any { return new([readSize]byte) }}
	buffersLent atomic.Int64 // for tests
)

// readPipe reads the non-blocking pipe fd into w until it is empty, or
// until stop (if not nil) is set, holding a read buffer for that time
// only. It reports whether the pipe is still open: false at end of file
// (or an error, which ends the stream as well).
func readPipe(fd int, w *lineWriter, stop *atomic.Bool) bool {
	buf := readBuffers.Get().(*[readSize]byte)
	buffersLent.Add(1)
	defer func() {
		buffersLent.Add(-1)
		readBuffers.Put(buf)
	}()
	for stop == nil || !stop.Load() {
		n, err := syscall.Read(fd, buf[:])
		switch {
		case n > 0:
			_, _ = w.Write(buf[:n])
		case errors.Is(err, syscall.EINTR):
		case errors.Is(err, syscall.EAGAIN):
			return true
		default:
			return false
		}
	}
	return true
}

// drainFile reads a pipe registered with the runtime's poller until end of
// file or its read deadline.
func drainFile(f *os.File, w *lineWriter) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		return !readPipe(int(fd), w, nil) // parks until the pipe is readable again
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
