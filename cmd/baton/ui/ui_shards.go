package ui

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/shard"
)

// The shards section: each shard group of the namespace, as shard.Inspect
// reads it (the library's rule for who owns what, not a copy of it). The
// groups are the ones the namespace watch has keys of; an event on a
// group's keys marks it to be read again, and one goroutine reads the
// marked groups, at most once per uiShardsEvery, so that a burst of moves
// costs a read per group, not one per event. A move is a shard whose owner
// changed, between two of these reads, from one member to another (an
// unowned stretch between them included): the page sees only the moves
// that happen while it runs, and two moves between reads as one.

// Bounds of the shards section.
const (
	uiMaxMoves     = 20 // newest moves kept, all groups together
	uiShardsEvery  = 100 * time.Millisecond
	uiUnownedShown = 16 // ID ranges listed per group; the rest counted
)

// ShardGroup is one shard group as the page shows it: its live members and
// how many shards each owns, and the unowned shards (keyspace.ShardsView,
// as baton shards --members prints it).
type ShardGroup struct {
	keyspace.ShardsJSON
	// UnownedIDs lists the unowned shards' IDs as ranges ("0-3, 7"), the
	// first uiUnownedShown of them, then how many more.
	UnownedIDs string `json:"unowned_ids,omitempty"`
	// Problem is why the group's last read failed; what is shown is the
	// read before.
	Problem string `json:"problem,omitempty"`
}

// ShardMove is a shard whose owner the page saw change.
type ShardMove struct {
	Group string `json:"group"`
	Shard int    `json:"shard"`
	From  string `json:"from"`
	To    string `json:"to"`
	// At is when the page read the new owner, at Revision.
	At       time.Time `json:"at"`
	Revision int64     `json:"revision"`
}

// uiShards is the State's shard groups; guarded by State.mu.
type uiShards struct {
	wake   chan struct{} // a group is marked
	groups map[string]*uiShardGroup
	dirty  map[string]bool
	moves  []ShardMove
}

type uiShardGroup struct {
	view ShardGroup
	read bool           // view holds a read
	last map[int]string // each shard's last owner seen
}

// init makes the zero uiShards usable; called with mu held.
func (u *uiShards) init() *uiShards {
	if u.wake == nil {
		u.wake = make(chan struct{}, 1)
		u.groups = map[string]*uiShardGroup{}
		u.dirty = map[string]bool{}
	}
	return u
}

func (u *uiShards) mark(group string) {
	u.init()
	u.dirty[group] = true
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// noteShard marks the group of key, if it is a shard group's, to be read
// again; called with mu held, for every key the namespace watch applies.
func (s *State) noteShard(key string) {
	if g, ok := keyspace.ShardGroupOf(s.ns, key); ok {
		s.shards.mark(g)
	}
}

// reloadShards marks every group known or in kvs, after a fresh read of
// the namespace: a group may have gone while the watch was down.
func (s *State) reloadShards(kvs []*mvccpb.KeyValue) {
	for g := range s.shards.init().groups {
		s.shards.mark(g)
	}
	for _, kv := range kvs {
		s.noteShard(string(kv.Key))
	}
}

// inspectShards reads the marked groups until ctx ends.
func (s *State) inspectShards(ctx context.Context) {
	s.mu.Lock()
	wake := s.shards.init().wake
	s.mu.Unlock()
	for attempt := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
		s.mu.Lock()
		groups := make([]string, 0, len(s.shards.dirty))
		for g := range s.shards.dirty {
			groups = append(groups, g)
		}
		clear(s.shards.dirty)
		s.mu.Unlock()
		slices.Sort(groups)
		failed := false
		for _, g := range groups {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := shard.Inspect(rctx, s.cli, g, shard.WithNamespace(s.ns))
			cancel()
			if ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			if err != nil {
				failed = true
				s.shardsFailed(g, err)
			} else {
				s.shardsRead(g, st)
			}
			s.mu.Unlock()
		}
		wait := uiShardsEvery
		if failed {
			wait = max(wait, cmdutil.WaitBackoff(attempt))
			attempt++
		} else {
			attempt = 0
		}
		if !cmdutil.Sleep(ctx, wait) {
			return
		}
	}
}

// shardsFailed keeps the group's last read and says why the new one
// failed; the group is read again after a backoff. Called with mu held.
func (s *State) shardsFailed(group string, err error) {
	g := s.shards.groups[group]
	if g == nil {
		g = &uiShardGroup{view: ShardGroup{ShardsJSON: keyspace.ShardsJSON{Group: group, Members: []keyspace.MemberJSON{}}}, last: map[int]string{}}
		s.shards.groups[group] = g
	}
	g.view.Problem = "read shard group: " + err.Error()
	s.shards.mark(group)
	s.notify()
}

// shardsRead takes a group's new State: the moves since the last, and
// what the page shows. Called with mu held.
func (s *State) shardsRead(group string, st shard.State) {
	if len(st.Members) == 0 && len(st.Owners) == 0 {
		delete(s.shards.groups, group) // no key left: the group is gone
		s.notify()
		return
	}
	g := s.shards.groups[group]
	if g == nil {
		g = &uiShardGroup{last: map[int]string{}}
		s.shards.groups[group] = g
	}
	if g.read && st.Revision < g.view.Revision {
		return
	}
	now := s.now()
	for _, o := range st.Owners {
		if o.Member == "" {
			continue
		}
		if from, ok := g.last[o.Shard]; ok && from != o.Member {
			s.shards.moves = append(s.shards.moves, ShardMove{Group: group, Shard: o.Shard, From: from, To: o.Member, At: now, Revision: st.Revision})
		}
		g.last[o.Shard] = o.Member
	}
	for id := range g.last {
		if id >= len(st.Owners) {
			delete(g.last, id)
		}
	}
	if over := len(s.shards.moves) - uiMaxMoves; over > 0 {
		s.shards.moves = append([]ShardMove(nil), s.shards.moves[over:]...)
	}
	v := keyspace.ShardsView(group, st, nil, now)
	v.Owners = nil // the page shows counts; baton shards GROUP lists each shard
	g.view, g.read = ShardGroup{ShardsJSON: v, UnownedIDs: unownedIDs(st.Owners)}, true
	s.notify()
}

// addShards puts the groups and moves into snap; called with mu held.
func (s *State) addShards(snap *Snapshot) {
	snap.Shards, snap.ShardMoves = []ShardGroup{}, slices.Clone(s.shards.moves)
	if snap.ShardMoves == nil {
		snap.ShardMoves = []ShardMove{}
	}
	for _, g := range s.shards.groups {
		if g.read || g.view.Problem != "" {
			snap.Shards = append(snap.Shards, g.view)
		}
	}
	slices.SortFunc(snap.Shards, func(a, b ShardGroup) int { return strings.Compare(a.Group, b.Group) })
}

// unownedIDs writes the unowned shards' IDs as ranges.
func unownedIDs(owners []shard.Owner) string {
	var b strings.Builder
	ranges, more := 0, 0
	for i := 0; i < len(owners); i++ {
		if owners[i].Member != "" {
			continue
		}
		j := i
		for j+1 < len(owners) && owners[j+1].Member == "" {
			j++
		}
		if ranges == uiUnownedShown {
			more += j - i + 1
		} else {
			if ranges > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Itoa(i))
			if j > i {
				b.WriteString("-" + strconv.Itoa(j))
			}
			ranges++
		}
		i = j
	}
	if more > 0 {
		b.WriteString(", and " + strconv.Itoa(more) + " more")
	}
	return b.String()
}
