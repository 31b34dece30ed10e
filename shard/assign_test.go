package shard

import (
	"math/rand/v2"
	"testing"
)

// settle applies assign until the owners are its answer, as the members
// do once membership is stable, and returns the balanced owners.
func settle(t *testing.T, n, m int, owner []int) []int {
	t.Helper()
	target := assign(n, m, owner)
	if again := assign(n, m, target); !equal(again, target) {
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
	for _, o := range assign(3, 0, []int{-1, -1, -1}) {
		if o != -1 {
			t.Fatal("a shard was assigned with no members")
		}
	}
}
