package keyspace

import (
	"os"
	"strconv"
)

// HolderIdentity is the value mutex writes in this process's keys
// ("host:pid"), by which a waiter finds its own place in the queue.
func HolderIdentity() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}
