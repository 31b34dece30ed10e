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
