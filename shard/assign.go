package shard

// assign returns the member each of n shards should be owned by, given m
// live members in join order (0 joined first) and each shard's current
// owner (an index into the members, or -1: none, or a member that left).
// Every member computes it alike from what it reads, and:
//
//   - it is balanced: member i gets n/m shards, one more if i < n%m (the
//     oldest members carry the remainder, so a quota never depends on
//     who owns what and does not flip while shards move);
//   - it is sticky: a member keeps the shards it owns, lowest IDs first,
//     up to its quota; only its excess and the shards without a live owner
//     are handed out, lowest ID first to the oldest member under quota.
//
// From a balanced state a join lowers every old member's quota to at most
// what it owns and raises none, so only the new member gains, at most
// ceil(n/(m+1)) shards; a leave raises the others' quotas to at least what
// they own, so only the leaver's shards move (assign_test.go checks both
// over every n and m up to a bound).
func assign(n, m int, owner []int) []int {
	target := make([]int, n)
	if m == 0 {
		for s := range target {
			target[s] = -1
		}
		return target
	}
	quota := make([]int, m)
	for i := range quota {
		quota[i] = n / m
		if i < n%m {
			quota[i]++
		}
	}
	kept := make([]int, m)
	for s, o := range owner {
		target[s] = -1
		if o >= 0 && o < m && kept[o] < quota[o] {
			target[s] = o
			kept[o]++
		}
	}
	next := 0
	for s := range target {
		if target[s] >= 0 {
			continue
		}
		for kept[next] >= quota[next] {
			next++
		}
		target[s] = next
		kept[next]++
	}
	return target
}
