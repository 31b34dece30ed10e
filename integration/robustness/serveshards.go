package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/fencing"
)

// The serve kind's shard group: members that join it through the serve
// process's Shards streams, of serveShardCount shards (its names
// sv0/00000 ...), each moved shard waiting serveShardDrain for Drained.
const (
	serveShardGroup = "sv0"
	serveShardCount = 6
	serveShardDrain = time.Second
)

// How a member acknowledges a moved shard's drain.
const (
	serveAckPrompt = iota // Drained 0 to 300 ms after moved
	serveAckLate          // Drained after the drain deadline: refused, lost was sent first
	serveAckNever         // never: lost at the drain deadline, or its validity, tells it
)

var serveAcks = []string{"prompt", "late", "never"}

// How a member leaves.
const (
	serveLeaveDrop    = iota // closes its stream
	serveLeaveRelease        // Release of its hold_id: lost (RELEASED) per shard, then ended
	serveLeaveSilent         // stops heartbeating, still reading: told by its validity, then lost per shard by the heartbeat timeout
)

var serveLeaves = []string{"drop", "release", "silent"}

// serveShards: 3 or 4 members of the group join through the serve
// process, about 0.7 s apart, each taking shards from those before
// (moved), and leave 3 to 7 s after they joined as one of serveLeaves;
// each acknowledges its moved shards' drains as one of serveAcks (half of
// those that never do read their stream slowly: see slowRead). A
// member counts a shard its own from owned until lost, its own Drained
// (it stops before it calls), or its validity deadline (its last
// heartbeat's send time plus the reply's validity, on its own clock),
// whichever is first; a deadline passed ends the membership for it, as
// the serve Hold callers' ends their hold (docs/serve.md). While it owns
// a shard it writes the evidence fenced by the shard's token.
func (m *mech) serveShards(ctx context.Context, rng *rand.Rand) {
	var wg sync.WaitGroup
	k := 3 + rng.IntN(2)
	for i := 0; i < k; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		mb := newServeMember(m, fmt.Sprintf("%s.sm%d-%d", m.client(), i, m.runs))
		mb.ack, mb.leave, mb.grpc = g.IntN(len(serveAcks)), g.IntN(len(serveLeaves)), g.IntN(2) == 0
		mb.life = time.Duration(3000+g.IntN(4000)) * time.Millisecond
		if mb.ack == serveAckNever && g.IntN(2) == 0 {
			// A slow reader, past the drain deadline and the key's release
			// after it: only its heartbeats' replies can tell it.
			mb.slowRead = serveShardDrain + 3*m.r.cfg.TTL/2
			mb.life = max(mb.life, 6*time.Second)
		}
		wg.Go(func() {
			pause(ctx, time.Duration(i*700+g.IntN(500))*time.Millisecond)
			if ctx.Err() == nil {
				mb.run(ctx, g)
			}
		})
	}
	wg.Wait()
}

// serveMember is one Shards stream's caller.
type serveMember struct {
	m     *mech
	who   string
	ack   int
	leave int
	grpc  bool
	life  time.Duration
	// slowRead, when set, is how long the stream's reader stops reading
	// after each moved, its heartbeats going on.
	slowRead time.Duration

	svc    batonv1connect.BatonServiceClient
	holdID string
	work   sync.WaitGroup // its shards' writers and drains
	// expired is closed when its validity ran out; done when it left.
	expired chan struct{}
	done    chan struct{}

	mu sync.Mutex
	// valid is the caller's validity deadline on the shared clock, every
	// one of its shards' Hold.validTo; final once over.
	valid  *atomic.Int64
	over   bool // it counts itself out of the group: every shard told
	timer  *time.Timer
	shards map[uint32]*serveShard // owned, not yet told
}

func newServeMember(m *mech, who string) *serveMember {
	return &serveMember{m: m, who: who, valid: new(atomic.Int64), shards: map[uint32]*serveShard{},
		expired: make(chan struct{}), done: make(chan struct{})}
}

