package shard

import (
	"maps"
	"slices"
)

// assign returns the member each of n shards should be owned by, given m
// live members in join order (0 joined first), each shard's current owner
// (an index into the members, or -1: none, or a member that left), and
// the shards each member cannot take (stuck[i]: its fn of the shard
// outlived the drain and still runs; nil for none). Every member computes
// it alike from what it reads, and:
//
//   - it is balanced: member i gets n/m shards, one more if i < n%m (the
//     oldest members carry the remainder, so a quota never depends on
//     who owns what and does not flip while shards move);
//   - it is sticky: a member keeps the shards it owns, lowest IDs first,
//     up to its quota; only its excess and the shards without a live owner
//     are handed out, lowest ID first to the oldest member under quota;
//   - a shard is never handed to a member it is stuck on: a free shard
//     stuck on some member goes, outside the quotas, to the oldest member
//     it is not stuck on (none if every member is), which then keeps it
//     within its quota and hands its own excess on, so that the group is
//     balanced again a step later.
//
// From a balanced state a join lowers every old member's quota to at most
// what it owns and raises none, so only the new member gains, at most
// ceil(n/(m+1)) shards; a leave raises the others' quotas to at least what
// they own, so only the leaver's shards move (assign_test.go checks both
// over every n and m up to a bound).
func assign(n, m int, owner []int, stuck [][]int) []int {
	target := make([]int, n)
	if m == 0 {
		for s := range target {
			target[s] = -1
		}
		return target
	}
	var stuckOn map[int][]int // shard -> the members it is stuck on
	for i, ids := range stuck {
		for _, s := range ids {
			if s >= 0 && s < n && i < m {
				if stuckOn == nil {
					stuckOn = map[int][]int{}
				}
				stuckOn[s] = append(stuckOn[s], i)
			}
		}
	}
	quota := make([]int, m)
	for i := range quota {
		quota[i] = n / m
		if i < n%m {
			quota[i]++
		}
	}
	kept := make([]int, m)
	for s := range target {
		target[s] = -1
	}
	keep := func(s int) {
		if o := owner[s]; target[s] < 0 && o >= 0 && o < m && kept[o] < quota[o] && !slices.Contains(stuckOn[s], o) {
			target[s] = o
			kept[o]++
		}
	}
	// A member keeps first the shards stuck on another member (that one
	// cannot have them back), then its lowest IDs.
	for _, s := range slices.Sorted(maps.Keys(stuckOn)) {
		keep(s)
	}
	for s := range owner {
		keep(s)
	}
	next := 0
	for s := range target {
		if target[s] >= 0 {
			continue
		}
		if on := stuckOn[s]; on != nil {
			target[s] = firstNotIn(m, on)
			continue
		}
		for kept[next] >= quota[next] {
			next++ // never past m: the quotas have room for every other free shard
		}
		target[s] = next
		kept[next]++
	}
	return target
}

// firstNotIn is the lowest of 0..m-1 not in on, or -1.
func firstNotIn(m int, on []int) int {
	for i := 0; i < m; i++ {
		if !slices.Contains(on, i) {
			return i
		}
	}
	return -1
}

// assigner is assign kept current shard by shard, for a member's loop:
// after a change of one shard's owner it updates the kept sets, the free
// shards and the quotas' room in O(log n) (plus a member's share of its
// own owned list), and target(s) answers assign's result for any shard in
// O(log n + log m). A change of the members, their order or their stuck
// shards rebuilds it (O(n)).
//
// assign's result, restated for one shard at a time: a shard kept by its
// owner (within its quota, the owner's stuck-elsewhere shards first, then
// its lowest IDs) stays; a free shard stuck on some member goes to the
// oldest member it is not stuck on; every other free shard, in ID order,
// fills the quotas' room in join order, so the one of rank r among them
// goes to the first member whose room, summed with the older members',
// exceeds r.
type assigner struct {
	n, m    int
	quota   []int
	owner   []int32         // per shard: a member, or -1
	stuckOn map[int32][]int // per shard stuck on some member: those members
	owned   []ownedSet      // per member
	kept    []bool          // per shard: kept by its owner
	free    fenwick         // per shard: 1 if free and stuck on no member
	room    fenwick         // per member: quota - kept
	// touched collects the shards whose place in assign's result may have
	// changed since the last take: their owner, kept flag or freedom did.
	touched []int32
	// shifts counts the free set's changes since the last take: a shard's
	// rank among the free ones moved by at most that much.
	shifts int
	evals  int // target calls, for tests
}

