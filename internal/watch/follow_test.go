package watch

import (
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Follow replays the deletions it kept oldest first, also once the ring
// has wrapped: a follower that may hold after some of them must meet them
// in the order etcd applied them (a waiter ends on the first revision that
// frees it, with whether every deletion it used was a marked release).
func TestFollowReplaysRecentDeletionsOldestFirst(t *testing.T) {
	w := New(&Config[*int]{}, "/ns/v1/")
	w.established(w.gen, 1)
	var ks []string
	for i := range 5 {
		ks = append(ks, fmt.Sprintf("/ns/v1/lock/x/%d", i))
	}
	total := maxRecent + maxRecent/2 // wrapped
	for i := 1; i <= total; i++ {
		w.deleted(w.gen, ks[i%len(ks)], int64(i), i%2 == 0)
	}
	var got []int64
	stop, ok := w.Follow(ks, int64(total-maxRecent), func(_ string, at int64, released bool) {
		if released != (at%2 == 0) {
			t.Errorf("deletion at %d replayed with released=%v", at, released)
		}
		got = append(got, at)
	})
	if !ok {
		t.Fatal("Follow refused a read within the kept deletions")
	}
	defer stop()
	if len(got) != maxRecent || !slices.IsSorted(got) {
		t.Fatalf("replayed %d deletions in the order %v, want the last %d oldest first", len(got), got, maxRecent)
	}
}

// Only a revision that deleted one release mark and one other key is a
// holder's release: a range delete over a mark and several keys, a key
// with a waiter's own, a hand-over that deletes skipped candidates, or a
// mark alone are not, so their followers read before they hold.
func TestMarksOnlyAReleaseOfOneKey(t *testing.T) {
	del := func(key string, rev int64) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}
	}
	const a, b, mark, markB = "/ns/v1/lock/x/1a", "/ns/v1/lock/x/1b", "/ns/v1/released", "/ns/v1/released-b"
	for _, tc := range []struct {
		name string
		evs  []*clientv3.Event
		want []int64
	}{
		{"a release", []*clientv3.Event{del(a, 5), del(mark, 5)}, []int64{5}},
		{"a release of the other mark", []*clientv3.Event{del(a, 5), del(markB, 5)}, []int64{5}},
		{"two releases, one response", []*clientv3.Event{del(a, 5), del(mark, 5), del(b, 6), del(markB, 6)}, []int64{5, 6}},
		{"a delete without a mark", []*clientv3.Event{del(a, 5)}, nil},
		{"a mark alone", []*clientv3.Event{del(mark, 5)}, nil},
		{"a range delete over two keys and the mark", []*clientv3.Event{del(a, 5), del(b, 5), del(mark, 5)}, nil},
		{"both marks and a key", []*clientv3.Event{del(a, 5), del(mark, 5), del(markB, 5)}, nil},
		{"a plain delete, then a release", []*clientv3.Event{del(a, 5), del(b, 6), del(mark, 6)}, []int64{6}},
	} {
		if got := marks(tc.evs); !slices.Equal(got, tc.want) {
			t.Errorf("%s: marks %v, want %v", tc.name, got, tc.want)
		}
	}
}
