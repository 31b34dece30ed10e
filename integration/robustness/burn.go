package robustness

import (
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// startBurners starts n CPU burners, this program run again with the
// "burn" role: each spins on one CPU until stop is called (or this
// process dies), so that a run can be made on a machine loaded on
// purpose, as other builds load a shared one. stop kills and reaps them.
func (r *runner) startBurners(n int) (stop func()) {
	var cmds []*exec.Cmd
	for range n {
		cmd := r.cfg.ChildCmd("burn")
		cmd.Env = append(append(os.Environ(), cmd.Env...), RoleEnv+"=burn")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if _, err := cmd.StdinPipe(); err != nil { // closed when this process exits
			continue
		}
		if err := cmd.Start(); err != nil {
			continue
		}
		cmds = append(cmds, cmd)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, c := range cmds {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		})
	}
}

// runBurner spins until its stdin ends (its parent stopped it or died).
func runBurner() error {
	runtime.GOMAXPROCS(1)
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	for x := uint64(0); ; x++ {
		if x%(1<<20) == 0 {
			select {
			case <-done:
				return nil
			default:
			}
		}
	}
}
