package shard

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// settle applies assign until the owners are its answer, as the members
// do once membership is stable, and returns the balanced owners.
func settle(t *testing.T, n, m int, owner []int) []int {
	t.Helper()
	target := assign(n, m, owner, nil)
	if again := assign(n, m, target, nil); !equal(again, target) {
		t.Fatalf("n=%d m=%d: the assignment is not a fixed point of itself", n, m)
	}
	return target
}

func equal(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func counts(m int, owner []int) []int {
	c := make([]int, m)
	for _, o := range owner {
		if o >= 0 {
			c[o]++
		}
	}
	return c
}

func checkBalanced(t *testing.T, n, m int, owner []int) {
	t.Helper()
	for i, c := range counts(m, owner) {
		if c != n/m && c != (n+m-1)/m {
			t.Fatalf("n=%d m=%d: member %d owns %d, want %d or %d", n, m, i, c, n/m, (n+m-1)/m)
		}
	}
	for s, o := range owner {
		if o < 0 {
			t.Fatalf("n=%d m=%d: shard %d has no owner", n, m, s)
		}
	}
}

// TestAssignBalancedAndStickyOnJoinAndLeave proves rules 3 and 4 of the
// assignment itself, over every count and membership up to a bound: from
// a balanced state, a join moves at most ceil(n/(m+1)) shards, all to the
// newcomer; a leave (of any member) moves only the leaver's shards; the
// result is balanced and a fixed point.
func TestAssignBalancedAndStickyOnJoinAndLeave(t *testing.T) {
	for n := 1; n <= 70; n++ {
		for m := 1; m <= 12; m++ {
			owner := make([]int, n)
			for s := range owner {
				owner[s] = -1
			}
			owner = settle(t, n, m, owner)
			checkBalanced(t, n, m, owner)

			// A join: member m is the youngest.
			joined := settle(t, n, m+1, owner)
			checkBalanced(t, n, m+1, joined)
			moved := 0
			for s := range owner {
				if joined[s] != owner[s] {
					moved++
					if joined[s] != m {
						t.Fatalf("n=%d m=%d join: shard %d moved from %d to %d, not to the newcomer", n, m, s, owner[s], joined[s])
					}
				}
			}
			if limit := (n + m) / (m + 1); moved > limit {
				t.Fatalf("n=%d m=%d join: %d shards moved, at most %d allowed", n, m, moved, limit)
			}

			// Each member in turn leaves: the others keep their join order.
			for gone := 0; gone < m && m > 1; gone++ {
				rest := make([]int, n)
				for s, o := range owner {
					switch {
					case o == gone:
						rest[s] = -1
					case o > gone:
						rest[s] = o - 1
					default:
						rest[s] = o
					}
				}
				after := settle(t, n, m-1, rest)
				checkBalanced(t, n, m-1, after)
				for s := range rest {
					if rest[s] >= 0 && after[s] != rest[s] {
						t.Fatalf("n=%d m=%d leave of %d: shard %d moved between two members that stay", n, m, gone, s)
					}
				}
			}
		}
	}
}

// TestAssignConvergesFromAnyOwners: from arbitrary owners (a state in the
// middle of moves), one step reaches a balanced fixed point, and no shard
// whose owner is within its quota moves.
func TestAssignConvergesFromAnyOwners(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n, m := 1+r.IntN(300), 1+r.IntN(20)
		owner := make([]int, n)
		for s := range owner {
			owner[s] = r.IntN(m+1) - 1
		}
		target := settle(t, n, m, owner)
		checkBalanced(t, n, m, target)
	}
}

// TestAssignWithNoMembers leaves every shard unassigned.
func TestAssignWithNoMembers(t *testing.T) {
	for _, o := range assign(3, 0, []int{-1, -1, -1}, nil) {
		if o != -1 {
			t.Fatal("a shard was assigned with no members")
		}
	}
}

