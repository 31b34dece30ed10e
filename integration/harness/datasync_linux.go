package harness

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync, what etcd's WAL uses on Linux.
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
