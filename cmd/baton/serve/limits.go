package serve

import (
	"fmt"
	"sync"

	"connectrpc.com/connect"
)

// limits bounds the Hold, Lead and Shards streams, waiting or holding: --max-holds for the
// server, --max-holds-per-identity for one caller. A stream over either is
// refused with RESOURCE_EXHAUSTED before anything is asked of etcd.
type limits struct {
	max, perIdentity int

	mu    sync.Mutex
	total int
	by    map[string]int
}

func newLimits(max, perIdentity int) *limits {
	return &limits{max: max, perIdentity: perIdentity, by: make(map[string]int)}
}

// admit counts one stream of identity, or refuses it; release uncounts it.
func (l *limits) admit(identity string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= l.max:
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the server has %d holds open, its --max-holds", l.total))
	case l.by[identity] >= l.perIdentity:
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("identity %q has %d holds open, the server's --max-holds-per-identity", identity, l.by[identity]))
	}
	l.total++
	l.by[identity]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.by[identity]--; l.by[identity] == 0 {
				delete(l.by, identity)
			}
		})
	}, nil
}