// ownedSet is one member's owned shards in keeping order: first those
// stuck on another member (kept before any other), then the rest; each
// sorted. Shards stuck on the member itself are never kept.
type ownedSet struct {
	stuck, rest, self []int32
}

func newAssigner(n, m int, owner []int, stuck [][]int) *assigner {
	a := &assigner{n: n, m: m, quota: make([]int, m), owner: make([]int32, n), owned: make([]ownedSet, m), kept: make([]bool, n),
		free: newFenwick(n), room: newFenwick(m)}
	for i := range a.quota {
		a.quota[i] = n / m
		if i < n%m {
			a.quota[i]++
		}
	}
	for i, ids := range stuck {
		for _, s := range ids {
			if s >= 0 && s < n && i < m {
				if a.stuckOn == nil {
					a.stuckOn = map[int32][]int{}
				}
				a.stuckOn[int32(s)] = append(a.stuckOn[int32(s)], i)
			}
		}
	}
	for s := range a.owner {
		a.owner[s] = -1
		if o := owner[s]; o >= 0 && o < m {
			a.owner[s] = int32(o)
			set := &a.owned[o]
			*set.list(a.class(int32(s), o)) = append(*set.list(a.class(int32(s), o)), int32(s)) // in ID order
		}
	}
	freeInit := make([]int, n)
	for s := range freeInit {
		freeInit[s] = 1
	}
	roomInit := make([]int, m)
	for i := range a.owned {
		k := 0
		for _, s := range a.owned[i].order() {
			if k == a.quota[i] {
				break
			}
			a.kept[s] = true
			freeInit[s] = 0
			k++
		}
		roomInit[i] = a.quota[i] - k
	}
	for s := range freeInit {
		if a.stuckOn[int32(s)] != nil {
			freeInit[s] = 0
		}
	}
	a.free.init(freeInit)
	a.room.init(roomInit)
	return a
}

// class is the list of member o's owned set shard s belongs in.
const (
	classStuck = iota // stuck on another member
	classRest
	classSelf // stuck on o itself
)

func (a *assigner) class(s int32, o int) int {
	on := a.stuckOn[s]
	switch {
	case on == nil:
		return classRest
	case slices.Contains(on, o):
		return classSelf
	}
	return classStuck
}

func (o *ownedSet) list(class int) *[]int32 {
	switch class {
	case classStuck:
		return &o.stuck
	case classSelf:
		return &o.self
	}
	return &o.rest
}

// order is the set in keeping order (a copy; for rebuilds and tests).
func (o *ownedSet) order() []int32 { return append(slices.Clone(o.stuck), o.rest...) }

// at is the k-th shard in keeping order.
func (o *ownedSet) at(k int) int32 {
	if k < len(o.stuck) {
		return o.stuck[k]
	}
	return o.rest[k-len(o.stuck)]
}

func (o *ownedSet) keepable() int { return len(o.stuck) + len(o.rest) }

// setOwner records that shard s's owner is now member o (-1: none).
func (a *assigner) setOwner(s int, o int) {
	s32 := int32(s)
	old := int(a.owner[s])
	if old == o {
		return
	}
	a.touch(s32)
	if old >= 0 {
		set := &a.owned[old]
		l := set.list(a.class(s32, old))
		i, _ := slices.BinarySearch(*l, s32)
		*l = slices.Delete(*l, i, i+1)
		a.kept[s] = false
		a.rekeep(old, -1)
	}
	a.owner[s] = int32(o)
	if o >= 0 {
		set := &a.owned[o]
		class := a.class(s32, o)
		l := set.list(class)
		i, _ := slices.BinarySearch(*l, s32)
		*l = slices.Insert(*l, i, s32)
		if class == classRest {
			i += len(set.stuck)
		}
		if class == classSelf {
			i = -1 // never kept
		}
		a.rekeep(o, i)
	}
	a.setFree(s32)
}

// rekeep makes member i's kept shards the first quota of its keeping
// order again after one shard left it or joined it at position p (-1:
// none): the others' flags can differ only around the old and the new
// boundary (their positions moved by one at most).
func (a *assigner) rekeep(i, p int) {
	set := &a.owned[i]
	had := a.quota[i] - a.room.get(i) // kept before the change
	k := min(a.quota[i], set.keepable())
	check := func(j int) {
		if s := set.at(j); a.kept[s] != (j < k) {
			a.kept[s] = j < k
			a.touch(s)
			a.setFree(s)
		}
	}
	if p >= 0 {
		check(p)
	}
	for j := max(0, min(had, k)-2); j < min(set.keepable(), max(had, k)+2); j++ {
		check(j)
	}
	if had != k {
		a.room.add(i, had-k)
	}
}