// serveShard is one shard a member owns: its hold as the checks see it.
type serveShard struct {
	id     uint32
	n      NameInfo
	x      *Hold
	th     tokenHolder
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (mb *serveMember) isOver() bool {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.over
}

// endLocked tells the caller's hold of s at at: its validity deadline
// instead when that came first.
func (mb *serveMember) endLocked(s *serveShard, at int64, cause string) {
	if mb.shards[s.id] != s {
		return
	}
	if v := mb.valid.Load(); at >= v {
		at, cause = v, "validity expired" // its own clock told it first
	}
	delete(mb.shards, s.id)
	s.cancel(errors.New(cause))
	mb.m.r.h.ended(s.x, at, cause)
}

// endShard tells the hold of shard id of token at at, if it still holds it.
func (mb *serveMember) endShard(id uint32, token int64, at int64, cause string) (key string) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if s := mb.shards[id]; s != nil && (token == 0 || s.x.Token == token) {
		key = s.x.Key
		mb.endLocked(s, at, cause)
	}
	return key
}

// finishAll ends the membership for the caller at at: every shard told,
// and any owned later never held.
func (mb *serveMember) finishAll(at int64, cause string) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	mb.finishAllLocked(at, cause)
}

func (mb *serveMember) finishAllLocked(at int64, cause string) {
	for _, s := range mb.shards {
		mb.endLocked(s, at, cause)
	}
	mb.over = true
	if mb.timer != nil {
		mb.timer.Stop()
	}
}

// extend sets the validity deadline from a reply to a call sent at sent,
// unless the caller counts itself out already: a deadline passed is
// final, and ends every shard and the membership.
func (mb *serveMember) extend(sent int64, validity time.Duration) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if mb.over {
		return
	}
	t := now()
	if old := mb.valid.Load(); t >= old {
		mb.expireLocked(old)
		return
	}
	d := sent + int64(validity)
	mb.valid.Store(d)
	if mb.timer != nil {
		mb.timer.Stop()
	}
	mb.timer = time.AfterFunc(time.Duration(d-t), func() {
		mb.mu.Lock()
		defer mb.mu.Unlock()
		if v := mb.valid.Load(); !mb.over && now() >= v {
			mb.expireLocked(v)
		}
	})
}

func (mb *serveMember) expireLocked(at int64) {
	mb.finishAllLocked(at, "validity expired")
	close(mb.expired)
}

