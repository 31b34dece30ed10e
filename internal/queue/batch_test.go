package queue

import (
	"context"
	"fmt"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A group takes the oldest queued enqueue and those after it that may
// share its transaction: the same lease (a put on a lease etcd no longer
// has fails the whole transaction), another queue (keys of one queue put
// in one revision would tie on CreateRevision: neither ahead of the
// other, both might hold), within the count and byte bounds. What is left
// keeps its order.
func TestBatcherGroupsOnlyWhatMayShareATransaction(t *testing.T) {
	p := func(lease clientv3.LeaseID, queue string, size int) *pending {
		return &pending{ctx: context.Background(), lease: lease, queue: queue, size: size, done: make(chan struct{})}
	}
	many := func(n int) []*pending {
		var ps []*pending
		for i := range n {
			ps = append(ps, p(1, fmt.Sprintf("/ns/v1/mutex/%d/", i), 10))
		}
		return ps
	}
	for _, tc := range []struct {
		name      string
		queued    []*pending
		want      []int // indexes of queued in the group, in order
		wantAfter []int // left queued, in order
	}{
		{"one", []*pending{p(1, "/a/", 1)}, []int{0}, nil},
		{"other queues on one lease", []*pending{p(1, "/a/", 1), p(1, "/b/", 1), p(1, "/c/", 1)}, []int{0, 1, 2}, nil},
		{"the same queue waits", []*pending{p(1, "/a/", 1), p(1, "/b/", 1), p(1, "/a/", 1), p(1, "/c/", 1)}, []int{0, 1, 3}, []int{2}},
		{"another lease waits", []*pending{p(1, "/a/", 1), p(2, "/b/", 1), p(1, "/c/", 1), p(2, "/d/", 1)}, []int{0, 2}, []int{1, 3}},
		{"bytes", []*pending{p(1, "/a/", maxBatchBytes-10), p(1, "/b/", 20), p(1, "/c/", 10)}, []int{0, 2}, []int{1}},
		{"count", many(maxBatch + 3), seq(0, maxBatch), seq(maxBatch, maxBatch+3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Batcher{inflight: 1, queued: slices.Clone(tc.queued)}
			g := b.take()
			if got := indexes(tc.queued, g); !slices.Equal(got, tc.want) {
				t.Errorf("group %v, want %v", got, tc.want)
			}
			if got := indexes(tc.queued, b.queued); !slices.Equal(got, tc.wantAfter) {
				t.Errorf("left queued %v, want %v", got, tc.wantAfter)
			}
			if b.inflight != 1 {
				t.Errorf("inflight %d after a group was taken, want the sender's 1", b.inflight)
			}
			for len(b.queued) > 0 {
				b.take()
			}
			if b.take() != nil || b.inflight != 0 {
				t.Errorf("with nothing queued take freed the slot to %d, want 0", b.inflight)
			}
		})
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func indexes(all, some []*pending) []int {
	var out []int
	for _, p := range some {
		out = append(out, slices.Index(all, p))
	}
	return out
}