// setFree puts shard s in or out of the free set, as its state says.
func (a *assigner) setFree(s int32) {
	want := 0
	if !a.kept[s] && a.stuckOn[s] == nil {
		want = 1
	}
	if a.free.get(int(s)) != want {
		a.free.add(int(s), want-a.free.get(int(s)))
		a.shifts++
		a.touch(s)
	}
}

func (a *assigner) touch(s int32) { a.touched = append(a.touched, s) }

// take returns the shards touched and the free set's changes since the
// last take, and forgets them.
func (a *assigner) take() (touched []int32, shifts int) {
	touched, shifts = a.touched, a.shifts
	a.touched, a.shifts = a.touched[len(a.touched):], 0
	return touched, shifts
}

// target is the member assign gives shard s to, or -1.
func (a *assigner) target(s int) int {
	a.evals++
	if o := a.owner[s]; o >= 0 && a.kept[s] {
		return int(o)
	}
	if on := a.stuckOn[int32(s)]; on != nil {
		return firstNotIn(a.m, on)
	}
	if j := a.room.search(a.free.sum(s)); j < a.m {
		return j
	}
	return -1 // never: the room covers every free shard
}

// follow keeps member i's wanted set w (w[s]: assign gives s to i)
// current after the changes take returned, from i's span before them
// (lo, hi); it appends the shards whose flag flipped to out and returns
// it with i's span now. Only the touched shards and the free shards near
// the span's two ends can have flipped: a free shard's rank moved by at
// most shifts, and the ends by what the span says; so the work is
// proportional to the changes, not to n.
func (a *assigner) follow(i int, w []bool, lo, hi int, touched []int32, shifts int, out []int) ([]int, int, int) {
	nlo, nhi := a.span(i)
	k := shifts + max(abs(nlo-lo), abs(nhi-hi)) + 1
	check := func(s int) {
		if want := a.target(s) == i; w[s] != want {
			w[s] = want
			out = append(out, s)
		}
	}
	for _, s := range touched {
		check(int(s))
	}
	for _, end := range [2]int{nlo, nhi} {
		for r := max(0, end-k); r < end+k; r++ {
			s := a.freeAt(r)
			if s < 0 {
				break
			}
			check(s)
		}
	}
	return out, nlo, nhi
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// span is member i's run among the free shards, by rank: [lo, hi).
func (a *assigner) span(i int) (lo, hi int) { return a.room.sum(i), a.room.sum(i + 1) }

// freeAt is the free shard of rank r, or -1.
func (a *assigner) freeAt(r int) int {
	if r < 0 {
		return -1
	}
	if s := a.free.search(r); s < a.n {
		return s
	}
	return -1
}

// fenwick is a binary indexed tree of counts: sums of a prefix and the
// first index whose prefix sum exceeds a rank, each in O(log n).
type fenwick struct {
	t    []int // 1-based
	vals []int
	top  int // the highest power of two <= len
}

func newFenwick(n int) fenwick {
	f := fenwick{t: make([]int, n+1), vals: make([]int, n), top: 1}
	for f.top*2 <= n {
		f.top *= 2
	}
	return f
}

// init sets every value at once, in O(n).
func (f *fenwick) init(vals []int) {
	copy(f.vals, vals)
	for i := range f.t {
		f.t[i] = 0
	}
	for i, v := range vals {
		j := i + 1
		f.t[j] += v
		if p := j + j&-j; p < len(f.t) {
			f.t[p] += f.t[j]
		}
	}
}

func (f *fenwick) get(i int) int { return f.vals[i] }

func (f *fenwick) add(i, d int) {
	f.vals[i] += d
	for j := i + 1; j < len(f.t); j += j & -j {
		f.t[j] += d
	}
}

// sum is the sum of the values below index i.
func (f *fenwick) sum(i int) int {
	s := 0
	for j := i; j > 0; j -= j & -j {
		s += f.t[j]
	}
	return s
}

// search is the first index i whose sum up to and including i exceeds r
// (len if none): with 0/1 values, the element of rank r.
func (f *fenwick) search(r int) int {
	pos := 0
	for step := f.top; step > 0; step /= 2 {
		if next := pos + step; next < len(f.t) && f.t[next] <= r {
			pos = next
			r -= f.t[next]
		}
	}
	return pos
}
