package dev

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// devLockFile is the file in --data-dir that baton dev holds an exclusive
// lock on while it serves: etcd itself would wait for the directory
// forever, with its ports bound and deaf to signals.
const devLockFile = "baton-dev.lock"

// lockDataDir takes the data directory for this process, or says which
// process has it. The lock ends with the process, or with release.
func lockDataDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, devLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(b))
			if _, perr := strconv.Atoi(pid); perr != nil {
				pid = "unknown"
			}
			return nil, fmt.Errorf("--data-dir %s: data dir in use by PID %s (another baton dev)", dir, pid)
		}
		return nil, fmt.Errorf("--data-dir %s: lock %s: %w", dir, path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { _ = f.Close() }, nil
}

// exposure is the warning for a client address beyond loopback served
// without TLS or without auth; empty when there is nothing to say.
func exposure(listen string, tls, auth bool) string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	if host == "localhost" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ""
	}
	switch {
	case !tls:
		return fmt.Sprintf("warning: serving %s beyond loopback in plaintext without auth: anyone who reaches this port can read, write and delete every key; use --tls DIR --auth", listen)
	case !auth:
		return fmt.Sprintf("warning: serving %s beyond loopback without auth: any client with a certificate of the CA can do everything; add --auth", listen)
	}
	return ""
}
