//go:build unix && !linux

package pglocal

import "syscall"

// sysProcAttr puts postgres in its own process group, so that a Ctrl-C at
// the terminal reaches us rather than the server.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
