package script

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// reactor watches every running script of the process in one epoll set:
// the read ends of its two output pipes and a pidfd, which becomes
// readable when the script exits. One goroutine waits on the set, parked
// in the runtime's poller, which watches the set's descriptor like a
// socket's, and only dispatches what is ready, so that nothing it does can
// block:
//
//   - A readable pipe gets a goroutine of its own, which reads it until it
//     is empty, passing the lines on, and ends. The pipes are registered
//     one-shot (EPOLLONESHOT) and re-armed by that goroutine once it is
//     done, so a pipe has at most one reader, and a reader, with its read
//     buffer, exists only while output flows. A reader blocked by a slow
//     consumer of lines holds up its own script only.
//   - A readable pidfd means the script has exited: from then on its pipes
//     are read for at most pipesOpenAfterExit.
//
// Whichever goroutine sees the last of these — the script exited, its
// pipes closed (or no longer waited for), no reader left — finishes the
// script: kills its group, reaps it and calls its done. That is a reader,
// a timer's goroutine, or, for an exit seen last by the reactor's own
// goroutine, one started for it.
type reactor struct {
	set  *os.File // the epoll set, in the runtime's poller (kept reachable)
	epfd int

	mu    sync.Mutex
	procs map[uint32]*proc // by id, as its events are tagged
	last  uint32           // the id given out last
}

// An event's tag (its epoll data) is the script's id and which of its
// descriptors is ready.
const (
	tagStdout = 0 // the pipes' tags are their indexes in proc.fds
	tagStderr = 1
	tagExit   = 2
	tagBits   = 2
	tagMask   = 1<<tagBits - 1
	maxID     = 1<<(32-tagBits) - 1
)

// pollState is the reactor's record of one script. Its fields are guarded
// by the proc's mu, but expired, which readers check between reads.
type pollState struct {
	reactor *reactor
	id      uint32
	pidfd   int // -1 once the script has exited
	done    func(Result)
	open    [2]bool // the pipe is not at end of file (nor closed)
	reading [2]bool // a goroutine reads the pipe: it is not armed
	// readers are p.read(0) and p.read(1) as funcs made once, so that
	// starting a reader for each burst of output allocates nothing.
	readers [2]func()
	expired atomic.Bool
	expiry  *time.Timer // pipesOpenAfterExit after the exit
	gone    bool        // being finished, or never watched: its events are stale
}

// theReactor is the process's reactor, started with the first script.
var theReactor = sync.OnceValues(newReactor)

func newReactor() (*reactor, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	set := os.NewFile(uintptr(epfd), "epoll")
	// Only a descriptor in the runtime's poller takes a deadline.
	if err := set.SetReadDeadline(time.Time{}); err != nil {
		_ = set.Close()
		return nil, err
	}
	rc, err := set.SyscallConn()
	if err != nil {
		_ = set.Close()
		return nil, err
	}
	r := &reactor{set: set, epfd: epfd, procs: map[uint32]*proc{}}
	go r.loop(rc)
	return r, nil
}

// loop dispatches the set's events as they come, for ever.
func (r *reactor) loop(rc syscall.RawConn) {
	events := make([]syscall.EpollEvent, 64)
	for {
		// The callback never reports done: Read parks until the set is
		// readable again (an event was queued) and calls it anew. It
		// returns only on an error, which a descriptor without a deadline
		// does not have.
		_ = rc.Read(func(uintptr) bool {
			r.dispatch(events)
			return false
		})
	}
}

// dispatch hands out every event queued in the set, until none is left:
// the poller reports the set's readiness edge-triggered.
func (r *reactor) dispatch(events []syscall.EpollEvent) {
	for {
		n, err := syscall.EpollWait(r.epfd, events, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			// Only a bad descriptor or buffer fails epoll_wait.
			panic("script: epoll_wait: " + err.Error())
		}
		if n == 0 {
			return
		}
		for _, ev := range events[:n] {
			tag := uint32(ev.Fd)
			r.mu.Lock()
			p := r.procs[tag>>tagBits]
			r.mu.Unlock()
			switch {
			case p == nil: // finished meanwhile
			case tag&tagMask == tagExit:
				p.exitReady()
			default:
				p.pipeReady(int(tag&tagMask), ev.Events)
			}
		}
	}
}

// add gives p an id and registers its pipes and pidfd, one-shot. On an
// error it registers nothing. p.mu is held, so p's events wait until all
// are in.
func (r *reactor) add(p *proc) error {
	r.mu.Lock()
	for {
		r.last = r.last%maxID + 1
		if r.procs[r.last] == nil {
			break
		}
	}
	id := r.last
	r.procs[id] = p
	r.mu.Unlock()
	p.poll.id = id
	fds := [...]int{tagStdout: p.fds[0], tagStderr: p.fds[1], tagExit: p.poll.pidfd}
	for tag, fd := range fds {
		if err := r.ctl(syscall.EPOLL_CTL_ADD, fd, id, tag); err != nil {
			for _, fd := range fds[:tag] {
				r.remove(fd)
			}
			r.forget(id)
			return err
		}
	}
	return nil
}

