package pglocal

import "syscall"

// sysProcAttr puts postgres in its own process group, so that a Ctrl-C at
// the terminal reaches us rather than the server, and asks the kernel for a
// fast shutdown (SIGINT) if we die first.
//
// Pdeathsig follows the thread that started the child; Go only ends a thread
// when a goroutine locked to it exits, which never happens here.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGINT}
}