// run is one member: a Shards stream until joined, heartbeats, its
// shards, and its leaving.
func (mb *serveMember) run(ctx context.Context, rng *rand.Rand) {
	m, r := mb.m, mb.m.r
	if m.srv == nil {
		return
	}
	svc, closeClient, _, err := (&serveCaller{m: m, grpc: mb.grpc}).client()
	if err != nil {
		return
	}
	defer closeClient()
	mb.svc = svc
	req := &batonv1.ShardsRequest{Namespace: r.cfg.Namespace, Group: serveShardGroup, Count: serveShardCount, Member: mb.who,
		Ttl: durationpb.New(r.cfg.TTL), DrainTimeout: durationpb.New(serveShardDrain)}
	sctx, drop := context.WithCancel(context.WithoutCancel(ctx))
	defer drop()
	start := now()
	stream, err := svc.Shards(sctx, connect.NewRequest(req))
	var joined *batonv1.Joined
	if err == nil {
		bound := time.AfterFunc(10*time.Second, drop) // the client's own bound on the join
		switch {
		case !stream.Receive():
			err = stream.Err()
			if err == nil {
				err = errors.New("the stream ended before joined")
			}
		case stream.Msg().GetJoined() == nil:
			err = fmt.Errorf("first message not joined: %v", stream.Msg())
		default:
			joined = stream.Msg().GetJoined()
		}
		bound.Stop()
	}
	r.h.op(Op{Client: mb.who, Kind: "serve.shards.Join", Name: serveShardGroup, Call: start, Return: now(), Err: errString(err)})
	if err != nil {
		if stream != nil {
			_ = stream.Close()
		}
		return
	}
	mb.holdID = joined.GetHoldId()
	mb.valid.Store(start + int64(joined.GetValidity().AsDuration())) // counted from the call's send
	mb.extend(start, joined.GetValidity().AsDuration())              // arms the timer

	// The stream: owned, moved, lost, ended.
	streamDone := make(chan struct{})
	rg := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	go func() {
		defer close(streamDone)
		for i := 0; i < 100000 && stream.Receive(); i++ {
			mb.receive(stream.Msg(), rg)
			if mb.slowRead > 0 && stream.Msg().GetMoved() != nil {
				pause(sctx, mb.slowRead)
			}
		}
		mb.finishAll(now(), "stream ended")
	}()
	// Heartbeats, until stopped.
	beatCtx, stopBeats := context.WithCancel(context.Background())
	beating := make(chan struct{})
	interval := joined.GetHeartbeatInterval().AsDuration()
	if interval <= 0 {
		interval = r.cfg.TTL / 5
	}
	go func() {
		defer close(beating)
		for i := 0; i < 10000; i++ {
			pause(beatCtx, interval)
			if beatCtx.Err() != nil || mb.isOver() {
				return
			}
			bctx, bcancel := context.WithTimeout(beatCtx, 2*interval)
			sent := now()
			resp, err := svc.Heartbeat(bctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: mb.holdID}))
			bcancel()
			if err == nil {
				// As the clients do: a shard the reply names lost (at its
				// drain deadline) ends before the reply's validity is taken.
				for _, l := range resp.Msg.GetLost() {
					t := now()
					if key := mb.endShard(l.GetShard(), l.GetToken(), t, "lost (a heartbeat's reply): "+l.GetCause().String()); key != "" {
						r.h.op(Op{Client: mb.who, Kind: "serve.shard.LostByHeartbeat." + l.GetCause().String(), Name: mb.shardName(l.GetShard()), Call: t, Return: t, Key: key, Token: l.GetToken()})
					}
				}
				mb.extend(sent, resp.Msg.GetValidity().AsDuration())
			}
			if beatCtx.Err() == nil {
				r.h.op(Op{Client: mb.who, Kind: "serve.shards.Heartbeat", Name: serveShardGroup, Call: sent, Return: now(), Err: errString(err)})
			}
			if connect.CodeOf(err) == connect.CodeFailedPrecondition || connect.CodeOf(err) == connect.CodeNotFound {
				return // ended: the stream says why
			}
		}
	}()
	defer func() {
		stopBeats()
		<-beating
		mb.finishAll(now(), "left") // it knows before it drops
		drop()
		<-streamDone
		_ = stream.Close()
		close(mb.done)
		mb.work.Wait()
	}()

	life := time.NewTimer(mb.life)
	defer life.Stop()
	select {
	case <-life.C:
	case <-ctx.Done():
	case <-mb.expired: // its validity ran out: it leaves
		return
	case <-streamDone:
		return
	}
	switch mb.leave {
	case serveLeaveRelease:
		stopBeats()
		<-beating
		mb.finishAll(now(), "released") // it knows before it asks
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := now()
		_, err := svc.Release(rctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: mb.holdID}))
		rcancel()
		r.h.op(Op{Client: mb.who, Kind: "serve.shards.Release", Name: serveShardGroup, Call: start, Return: now(), Err: errString(err)})
		select { // lost per shard and ended, then the stream ends
		case <-streamDone:
		case <-time.After(2 * time.Second):
		}
	case serveLeaveSilent:
		stopBeats()
		<-beating
		// Told by its validity (or, still reading, by lost); the heartbeat
		// timeout ends the membership.
		select {
		case <-streamDone:
		case <-time.After(3 * r.cfg.TTL):
		}
	}
}

// receive takes one message of the stream after joined.
func (mb *serveMember) receive(msg *batonv1.ShardsResponse, g *rand.Rand) {
	r := mb.m.r
	switch {
	case msg.GetOwned() != nil:
		mb.owned(msg.GetOwned(), g)
	case msg.GetMoved() != nil:
		mb.moved(msg.GetMoved(), g)
	case msg.GetLost() != nil:
		l := msg.GetLost()
		t := now()
		key := mb.endShard(l.GetShard(), l.GetToken(), t, "lost: "+l.GetCause().String())
		r.h.op(Op{Client: mb.who, Kind: "serve.shard.Lost." + l.GetCause().String(), Name: mb.shardName(l.GetShard()), Call: t, Return: t, Key: key, Token: l.GetToken()})
	case msg.GetEnded() != nil:
		e := msg.GetEnded()
		t := now()
		mb.finishAll(t, "ended: "+e.GetCause().String())
		r.h.op(Op{Client: mb.who, Kind: "serve.shards.Ended." + e.GetCause().String(), Name: serveShardGroup, Call: t, Return: t})
	}
}

