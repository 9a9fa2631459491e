package script

import "syscall"

// setParentDeathSignal kills the script when the worker dies, even by
// SIGKILL. What the script started itself is not reached this way; it
// ends when it is done.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
