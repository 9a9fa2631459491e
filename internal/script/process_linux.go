package script

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// setParentDeathSignal kills the script when the worker dies, even by
// SIGKILL. What the script started itself is not reached this way; it
// ends when it is done.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// outputPipe returns a pipe for one of a script's output streams (see
// splitPipe), close-on-exec from the start.
func outputPipe() (int, *os.File, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return -1, nil, os.NewSyscallError("pipe2", err)
	}
	return splitPipe(p)
}

// sysPidfdOpen is the number of pidfd_open(2), the same on every
// architecture.
const sysPidfdOpen = 434

// pidfdOpen returns a pidfd for pid: a descriptor that becomes readable
// when the process exits.
func pidfdOpen(pid int) (int, error) {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// exitTag marks the pidfd's events in a script's epoll set; the pipes'
// are tagged with their index in proc.fds.
const exitTag = 2

// waitPolled waits for the script in the calling goroutine alone, holding
// no thread and no buffer while nothing happens: the pipes' read ends and
// a pidfd of the script go into an epoll set of the script's own, whose
// descriptor the runtime's poller watches like a socket's, so the
// goroutine parks until a pipe has data or the script has exited. The
// script is reaped only once its output is read and its group killed, so
// the group's id cannot have been reused meanwhile. It reports false,
// having done nothing, where the kernel has no pidfds (before 5.3).
func (p *proc) waitPolled() (bool, error) {
	pidfd, err := pidfdOpen(p.cmd.Process.Pid)
	if err != nil {
		return false, nil
	}
	defer func() { _ = syscall.Close(pidfd) }()
	set, err := newEpollSet(p.fds[0], p.fds[1], pidfd)
	if err != nil {
		return false, nil
	}
	w := &pollWait{p: p, pidfd: pidfd, open: [2]bool{true, true}}
	w.run(set)
	_ = set.Close()
	for i, fd := range p.fds {
		if w.open[i] {
			_ = syscall.Close(fd)
		}
	}
	p.end()
	return true, p.cmd.Wait()
}

// newEpollSet returns an epoll set watching fds for reading, each event
// tagged with the index of its descriptor, as a file in the runtime's
// poller.
func newEpollSet(fds ...int) (*os.File, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	for i, fd := range fds {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(i)}
		if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			_ = syscall.Close(epfd)
			return nil, os.NewSyscallError("epoll_ctl", err)
		}
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(epfd), "epoll")
	// Only a descriptor in the runtime's poller takes a deadline.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// pollWait is the state of waitPolled's loop.
type pollWait struct {
	p      *proc
	pidfd  int
	open   [2]bool // which pipes are still open
	exited bool
	failed bool // epoll_wait failed, which it cannot
	events [exitTag + 1]syscall.EpollEvent
}

// run reads the script's output as it comes until both pipes are closed
// and the script has exited, or until pipesOpenAfterExit after it exited.
func (w *pollWait) run(set *os.File) {
	rc, err := set.SyscallConn()
	if err != nil {
		return
	}
	for {
		wasExited := w.exited
		if err := rc.Read(w.ready); err != nil || w.failed {
			return // past the deadline: a grandchild holds the pipes open
		}
		if w.exited && !w.open[0] && !w.open[1] {
			return
		}
		if w.exited && !wasExited {
			_ = set.SetReadDeadline(time.Now().Add(w.p.pipesOpenAfterExit()))
		}
	}
}

// ready handles what is ready in the epoll set epfd, reading each readable
// pipe once a round so that neither stream starves the other. It reports
// false when nothing is (the goroutine then parks until something is),
// and true when run has something to do: the script has just exited, or
// everything is over.
func (w *pollWait) ready(epfd uintptr) bool {
	for {
		n, err := syscall.EpollWait(int(epfd), w.events[:], 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			w.failed = true
			return true
		}
		if n == 0 {
			return false
		}
		justExited := false
		for _, ev := range w.events[:n] {
			i := int(ev.Fd)
			if i == exitTag {
				_ = syscall.EpollCtl(int(epfd), syscall.EPOLL_CTL_DEL, w.pidfd, nil)
				w.exited, justExited = true, true
				w.p.markExited()
				continue
			}
			if open, _ := readOnce(w.p.fds[i], w.p.out[i]); !open {
				_ = syscall.EpollCtl(int(epfd), syscall.EPOLL_CTL_DEL, w.p.fds[i], nil)
				_ = syscall.Close(w.p.fds[i])
				w.open[i] = false
			}
		}
		if justExited || w.exited && !w.open[0] && !w.open[1] {
			return true
		}
	}
}
