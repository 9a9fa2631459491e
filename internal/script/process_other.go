//go:build unix && !linux

package script

import "syscall"

func setParentDeathSignal(*syscall.SysProcAttr) {}
