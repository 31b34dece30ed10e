package harness

import (
	"context"
	"errors"
	"time"

	"github.com/batonhq/baton/shard"
)

// Balanced waits, by observing g, until every shard is owned by one of
// members, members are the group's live members, and each owns floor or
// ceil of N/M: the shard package's balance. It returns the balanced State
// (or the last one seen, with an error, after timeout).
func Balanced(ctx context.Context, g *shard.Group, members []string, timeout time.Duration) (shard.State, error) {
	return BalancedSeen(ctx, g, members, timeout, nil)
}

// BalancedSeen is Balanced that also gives seen every State, with when it
// arrived.
func BalancedSeen(ctx context.Context, g *shard.Group, members []string, timeout time.Duration, seen func(shard.State, time.Time)) (shard.State, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	want := make(map[string]bool, len(members))
	for _, m := range members {
		want[m] = true
	}
	var last shard.State
	for st := range g.Observe(ctx) {
		last = st
		if seen != nil {
			seen(st, time.Now())
		}
		if st.Err != nil {
			return st, st.Err
		}
		if len(st.Members) != len(members) {
			continue
		}
		c := make(map[string]int, len(members))
		ok := true
		for _, o := range st.Owners {
			ok = ok && want[o.Member]
			c[o.Member]++
		}
		n, m := len(st.Owners), len(members)
		for _, name := range members {
			ok = ok && (c[name] == n/m || c[name] == (n+m-1)/m)
		}
		if ok {
			return st, nil
		}
	}
	return last, errors.New("the group did not balance in time")
}
