package etcdtest

import "syscall"

// procAttr kills the member with the test binary, whatever way it ends.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
