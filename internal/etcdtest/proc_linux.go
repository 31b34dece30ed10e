package etcdtest

import "syscall"

// procAttr kills the member when the thread that started it ends, which is
// when the test binary ends, however it ends: no code here or in what the
// tests call locks a thread to a goroutine, so Go keeps its threads for the
// process's life (see os/exec and go.dev/issue/27505).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
