package shard_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/session"
	"github.com/batonhq/baton/shard"
)

// ownedByLive waits, observing, until the group's live members are
// members (any, if none are given) and every shard is owned by one of
// them; it returns that state.
func ownedByLive(t *testing.T, g *shard.Group, within time.Duration, members ...string) shard.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last shard.State
	for st := range g.Observe(ctx) {
		last = st
		live := map[string]bool{}
		for _, m := range st.Members {
			live[m] = true
		}
		all := len(members) == 0 || slices.Equal(st.Members, members)
		for _, o := range st.Owners {
			all = all && live[o.Member]
		}
		if all {
			return st
		}
	}
	unowned := []int{}
	for _, o := range last.Owners {
		if o.Member == "" {
			unowned = append(unowned, o.Shard)
		}
	}
	t.Fatalf("within %v, never every shard owned by a live member: members %v, owners %v, unowned %v", within, last.Members, counts(last), unowned)
	return last
}

// TestStuckShardGoesToALiveMember: a member whose fn ignores its Context
// keeps running it after the drain timeout released the shard, and never
// takes that shard again while it runs. After a loss of its lease it
// rejoins as the youngest member, and the balance gave it back the very
// shard whose fn is stuck: the shard stayed unowned although another
// member was live. The stuck member now tells the group (its member key
// names the shard), the others keep or take that shard (the stuck member
// gets another), and once the fn returns the group stays balanced.
func TestStuckShardGoesToALiveMember(t *testing.T) {
	cli := client(t)
	const n = 2
	sess, err := session.New(cli, session.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	log := &eventLog{}
	stuck := make(chan struct{})
	var stuckID atomic.Int64 // the first shard a drains: its fn ignores its Context
	stuckID.Store(-1)
	ga := newGroup(t, cli, "stuck", n, shard.WithSession(sess), shard.WithDrainTimeout(300*time.Millisecond))
	start(t, ga, "a", log, func(ctx context.Context, s *shard.Shard) {
		if stuckID.CompareAndSwap(-1, int64(s.ID())) {
			<-stuck
		}
	})
	settled(t, ga, "a")
	gb := newGroup(t, cli, "stuck", n)
	var armed atomic.Bool
	var acted atomic.Int64
	var moved sync.Map // shards b gave up after a rejoined
	shard.SetHooks(gb, shard.Hooks{
		Moving: func(id int) {
			if armed.Load() {
				moved.Store(id, true)
			}
		},
		Acted: func(rev int64) { acted.Store(rev) },
	})
	start(t, gb, "b", log, nil)
	settled(t, gb, "a", "b") // a's fn of the shard that moved is stuck from here on
	t.Cleanup(func() {
		select {
		case <-stuck:
		default:
			close(stuck)
		}
	})

	// a's lease ends under it: it loses its other shard (that fn returns)
	// and rejoins as the youngest member; the balance would give it the
	// shard whose fn is stuck.
	if _, err := cli.Revoke(etcdtest.Context(t, 5*time.Second), sess.Lease()); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	st := ownedByLive(t, gb, 10*time.Second, "a", "b")
	// b's loop acted on that state: it kept every shard.
	waitFor(t, func() bool { return acted.Load() >= st.Revision }, "b's loop to act on the state")
	id := int(stuckID.Load())
	if _, ok := moved.Load(id); ok {
		t.Errorf("b gave shard %d up after a rejoined, while a's fn of it was stuck: it stays unowned", id)
	}
	owners, err := gb.Owners(etcdtest.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if o := owners[id]; o.Member != "b" {
		t.Errorf("while a's fn of shard %d is stuck: it is owned by %q, want b", id, o.Member)
	}
	for _, e := range log.snapshot() {
		if e.member == "a" && e.kind == "return" && e.shard == id {
			t.Fatalf("a's fn of shard %d returned while stuck", e.shard)
		}
	}
	close(stuck) // the fn returns: the group is balanced, every shard owned
	settled(t, gb, "a", "b")
}

// TestRejoinWaitsForTheLostShardsFns: a member that lost its lease joins
// again only once its fns of the lost shards returned (or their drain
// timed out, and it names them stuck), so that the balance never gives it
// back a shard whose fn still runs: meanwhile the member that took them
// keeps them. Joining again at once (its fns still draining, a long drain
// timeout: not named stuck yet), it was given such a shard back by the
// balance: its owner gave it up, and it stayed unowned until the drain
// timed out.
func TestRejoinWaitsForTheLostShardsFns(t *testing.T) {
	cli := client(t)
	const n = 2
	log := &eventLog{}
	gb := newGroup(t, cli, "stuck-rejoin", n)
	var armed atomic.Bool
	var acted atomic.Int64
	var moved sync.Map
	shard.SetHooks(gb, shard.Hooks{
		Moving: func(id int) {
			if armed.Load() {
				moved.Store(id, true)
			}
		},
		Acted: func(rev int64) { acted.Store(rev) },
	})
	start(t, gb, "b", log, nil)
	settled(t, gb, "b")
	sess, err := session.New(cli, session.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	stuck := make(chan struct{})
	ga := newGroup(t, cli, "stuck-rejoin", n, shard.WithSession(sess), shard.WithDrainTimeout(20*time.Second))
	var rejoined atomic.Int64 // when a started to join again (0: not yet)
	shard.SetHooks(ga, shard.Hooks{Rejoining: func() { rejoined.CompareAndSwap(0, time.Now().UnixNano()) }})
	start(t, ga, "a", log, func(ctx context.Context, s *shard.Shard) {
		if errors.Is(context.Cause(ctx), shard.ErrLost) {
			<-stuck // ignores a loss until the test lets it go
		}
	})
	t.Cleanup(func() { // before a's Run is stopped, which waits for its fns
		select {
		case <-stuck:
		default:
			close(stuck)
		}
	})
	st := settled(t, gb, "b", "a")
	lost := -1 // a's shard, whose fn will ignore the loss
	for _, o := range st.Owners {
		if o.Member == "a" {
			lost = o.Shard
		}
	}
	armed.Store(true)
	if _, err := cli.Revoke(etcdtest.Context(t, 5*time.Second), sess.Lease()); err != nil {
		t.Fatal(err)
	}
	// b takes a's shard; b's loop acts on that state.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for st = range gb.Observe(ctx) {
		if st.Owners[lost].Member == "b" {
			break
		}
	}
	if st.Owners[lost].Member != "b" {
		t.Fatalf("b never took shard %d after a's loss: %v", lost, counts(st))
	}
	waitFor(t, func() bool { return acted.Load() >= st.Revision }, "b's loop to act on it")
	aEnded := func() bool {
		for _, e := range log.snapshot() {
			if e.member == "a" && e.kind == "ended" && e.shard == lost {
				return true
			}
		}
		return false
	}
	waitFor(t, aEnded, "a's fn of the lost shard to see its Context end") // its loop gave it up: it has heard of the loss
	if rejoined.Load() != 0 {
		t.Errorf("a started to join again while its fn of shard %d still ran", lost)
	}
	owners, err := gb.Owners(etcdtest.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if o := owners[lost]; o.Member != "b" {
		t.Errorf("while a's fn of shard %d still runs: it is owned by %q, want b", lost, o.Member)
	}
	if _, ok := moved.Load(lost); ok {
		t.Errorf("b gave shard %d up while a's fn of it still ran: it bounced", lost)
	}
	returned := time.Now()
	close(stuck) // a's fn returns: a joins again, and the group balances
	settled(t, gb, "b", "a")
	if r := rejoined.Load(); r == 0 || r < returned.UnixNano() {
		t.Errorf("a joined again at %v, before its fn returned (%v)", time.Unix(0, r), returned)
	}
}
