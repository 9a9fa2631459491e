package script

import (
	"os"
	"syscall"
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
