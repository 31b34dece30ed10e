package queue_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/queue"
)

// holdingQueue is a queue of keys under prefix, oldest first, one a
// revision from 10: "r" a reader, "w" a writer, "p" a permit, "-" an
// untagged key (a mutex's, or one no library wrote).
func holdingQueue(prefix, spec string) []*mvccpb.KeyValue {
	var q []*mvccpb.KeyValue
	for i, f := range strings.Fields(spec) {
		key := fmt.Sprintf("%s%x", prefix, 0x100+i)
		if f != "-" {
			key = keys.TaggedKey(key, f, uint64(i))
		}
		q = append(q, &mvccpb.KeyValue{Key: []byte(key), CreateRevision: int64(10 + i)})
	}
	return q
}

// waitDecision is whether the key at i holds as the library decides it
// while waiting (MayHold), from the read its enqueue makes: for a policy
// the queue up to its key, oldest first; without, the keys up to its own,
// newest first.
func waitDecision(q []*mvccpb.KeyValue, i int, p queue.Policy) bool {
	kvs := slices.Clone(q[:i+1])
	if p == nil {
		slices.Reverse(kvs)
	}
	read := &etcdserverpb.RangeResponse{Kvs: kvs, Count: int64(len(kvs))}
	ok, _, _, _ := queue.MayHold(p, read, true, string(q[i].Key), q[i].CreateRevision)
	return ok
}

// Holding counts the keys that hold as each key decides it while waiting:
// the keys that hold are the oldest, every key after them waits, and the
// count is the one stated. The rows include what a drifted copy of the rule
// would get wrong: a writer behind readers (waits, and so does every reader
// after it), a writer at the head (holds alone), an untagged key in a
// read/write lock (counts as a writer), a semaphore whose waiters outnumber
// its limit, a mutex's long queue.
func TestHoldingIsTheWaitersOwnRule(t *testing.T) {
	sem := func(limit int) func(string) queue.Policy {
		return func(string) queue.Policy { return queue.FIFO{Limit: limit} }
	}
	rw := queue.RW(queue.Readers{})
	for _, tt := range []struct {
		name   string
		spec   string
		policy func(string) queue.Policy
		want   int
	}{
		{"empty mutex", "", nil, 0},
		{"mutex alone", "-", nil, 1},
		{"mutex queue", "- - - -", nil, 1},
		{"mutex set keys", "s - s", nil, 1},
		{"semaphore under its limit", "p p", sem(3), 2},
		{"semaphore at its limit", "p p p", sem(3), 3},
		{"semaphore with waiters", "p p p p p", sem(2), 2},
		{"semaphore of one", "p p p", sem(1), 1},
		{"empty read/write lock", "", rw, 0},
		{"readers", "r r r", rw, 3},
		{"writer behind readers", "r r w r", rw, 2},
		{"writer at the head", "w r r", rw, 1},
		{"writers", "w w", rw, 1},
		{"reader, then writers", "r w w r", rw, 1},
		{"untagged key at the head", "- r", rw, 1},
		{"untagged key behind a reader", "r - r", rw, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := holdingQueue("/ns/v1/x/name/", tt.spec)
			got := queue.Holding(q, tt.policy)
			if got != tt.want {
				t.Errorf("Holding(%q) = %d, want %d", tt.spec, got, tt.want)
			}
			for i := range q {
				var p queue.Policy
				if tt.policy != nil {
					p = tt.policy(string(q[i].Key))
				}
				if holds := waitDecision(q, i, p); holds != (i < got) {
					t.Errorf("%q: key %d (%s) holds=%v waiting, but Holding counts %d", tt.spec, i, q[i].Key, holds, got)
				}
			}
		})
	}
}
