package rwmutex

import (
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// readersFirst is a planted bug: readers ignore writers.
type readersFirst struct{}

func (readersFirst) Blockers(string, []*mvccpb.KeyValue) ([]*mvccpb.KeyValue, int) { return nil, 0 }

// NewReadersIgnoreWriters returns an RWMutex whose readers do not wait for
// writers, for the history checker to catch.
func NewReadersIgnoreWriters(cli *clientv3.Client, name string, opts ...Option) (*RWMutex, error) {
	return newRWMutex(cli, name, readersFirst{}, opts)
}
