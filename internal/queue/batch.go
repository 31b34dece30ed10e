package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
)

// Batcher sends the enqueues of one session as a database commits groups:
// one that finds fewer than maxInflight in flight goes at once, alone;
// those that come while that many are go together as soon as one returns,
// as one transaction of nested ones (each with its own compares and
// branches, as if sent alone), so that many acquisitions at once cost one
// request and one Raft entry instead of one each.
//
// What may share a transaction: enqueues on the same lease (a put on a
// lease etcd no longer has fails the whole transaction, and would tell a
// live lease's enqueue it expired) and of different queues (their keys
// get the same CreateRevision, which within one queue would leave two
// keys neither of which is ahead of the other). A refusal of the whole
// (permission, size) sends each again alone, for its own answer.
type Batcher struct {
	cli *clientv3.Client
	// stop ends when the session's Close begins: what a sender goroutine
	// sends then is cut short, so that Close never waits on etcd.
	stop context.Context
	// Go runs the sender of a group in a goroutine its session waits for;
	// false once the session is closing (what is queued is then not sent).
	Go func(fn func()) bool

	mu       sync.Mutex
	inflight int // senders: direct calls and groups' goroutines
	queued   []*pending
}

// NewBatcher returns the Batcher of a session's client; stop ends with the
// session.
func NewBatcher(cli *clientv3.Client, stop context.Context, goFn func(fn func()) bool) *Batcher {
	return &Batcher{cli: cli, stop: stop, Go: goFn}
}

// ErrNotSent is returned for an enqueue that was never sent and never
// will be: its session closed first, or its caller gave up while it was
// queued, before a sender took it (then wrapped with the ctx's error).
// Nothing can apply it: no fence needs raising.
var ErrNotSent = errors.New("the enqueue was not sent")

type pending struct {
	ctx   context.Context
	lease clientv3.LeaseID
	queue string
	size  int
	cmps  []clientv3.Cmp
	then  []clientv3.Op
	els   []clientv3.Op
	done  chan struct{}
	resp  *clientv3.TxnResponse
	err   error
	state atomic.Int32 // queued, then taken by a sender or given up by its caller: whichever comes first
}

// A pending enqueue's state.
const (
	queued int32 = iota
	taken
	givenUp
)

// notSent is the error of an enqueue given up before a sender took it.
func notSent(err error) error { return fmt.Errorf("%w: %w", ErrNotSent, err) }

// maxInflight is how many enqueues of a session go alone at once, before
// the next wait to go as a group: a few acquisitions at once see no added
// round trip. maxBatch bounds the enqueues of one transaction (etcd's
// --max-txn-ops is 128 by default) and maxBatchBytes their keys and values
// (its request limit is 1.5 MiB).
const (
	maxInflight   = 4
	maxBatch      = 64
	maxBatchBytes = 256 << 10
)

// commit sends one enqueue, of queue (its prefix) on lease, with others
// when one is in flight.
func (b *Batcher) commit(ctx context.Context, lease clientv3.LeaseID, queue string, size int, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	b.mu.Lock()
	if b.inflight < maxInflight && len(b.queued) == 0 {
		b.inflight++
		b.mu.Unlock()
		resp, err := b.cli.Txn(retry.Leader(ctx)).If(cmps...).Then(then...).Else(els...).Commit()
		b.release()
		return resp, err
	}
	p := &pending{ctx: ctx, lease: lease, queue: queue, size: size, cmps: cmps, then: then, els: els, done: make(chan struct{})}
	b.queued = append(b.queued, p)
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.resp, p.err
	case <-ctx.Done():
		if p.state.CompareAndSwap(queued, givenUp) {
			return nil, notSent(ctx.Err()) // no sender can take it now
		}
		select {
		case <-p.done: // answered meanwhile: that is its outcome
			return p.resp, p.err
		default:
		}
		// Taken by a sender: as a call cut short, it may still apply.
		// ctx.Err, not the cause, which a caller may have set to any error
		// (one that reads as a refusal, or as the lease's expiry, would
		// skip the cleanup).
		return nil, ctx.Err()
	}
}

