package shard

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
)

// The keys of a group, under its prefix /<ns>/v1/shard/<escaped group>/:
// m/<escaped member> (the member, on its lease, valued memberValue) and
// s/<id, 5 digits>/<lease id hex> (one per shard and contender, as a
// mutex's, valued the member's name).
const (
	memberSeg = "m/"
	shardSeg  = "s/"
)

// GroupPrefix is the etcd prefix of every key of group in namespace ns.
func GroupPrefix(ns, group string) string { return keys.Prefix(ns, keys.Shard, group) }

func memberKey(prefix, member string) string { return prefix + memberSeg + keys.Escape(member) }

func shardPrefix(prefix string, id int) string { return fmt.Sprintf("%s%s%05d/", prefix, shardSeg, id) }

// memberValue is what a member's key carries.
type memberValue struct {
	Count    int    `json:"count"`
	Identity string `json:"identity,omitempty"`
	// Stuck are the shards whose fn outlived its drain on this member and
	// still runs: the member cannot take them, and the assignment gives
	// them to others.
	Stuck []int `json:"stuck,omitempty"`
}

// parsed is one key of a group taken apart; kind 0 is a key this package
// does not know (ignored).
type parsed struct {
	kind   byte // 'm' or 's'
	member string
	shard  int
}

func parseKey(prefix, key string) parsed {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return parsed{}
	}
	if name, ok := strings.CutPrefix(rest, memberSeg); ok {
		m, err := keys.Unescape(name)
		if err != nil || m == "" {
			return parsed{}
		}
		return parsed{kind: 'm', member: m}
	}
	if rest, ok := strings.CutPrefix(rest, shardSeg); ok {
		id, _, ok := strings.Cut(rest, "/")
		n, err := strconv.Atoi(id)
		if !ok || err != nil || n < 0 || len(id) != 5 {
			return parsed{}
		}
		return parsed{kind: 's', shard: n}
	}
	return parsed{}
}

// member is a live member as the group's keys show it.
type member struct {
	name  string
	lease clientv3.LeaseID
	rev   int64 // its key's CreateRevision: the join order
	value memberValue
}

// contender is one key of a shard's queue.
type contender struct {
	key    string
	member string
	lease  clientv3.LeaseID
	rev    int64
}

// view is the group's keys at a revision, kept up to date from a watch.
type view struct {
	prefix  string
	count   int
	members map[string]member
	queues  [][]contender // per shard, in CreateRevision order
	rev     int64
}

func newView(prefix string, count int) *view {
	return &view{prefix: prefix, count: count, members: map[string]member{}, queues: make([][]contender, count)}
}

func (v *view) reset(kvs []*mvccpb.KeyValue, rev int64) {
	clear(v.members)
	for i := range v.queues {
		v.queues[i] = v.queues[i][:0]
	}
	for _, kv := range kvs {
		v.put(kv)
	}
	v.rev = rev
}

// put applies a put; it returns the shard whose queue changed, or -1.
func (v *view) put(kv *mvccpb.KeyValue) int {
	p := parseKey(v.prefix, string(kv.Key))
	switch {
	case p.kind == 'm':
		var mv memberValue
		_ = json.Unmarshal(kv.Value, &mv) // a bad value counts as count 0: a mismatch
		v.members[p.member] = member{name: p.member, lease: clientv3.LeaseID(kv.Lease), rev: kv.CreateRevision, value: mv}
	case p.kind == 's' && p.shard < v.count:
		q := v.queues[p.shard]
		c := contender{key: string(kv.Key), member: string(kv.Value), lease: clientv3.LeaseID(kv.Lease), rev: kv.CreateRevision}
		for i := range q {
			if q[i].key == c.key {
				q[i] = c
				return p.shard
			}
		}
		i := len(q)
		for i > 0 && q[i-1].rev > c.rev {
			i--
		}
		v.queues[p.shard] = append(q[:i], append([]contender{c}, q[i:]...)...)
		return p.shard
	}
	return -1
}

// del applies a deletion; it returns the shard whose queue changed, or -1.
func (v *view) del(key string) int {
	p := parseKey(v.prefix, key)
	switch {
	case p.kind == 'm':
		delete(v.members, p.member)
	case p.kind == 's' && p.shard < v.count:
		q := v.queues[p.shard]
		for i := range q {
			if q[i].key == key {
				v.queues[p.shard] = append(q[:i], q[i+1:]...)
				return p.shard
			}
		}
	}
	return -1
}

// head is the shard's owner key, if any.
func (v *view) head(s int) (contender, bool) {
	if q := v.queues[s]; len(q) > 0 {
		return q[0], true
	}
	return contender{}, false
}

// has says whether key is in shard s's queue.
func (v *view) has(s int, key string) bool {
	for _, c := range v.queues[s] {
		if c.key == key {
			return true
		}
	}
	return false
}

// order is the live members in join order.
func (v *view) order() []member {
	out := make([]member, 0, len(v.members))
	for _, m := range v.members {
		out = append(out, m)
	}
	sortMembers(out)
	return out
}

// target is the assignment at this view: the member each shard should go
// to ("" for none).
func (v *view) target() []string {
	ms := v.order()
	names := make(map[string]int, len(ms))
	for i, m := range ms {
		names[m.name] = i
	}
	owner := make([]int, v.count)
	for s := range owner {
		owner[s] = -1
		if h, ok := v.head(s); ok {
			// An owner counts as the member only on the member's lease: a key
			// left on an earlier lease of that name is not its own.
			if i, ok := names[h.member]; ok && ms[i].lease == h.lease {
				owner[s] = i
			}
		}
	}
	var stuck [][]int
	for i, m := range ms {
		if len(m.value.Stuck) > 0 {
			if stuck == nil {
				stuck = make([][]int, len(ms))
			}
			stuck[i] = m.value.Stuck
		}
	}
	out := make([]string, v.count)
	for s, i := range assign(v.count, len(ms), owner, stuck) {
		if i >= 0 {
			out[s] = ms[i].name
		}
	}
	return out
}
