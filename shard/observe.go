package shard

import (
	"context"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/observe"
)

// Observe sends the group's State: the current one first, then every
// change, once per etcd revision that changed the members or an owner, in
// strictly increasing revision order, never back in time (a compaction or
// a broken watch is followed by a read, and a State older than one sent is
// dropped). A change of waiters alone sends nothing. The channel closes
// when ctx ends, on Close, or after a State with Err set (etcd refused the
// read for good). Receive promptly: the observer waits for each send.
func (g *Group) Observe(ctx context.Context) <-chan State {
	ch := make(chan State)
	if !g.enter() {
		close(ch)
		return ch
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.ctx, cancel)
	go func() {
		defer g.wg.Done()
		defer close(ch)
		defer stop()
		defer cancel()
		var last State
		sent := false
		send := func(st State) bool {
			if sent && (st.Err == nil && (st.Revision <= last.Revision || sameState(st, last))) {
				return true
			}
			select {
			case ch <- st:
				last, sent = st, true
				return true
			case <-ctx.Done():
				return false
			}
		}
		v := newView(g.prefix, g.count)
		observe.Loop(ctx, g.cli, g.prefix, func(h observe.Head) bool {
			if h.Err != nil {
				return send(State{Err: h.Err})
			}
			return true
		}, func(q map[string]*mvccpb.KeyValue, rev int64) {
			kvs := make([]*mvccpb.KeyValue, 0, len(q))
			for _, kv := range q {
				kvs = append(kvs, kv)
			}
			v.reset(kvs, rev)
			send(v.state())
		}, func(err error) {
			g.cfg.Session.Logger.Error("observe: etcd refused the read", zap.String("name", g.name), zap.String("namespace", g.ns), zap.Error(err))
		})
	}()
	return ch
}

func sameState(a, b State) bool {
	return slices.Equal(a.Members, b.Members) && slices.Equal(a.Owners, b.Owners)
}
