package queue

import (
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/batonhq/baton/internal/keys"
)

// The one rule for who holds: the policies the semaphore and the
// read/write lock wait by, and Holding, which the inspection calls, baton
// locks and baton ui read a queue by.

// FIFO is a semaphore's policy: a key holds while fewer than Limit keys
// older than it remain; permits go in arrival order, and no key overtakes
// an older waiter.
type FIFO struct{ Limit int }

// Blockers implements Policy.
func (p FIFO) Blockers(_ string, older []*mvccpb.KeyValue) ([]*mvccpb.KeyValue, int) {
	return older, p.Limit - 1
}

// Readers is a read lock's policy: a reader holds once no older writer
// remains; any key that is not a reader's counts as a writer. Writers need
// no policy: like a mutex's key, they wait for every older key.
type Readers struct{}

// Blockers implements Policy.
func (Readers) Blockers(_ string, older []*mvccpb.KeyValue) ([]*mvccpb.KeyValue, int) {
	var writers []*mvccpb.KeyValue
	for _, kv := range older {
		if !IsReader(string(kv.Key)) {
			writers = append(writers, kv)
		}
	}
	return writers, 0
}

// IsReader reports whether key is a read lock's (tagged keys.TagRead).
func IsReader(key string) bool { return keys.TagOf(key) == keys.TagRead }

// RW is the policy each key of a read/write lock's queue waits by: a
// reader by readers, a writer by none.
func RW(readers Policy) func(key string) Policy {
	return func(key string) Policy {
		if IsReader(key) {
			return readers
		}
		return nil
	}
}

// Holding is how many of q's keys (oldest first) hold, each key deciding as
// it decides while it waits (MayHold): under policy(key), once no more than
// allowed of its blockers remain; under a nil policy (or a nil policy func:
// a mutex's or an election's queue), once it is the oldest. No policy of
// baton's lets a key overtake an older waiter, so those that hold are the
// oldest, and the first that waits is found by bisection (a read lock's
// Blockers reads every older key).
func Holding(q []*mvccpb.KeyValue, policy func(key string) Policy) int {
	return sort.Search(len(q), func(i int) bool {
		key := string(q[i].Key)
		var p Policy
		if policy != nil {
			p = policy(key)
		}
		if p == nil {
			return i > 0
		}
		b, allowed := p.Blockers(key, q[:i])
		return len(b) > allowed
	})
}
