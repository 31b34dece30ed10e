package semaphore

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/queue"
)

// NewOverLimit returns a Semaphore that stores limit but lets limit+extra
// hold: a planted bug for the history checker.
func NewOverLimit(cli *clientv3.Client, name string, limit, extra int, opts ...Option) (*Semaphore, error) {
	return newSemaphore(cli, name, limit, queue.FIFO{Limit: limit + extra}, opts)
}
