//go:build unix

package script

import (
	"os"
	"syscall"
)

var (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// scriptAttr makes a script the leader of a new process group, so that
// signals reach everything it starts, and (on Linux) has the kernel kill
// it if the worker itself dies. It is shared: starting a process only
// reads it.
var scriptAttr = func() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(attr)
	return attr
}()

// signalGroup signals the whole process group of the script pid.
func signalGroup(pid int, sig syscall.Signal) {
	if pid > 0 {
		_ = syscall.Kill(-pid, sig)
	}
}

// splitPipe makes the pipe p's read end non-blocking, for the worker, and
// returns it with the write end as a file, blocking, for the child.
func splitPipe(p [2]int) (int, *os.File, error) {
	if err := syscall.SetNonblock(p[0], true); err != nil {
		_ = syscall.Close(p[0])
		_ = syscall.Close(p[1])
		return -1, nil, os.NewSyscallError("fcntl", err)
	}
	return p[0], os.NewFile(uintptr(p[1]), "|1"), nil
}