// ctl adds or re-arms fd, one-shot, for reading, tagged.
func (r *reactor) ctl(op, fd int, id uint32, tag int) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLONESHOT, Fd: int32(id<<tagBits | uint32(tag))}
	if err := syscall.EpollCtl(r.epfd, op, fd, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// remove takes fd out of the set; it must be before fd is closed, for a
// child forked meanwhile may hold the descriptor open until its exec, and
// with it the registration.
func (r *reactor) remove(fd int) {
	_ = syscall.EpollCtl(r.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
}

// forget drops the script with id: events still tagged with it are stale.
func (r *reactor) forget(id uint32) {
	r.mu.Lock()
	delete(r.procs, id)
	r.mu.Unlock()
}

// watch has the reactor wait for the started script and call done with
// its Result. It reports false, having done nothing, where the kernel has
// no pidfds (before 5.3) or the set refuses the script.
func (p *proc) watch(done func(Result)) bool {
	r, err := theReactor()
	if err != nil {
		return false
	}
	pidfd, err := pidfdOpen(p.pid)
	if err != nil {
		return false
	}
	s := &p.poll
	p.mu.Lock()
	s.reactor, s.pidfd, s.done, s.open = r, pidfd, done, [2]bool{true, true}
	s.readers = [2]func(){func() { p.read(0) }, func() { p.read(1) }}
	err = r.add(p)
	s.gone = err != nil
	p.mu.Unlock()
	if err != nil {
		_ = syscall.Close(pidfd)
		return false
	}
	// The script is reaped by pid (see finish): the os.Process, and the
	// pidfd it holds, are not needed.
	_ = p.process.Release()
	p.process = nil
	return true
}

// pipeReady hands a readable pipe to a reader (on the reactor's goroutine).
func (p *proc) pipeReady(i int, events uint32) {
	s := &p.poll
	p.mu.Lock()
	if s.gone || !s.open[i] {
		p.mu.Unlock()
		return
	}
	if events&syscall.EPOLLIN == 0 {
		// Hung up with nothing in it: at end of file, nothing to read.
		p.closePipe(i)
		last := p.lastEvent()
		p.mu.Unlock()
		if last {
			go p.finish()
		}
		return
	}
	s.reading[i] = true
	p.mu.Unlock()
	go s.readers[i]()
}

// read reads pipe i until it is empty, in a goroutine of its own, then
// re-arms it, or closes it at end of file.
func (p *proc) read(i int) {
	s := &p.poll
	open := readPipe(p.fds[i], &p.out[i], &s.expired)
	p.mu.Lock()
	s.reading[i] = false
	switch {
	case !open:
		p.closePipe(i)
	case !s.expired.Load():
		if err := s.reactor.ctl(syscall.EPOLL_CTL_MOD, p.fds[i], s.id, i); err != nil {
			p.closePipe(i) // cannot happen; were it to, the pipe is not read again
		}
	}
	last := p.lastEvent()
	p.mu.Unlock()
	if last {
		p.finish()
	}
}

// exitReady notes that the script has exited (on the reactor's goroutine):
// from now on its pipes are read for pipesOpenAfterExit at most.
func (p *proc) exitReady() {
	s := &p.poll
	p.mu.Lock()
	if s.gone || s.pidfd < 0 {
		p.mu.Unlock()
		return
	}
	p.exited = true
	s.reactor.remove(s.pidfd)
	_ = syscall.Close(s.pidfd)
	s.pidfd = -1
	last := p.lastEvent()
	if !last {
		s.expiry = time.AfterFunc(p.pipesOpenAfterExit(), p.expire)
	}
	p.mu.Unlock()
	if last {
		go p.finish()
	}
}

// expire stops waiting for pipes a grandchild holds open.
func (p *proc) expire() {
	p.poll.expired.Store(true)
	p.mu.Lock()
	last := p.lastEvent()
	p.mu.Unlock()
	if last {
		p.finish()
	}
}

// closePipe takes pipe i out of the set and closes it. p.mu is held.
func (p *proc) closePipe(i int) {
	p.poll.reactor.remove(p.fds[i])
	_ = syscall.Close(p.fds[i])
	p.poll.open[i] = false
}

// lastEvent reports, to one caller only, whether the script is done with:
// it has exited, its pipes are closed or no longer waited for, and no
// reader is left. That caller finishes it. p.mu is held.
func (p *proc) lastEvent() bool {
	s := &p.poll
	if s.gone || !p.exited || s.reading[0] || s.reading[1] {
		return false
	}
	if (s.open[0] || s.open[1]) && !s.expired.Load() {
		return false
	}
	s.gone = true
	return true
}

// finish closes what is left of the script's pipes, kills its group, reaps
// it and hands its Result to done. Every line has been passed on: no
// reader is left, and none can start.
func (p *proc) finish() {
	s := &p.poll
	p.mu.Lock()
	for i := range p.fds {
		if s.open[i] {
			p.closePipe(i)
		}
	}
	if s.expiry != nil {
		s.expiry.Stop()
	}
	p.mu.Unlock()
	s.reactor.forget(s.id)
	// The group is killed before the script is reaped, so that its id
	// cannot have been reused meanwhile.
	p.end()
	exitCode, err := reap(p.pid)
	s.done(p.result(exitCode, err))
}

// reap waits for the exited script pid, which does not block, and returns
// its exit code.
func reap(pid int) (int, error) {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return -1, os.NewSyscallError("wait4", err)
		}
		return ws.ExitStatus(), nil // -1 unless it exited
	}
}