// TestAssignNeverGivesAMemberAShardStuckOnIt: from arbitrary owners and
// shards stuck on some members, repeated steps reach a fixed point within
// three; no shard is ever given to a member it is stuck on, every shard
// that some member can take is given, and a member owns its quota, give
// or take the number of stuck shards (balanced within one when none is
// stuck).
func TestAssignNeverGivesAMemberAShardStuckOnIt(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		n, m := 1+r.IntN(60), 1+r.IntN(8)
		owner := make([]int, n)
		for s := range owner {
			owner[s] = r.IntN(m+1) - 1
		}
		stuck := make([][]int, m)
		nstuck := map[int]bool{}
		for range r.IntN(4) {
			s, i := r.IntN(n), r.IntN(m)
			stuck[i] = append(stuck[i], s)
			nstuck[s] = true
		}
		on := func(s, i int) bool { return slices.Contains(stuck[i], s) }
		target, steps := owner, 0
		for ; steps < 4; steps++ {
			next := assign(n, m, target, stuck)
			for s, i := range next {
				if i >= 0 && on(s, i) {
					t.Fatalf("n=%d m=%d stuck %v: shard %d given to member %d, stuck on it", n, m, stuck, s, i)
				}
				all := true
				for j := 0; j < m; j++ {
					all = all && on(s, j)
				}
				if i < 0 && !all {
					t.Fatalf("n=%d m=%d stuck %v: shard %d given to no one", n, m, stuck, s)
				}
			}
			if equal(next, target) {
				break
			}
			target = next
		}
		if steps > 3 {
			t.Fatalf("n=%d m=%d stuck %v: no fixed point within 3 steps from %v", n, m, stuck, owner)
		}
		for i, c := range counts(m, target) {
			q := n / m
			if i < n%m {
				q++
			}
			if c < q-len(nstuck) || c > q+len(nstuck) {
				t.Fatalf("n=%d m=%d stuck %v: member %d owns %d at the fixed point, quota %d", n, m, stuck, i, c, q)
			}
		}
	}
}

// TestAssignerIsAssign: the incremental assigner answers assign's result
// for every shard after every change of an owner, from arbitrary owners,
// members and stuck shards, and each member's wanted set, kept current by
// follow from the touched shards alone, is the set assign gives it.
func TestAssignerIsAssign(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 400 {
		n, m := 1+r.IntN(150), 1+r.IntN(9)
		owner := make([]int, n)
		for s := range owner {
			owner[s] = r.IntN(m+1) - 1
		}
		var stuck [][]int
		if trial%3 == 0 {
			stuck = make([][]int, m)
			for range r.IntN(4) {
				i := r.IntN(m)
				stuck[i] = append(stuck[i], r.IntN(n))
			}
		}
		a := newAssigner(n, m, owner, stuck)
		a.take()
		w := make([][]bool, m)
		spans := make([][2]int, m)
		for i := range w {
			w[i] = make([]bool, n)
			for s := range w[i] {
				w[i][s] = a.target(s) == i
			}
			spans[i][0], spans[i][1] = a.span(i)
		}
		for step := range 60 {
			for range 1 + r.IntN(4) {
				s, o := r.IntN(n), r.IntN(m+1)-1
				if r.IntN(3) == 0 {
					o = assign(n, m, owner, stuck)[s] // a move the assignment asked for
				}
				owner[s] = o
				a.setOwner(s, o)
			}
			want := assign(n, m, owner, stuck)
			for s := range want {
				if got := a.target(s); got != want[s] {
					t.Fatalf("trial %d step %d (n=%d m=%d stuck %v): shard %d: assigner %d, assign %d", trial, step, n, m, stuck, s, got, want[s])
				}
			}
			touched, shifts := a.take()
			for i := range w {
				_, spans[i][0], spans[i][1] = a.follow(i, w[i], spans[i][0], spans[i][1], touched, shifts, nil)
				for s := range want {
					if w[i][s] != (want[s] == i) {
						t.Fatalf("trial %d step %d (n=%d m=%d): member %d's wanted set says %v for shard %d, assign gives it to %d", trial, step, n, m, i, w[i][s], s, want[s])
					}
				}
			}
		}
	}
}

// TestAssignerWorkFollowsTheChanges: in a group of 16,384 shards over 50
// members, one owner's change costs a member's follow a handful of
// evaluations, not one per shard: a cold start's every acquisition and
// release is such a change, seen by every member.
func TestAssignerWorkFollowsTheChanges(t *testing.T) {
	const n, m = 16384, 50
	r := rand.New(rand.NewPCG(7, 8))
	owner := make([]int, n)
	for s := range owner {
		owner[s] = -1 // a cold start: nothing owned yet
	}
	a := newAssigner(n, m, owner, nil)
	a.take()
	w := make([]bool, n)
	for s := range w {
		w[s] = a.target(s) == 7
	}
	lo, hi := a.span(7)
	most := 0
	for range 5000 {
		s := r.IntN(n)
		o := r.IntN(m+1) - 1
		if r.IntN(2) == 0 {
			o = a.target(s) // the move the assignment asks for
		}
		a.setOwner(s, o)
		touched, shifts := a.take()
		a.evals = 0
		_, lo, hi = a.follow(7, w, lo, hi, touched, shifts, nil)
		most = max(most, a.evals)
	}
	if most > 32 {
		t.Fatalf("a change of one owner cost up to %d evaluations of member 7's follow in a group of %d shards, want a handful", most, n)
	}
	t.Logf("one owner's change: at most %d evaluations in a group of %d shards", most, n)
}
