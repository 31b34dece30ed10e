package watch

import (
	"fmt"
	"slices"
	"testing"
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
		w.deleted(ks[i%len(ks)], int64(i), i%2 == 0)
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
