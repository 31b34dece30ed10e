package harness

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Loadavg is the machine's load averages over 1, 5 and 15 minutes, as
// /proc/loadavg says them, or "unknown".
func Loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Limits returns the soft file-descriptor limit and the memory available
// (0 when unknown): what bounds the sizes of a phase that runs children.
func Limits() (fds uint64, mem uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		fds = rl.Cur
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				mem = kb << 10
			}
		}
	}
	return fds, mem
}

// OpenFDs counts this process's open file descriptors (0 if unknown).
func OpenFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}