// release ends a direct sender's turn: its slot goes on sending what
// queued meanwhile, in a goroutine, or is freed.
func (b *Batcher) release() {
	b.mu.Lock()
	if len(b.queued) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	if !b.Go(b.run) {
		b.drop() // closing
	}
}

// drop answers everything queued with ErrNotSent and frees the slot.
func (b *Batcher) drop() {
	b.mu.Lock()
	queued := b.queued
	b.queued = nil
	b.inflight--
	b.mu.Unlock()
	for _, p := range queued {
		p.finish(nil, ErrNotSent)
	}
}

// run sends groups until none is queued.
func (b *Batcher) run() {
	for {
		g := b.take()
		if g == nil {
			return
		}
		b.send(g)
	}
}

// take removes the next group from the queue: the oldest enqueue and
// those after it on its lease, of other queues, within the bounds; nil,
// freeing the sender's slot, when none is queued.
func (b *Batcher) take() []*pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queued) == 0 {
		b.inflight--
		return nil
	}
	first := b.queued[0]
	g := []*pending{first}
	queues := map[string]bool{first.queue: true}
	size := first.size
	rest := b.queued[:0]
	for _, p := range b.queued[1:] {
		if planted.On("g") {
			delete(queues, p.queue)
		}
		if len(g) < maxBatch && p.lease == first.lease && !queues[p.queue] && size+p.size <= maxBatchBytes {
			g, queues[p.queue], size = append(g, p), true, size+p.size
		} else {
			rest = append(rest, p)
		}
	}
	clear(b.queued[len(rest):])
	b.queued = rest
	return g
}

// send commits a group and hands each its answer.
func (b *Batcher) send(g []*pending) {
	live := g[:0:0]
	for _, p := range g {
		if p.ctx.Err() == nil && p.state.CompareAndSwap(queued, taken) {
			live = append(live, p)
			continue
		}
		p.state.CompareAndSwap(queued, givenUp)
		p.finish(nil, notSent(p.ctx.Err())) // gone: not sent at all
	}
	switch len(live) {
	case 0:
		return
	case 1:
		b.alone(live[0])
		return
	}
	// One request for all: it lives while any caller waits, as a call
	// sent alone lives while its caller does, and ends with the session;
	// values of the first's ctx (its trace) go with it.
	ctx, cancel := context.WithCancel(context.WithoutCancel(live[0].ctx))
	defer cancel()
	defer context.AfterFunc(b.stop, cancel)()
	var left atomic.Int32
	left.Store(int32(len(live)))
	for _, p := range live {
		stop := context.AfterFunc(p.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	ops := make([]clientv3.Op, len(live))
	for i, p := range live {
		ops[i] = clientv3.OpTxn(p.cmps, p.then, p.els)
	}
	resp, err := b.cli.Txn(clientv3.WithRequireLeader(ctx)).Then(ops...).Commit()
	if err != nil && retry.Permanent(err) {
		for _, p := range live { // refused as a whole: each on its own
			b.alone(p)
		}
		return
	}
	for i, p := range live {
		if err != nil {
			p.finish(nil, err)
			continue
		}
		p.finish(nested(resp, i), nil)
	}
}

// alone sends p by itself, with its own ctx, cut short by the session's
// end.
func (b *Batcher) alone(p *pending) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	defer context.AfterFunc(b.stop, cancel)()
	p.finish(b.cli.Txn(clientv3.WithRequireLeader(ctx)).If(p.cmps...).Then(p.then...).Else(p.els...).Commit())
}

func (p *pending) finish(resp *clientv3.TxnResponse, err error) {
	p.resp, p.err = resp, err
	close(p.done)
}

// nested is the i-th nested transaction's answer as if sent alone: with
// the header (revision) of the whole.
func nested(resp *clientv3.TxnResponse, i int) *clientv3.TxnResponse {
	n, h := resp.Responses[i].GetResponseTxn(), resp.Header
	return &clientv3.TxnResponse{
		Header:    &etcdserverpb.ResponseHeader{ClusterId: h.ClusterId, MemberId: h.MemberId, Revision: h.Revision, RaftTerm: h.RaftTerm},
		Succeeded: n.Succeeded, Responses: n.Responses,
	}
}
