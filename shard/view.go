package shard

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/retry"
)

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
		v.members[p.member] = newMember(p.member, kv)
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

// watch follows the group's keys from the view's revision on.
func (e *run) watch() {
	e.unwatch()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(e.ctx))
	e.wcancel = cancel
	e.wch = e.g.cli.Watch(wctx, e.g.prefix, clientv3.WithPrefix(), clientv3.WithRev(e.v.rev+1))
}

func (e *run) unwatch() {
	if e.wcancel != nil {
		e.wcancel()
		e.wcancel = nil
	}
}

// follow takes one watch response into the view; false when the watch
// broke (it is read again and watched anew, or dropped if Run ends).
func (e *run) follow(wr clientv3.WatchResponse, ok bool) bool {
	if ok && wr.Err() == nil {
		e.apply(wr)
		return true
	}
	if e.leaving {
		e.unwatch()
		e.wch = nil
	} else if e.reread() {
		e.watch()
	}
	return false
}

// reread reads the group after a broken watch; false when Run ends.
func (e *run) reread() bool {
	v, err := e.g.read(e.ctx)
	if err != nil {
		if e.ctx.Err() == nil && retry.Permanent(err) {
			e.fail(fmt.Errorf("read group %q: %w", e.g.name, err))
		}
		e.leave()
		return false
	}
	e.v = v
	clear(e.vacancies)
	e.a = nil // rebuilt at the next reconcile
	return true
}

// apply takes one watch response into the view, and notes the shards
// whose owner's key went (for the move metrics, moves.go).
func (e *run) apply(wr clientv3.WatchResponse) {
	var vacated []gone
	left := map[string]int64{}
	for _, ev := range wr.Events {
		key := string(ev.Kv.Key)
		if ev.Type == mvccpb.DELETE {
			p := parseKey(e.v.prefix, key)
			if p.kind == 'm' {
				if m, ok := e.v.members[p.member]; ok {
					left[leftKey(p.member, m.lease)] = ev.Kv.ModRevision
				}
			}
			if p.kind == 's' && p.shard < e.v.count {
				if h, ok := e.v.head(p.shard); ok && h.key == key {
					vacated = append(vacated, gone{p.shard, h, ev.Kv.ModRevision})
				}
			}
			e.changed(e.v.del(key), p.kind)
			continue
		}
		s := e.v.put(ev.Kv)
		e.changed(s, parseKey(e.v.prefix, key).kind)
		if s >= 0 {
			if h, ok := e.v.head(s); ok && h.key == key && e.leases[h.lease] == nil {
				e.taken(s) // another member took it
			}
		}
	}
	e.v.rev = wr.Header.Revision
	e.vacated(vacated, left)
}