func (mb *serveMember) shardName(id uint32) string {
	return fmt.Sprintf("%s/%05d", serveShardGroup, id)
}

// owned records the hold of a shard and starts its writer.
func (mb *serveMember) owned(o *batonv1.ShardOwned, g *rand.Rand) {
	if s := mb.hold(o); s != nil {
		wr := rand.New(rand.NewPCG(g.Uint64(), g.Uint64()))
		mb.work.Go(func() { mb.write(s, wr) })
	}
}

// hold records the hold of a shard owned, and returns it; nil when the
// caller counts itself out already (it never holds: dead on return).
func (mb *serveMember) hold(o *batonv1.ShardOwned) *serveShard {
	r := mb.m.r
	ret := now()
	if o.GetShard() >= serveShardCount {
		r.h.op(Op{Client: mb.who, Kind: "serve.shard.Own", Name: serveShardGroup, Call: ret, Return: ret, Err: fmt.Sprintf("owned shard %d of %d", o.GetShard(), serveShardCount)})
		return nil
	}
	n := r.name("shard", mb.shardName(o.GetShard()))
	r.h.op(Op{Client: mb.who, Kind: "serve.shard.Own", Name: n.Name, Call: ret, Return: ret, Key: o.GetKey(), Token: o.GetToken()})
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &serveShard{id: o.GetShard(), n: n, ctx: ctx, cancel: cancel,
		th: tokenHolder{cli: mb.m.cli, key: o.GetKey(), token: fencing.Token(o.GetToken())},
		x:  &Hold{Prim: n.Prim, Name: n.Name, Client: mb.who, Key: o.GetKey(), Token: o.GetToken(), Acquired: ret, validTo: mb.valid}}
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if old := mb.shards[s.id]; old != nil {
		mb.endLocked(old, ret, "owned again")
	}
	if mb.over {
		cancel(errors.New("membership over"))
		r.h.acquired(s.x, n, ctx.Done()) // dead on return
		r.h.ended(s.x, ret, "membership over")
		return nil
	}
	mb.shards[s.id] = s
	r.h.acquired(s.x, n, ctx.Done())
	return s
}

// write writes the evidence of owning s, fenced by its token, until the
// caller is told.
func (mb *serveMember) write(s *serveShard, g *rand.Rand) {
	for i := 0; i < 200 && s.ctx.Err() == nil; i++ {
		mb.m.r.evidence(mb.who, s.n, s.th)
		pause(s.ctx, time.Duration(100+g.IntN(200))*time.Millisecond)
	}
}

// moved records the move, and acknowledges the drain as the member does.
func (mb *serveMember) moved(mv *batonv1.ShardEnded, g *rand.Rand) {
	t := now()
	mb.mu.Lock()
	s := mb.shards[mv.GetShard()]
	if s != nil && s.x.Token != mv.GetToken() {
		s = nil
	}
	mb.mu.Unlock()
	op := Op{Client: mb.who, Kind: "serve.shard.Moved", Name: mb.shardName(mv.GetShard()), Call: t, Return: t, Token: mv.GetToken()}
	if s != nil {
		op.Key = s.x.Key
	}
	mb.m.r.h.op(op)
	if s == nil {
		return
	}
	var d time.Duration
	switch mb.ack {
	case serveAckPrompt:
		d = time.Duration(g.IntN(300)) * time.Millisecond
	case serveAckLate:
		d = serveShardDrain + time.Duration(200+g.IntN(800))*time.Millisecond
	default:
		return // it works on until lost, or its validity, tells it
	}
	mb.work.Go(func() { mb.drained(s, d) })
}

// drained stops working on s after d and acknowledges its drain.
func (mb *serveMember) drained(s *serveShard, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-mb.done:
		return
	}
	mb.endShard(s.id, s.x.Token, now(), "drained") // it stops before it says so
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := now()
	_, err := mb.svc.Drained(ctx, connect.NewRequest(&batonv1.DrainedRequest{HoldId: mb.holdID, Shard: s.id}))
	mb.m.r.h.op(Op{Client: mb.who, Kind: "serve.shard.Drained", Name: s.n.Name, Call: start, Return: now(), Err: errString(err), Key: s.x.Key, Token: s.x.Token})
}
