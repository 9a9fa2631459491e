//go:build unix && !linux

package script

import (
	"os"
	"syscall"
)

func setParentDeathSignal(*syscall.SysProcAttr) {}

// outputPipe returns a pipe for one of a script's output streams (see
// splitPipe). Without pipe2, both ends are made close-on-exec under
// ForkLock, so that no child started meanwhile inherits them.
func outputPipe() (int, *os.File, error) {
	var p [2]int
	syscall.ForkLock.RLock()
	err := syscall.Pipe(p[:])
	if err == nil {
		syscall.CloseOnExec(p[0])
		syscall.CloseOnExec(p[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, nil, os.NewSyscallError("pipe", err)
	}
	return splitPipe(p)
}

// pollState is empty: there is no reactor without pidfds.
type pollState struct{}

// watch needs pidfds; elsewhere a script is waited for in
// (*os.Process).Wait.
func (*proc) watch(func(Result)) bool { return false }
