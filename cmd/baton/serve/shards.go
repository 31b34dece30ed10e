package serve

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/shard"
)

// A Shards stream is a member of a shard group (package shard's Run, on a
// lease of its own), held as a Hold is: the same checks, limits,
// heartbeats and validity (the table in hold.go), with these states:
//
//	state    event                                   action, next state
//	-------  --------------------------------------  ------------------------------------------
//	joining  the member's key is in etcd             send joined, member
//	joining  another count / the name runs already   FAILED_PRECONDITION / ALREADY_EXISTS, end
//	joining  stream closed / server shutting down    CANCELED / UNAVAILABLE, end (no key left)
//	member   a shard is taken                        send owned (token, key)
//	member   a shard must move (ErrMoved)            send moved (drain_deadline), draining
//	draining Drained                                 release it
//	draining drain_deadline passed                   send lost (MOVED), release it once the
//	                                                 validity the caller had then ran out
//	member   a shard's lease may be lost (ErrLost)   send lost (before the lease can expire)
//	member   heartbeat deadline passed / shutdown    send lost per shard, leave, send ended
//	member   Release                                 send lost (RELEASED) per shard, leave, send ended
//	member   stream closed                           leave
//	any      a message not taken within sendTimeout  end, nothing more sent; leave once the
//	                                                 caller's validity ran out
//
// Leaving is Run's: the member's key first, then every shard's key. A
// lost is always sent before the shard's key is deleted; once the end
// began nothing more is sent of shards. Every message is sent by the
// stream's sender (send.go), one at a time: a caller that does not take
// one within sendTimeout ends the membership with CAUSE_STREAM_CLOSED, and
// its shards are kept until the validity it was last given has run out
// (a shard the group moves meanwhile is kept until then too).
//
// The caller believes it owns a shard from owned until it reads moved's
// end (lost) or the validity it was last given runs out by its own
// clock, whichever is first. So a moved shard's key is deleted only
//   - once the caller acknowledged its drain (Drained), or
//   - once lost was sent for it and the validity the caller had been
//     given then has run out (a caller cut off learns by its own clock), or
//   - when the membership ends: as its other shards (after the validity
//     ran out, for a heartbeat timeout or a caller that stopped reading).
// The library's drain timeout would release it at its own deadline: the
// member runs with libraryDrain, long enough that one of these comes
// first, and the serve keeps the caller's drain_timeout itself.

// Shards joins a shard group as a member while the stream is open and
// heartbeats arrive.
func (s *Server) Shards(ctx context.Context, req *connect.Request[batonv1.ShardsRequest], stream *connect.ServerStream[batonv1.ShardsResponse]) error {
	arrival := time.Now()
	sp, err := checkShards(req.Msg, s.cfg.Namespace, s.cfg.MaxTTL)
	if err == nil && sp.ttl > shard.MaxDrainTimeout/2 {
		// libraryDrain could not cover a moved shard's wait for the validity.
		err = invalid("ttl", "%v: at most %v for a shard membership", sp.ttl, shard.MaxDrainTimeout/2)
	}
	if err != nil {
		s.metrics.requests.WithLabelValues("refused").Inc()
		return err
	}
	c := callerOf(ctx)
	identity, leave, err := s.admit(c, sp.namespace, memberIdentity(c, sp))
	if err != nil {
		return err
	}
	defer leave()
	sess, err := s.sessions.own(sp.ttl)
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	closeSess := sync.OnceValue(sess.Close)
	defer func() { _ = closeSess() }()
	g, err := shard.New(s.cli, sp.group, sp.count, shard.WithSession(sess), shard.WithNamespace(sp.namespace),
		shard.WithIdentity(identity), shard.WithDrainTimeout(libraryDrain(sp.drain, sp.ttl)), shard.WithMetricLabel("serve"))
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	defer func() { _ = g.Close() }()

	m := newMembership(stream, s.sender(ctx, sp.ttl), sp, s.recordShard)
	m.hooks, m.stopped, m.lease = s.cfg.hooks, s.stopCtx.Done(), sessionOf(sess).Current
	defer m.stop(errStreamClosed)
	runCtx, cancelRun := context.WithCancelCause(context.Background())
	defer cancelRun(nil)
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(runCtx, sp.member, m.work) }()
	// waitRun waits for Run to leave; if etcd keeps it (an outage), the
	// lease's revocation deletes what is left.
	waitRun := func() error {
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		select {
		case err := <-runDone:
			return err
		case <-t.C:
			_ = closeSess()
			return <-runDone
		}
	}

	s.metrics.holds.WithLabelValues("waiting").Inc()
	err = s.join(ctx, sess.Lease, g.Prefix()+"m/"+keys.Escape(sp.member), runDone)
	s.metrics.holds.WithLabelValues("waiting").Dec()
	if err != nil {
		m.stop(err)
		var runErr error
		if !errors.As(err, new(runEnded)) {
			cancelRun(err)
			runErr = waitRun()
		}
		return s.joinRefused(ctx, err, runErr)
	}
	s.metrics.requests.WithLabelValues("held").Inc()
	h := &hold{
		id: newHoldID(), principal: c.principal(), budget: budgetOf(sp.ttl), members: m, identity: identity, ns: sp.namespace, names: []string{sp.group},
		release: make(chan struct{}), ended: make(chan struct{}),
	}
	s.holds.add(h)
	defer s.holds.remove(h.id)
	s.metrics.holds.WithLabelValues("held").Inc()
	defer s.metrics.holds.WithLabelValues("held").Dec()
	h.mu.Lock()
	h.beatBy = time.Now().Add(h.budget)
	until := h.validUntil()
	h.mu.Unlock()

	end := func(cause error, ran bool, runErr error) error {
		cause = h.markEnded(cause)
		tell := !errors.Is(cause, errStreamClosed)
		until := m.given() // before finish forgets the shards
		m.finish(cause, tell)
		if errors.Is(cause, errCallerUnreachable) && !ran {
			// The caller may still believe it owns its shards: the
			// member leaves once the validity it was given ran out.
			s.awaitValidity(h, until)
		}
		m.stop(cause)
		if s.cfg.hooks != nil && s.cfg.hooks.beforeUnlock != nil {
			s.cfg.hooks.beforeUnlock(h.id, cause)
		}
		if !ran {
			cancelRun(cause)
			runErr = waitRun()
		}
		if errors.Is(runErr, context.Canceled) || errors.Is(runErr, shard.ErrClosed) {
			runErr = nil // left as asked
		}
		h.endErr = runErr
		close(h.ended)
		if tell {
			m.ended(cause)
		}
		s.metrics.ended.WithLabelValues(causeLabel(causeOf(cause))).Inc()
		s.log.Debug("membership ended", zap.String("hold_id", h.id), zap.String("group", sp.group), zap.String("member", sp.member),
			zap.String("cause", causeLabel(causeOf(cause))), zap.Error(runErr))
		return nil
	}
	m.validity, m.released = h.validity, h.release // before join: a shard moves only once owned, after joined
	if err := m.join(&batonv1.Joined{HoldId: h.id, HeartbeatInterval: durationpb.New(heartbeatInterval(sp.ttl)),
		Validity: durationpb.New(until.Sub(arrival))}); err != nil {
		return end(err, false, nil)
	}
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	for {
		select {
		case err := <-runDone:
			if err == nil {
				err = errors.New("Run returned")
			}
			return end(fmt.Errorf("the member stopped: %w", err), true, err)
		case <-timer.C:
			left, expired := h.beatExpired(time.Now())
			if !expired {
				timer.Reset(left)
				continue
			}
			return end(errHeartbeatTimeout, false, nil)
		case <-h.release:
			return end(errReleasedByCaller, false, nil)
		case <-m.cut:
			return end(m.streamEnd(), false, nil)
		case <-ctx.Done():
			return end(m.streamEnd(), false, nil)
		case <-s.stopCtx.Done():
			return end(errServerShutdown, false, nil)
		}
	}
}

// recordShard writes, through the shard's guarded transaction, the
// acquisition record `baton shards` shows as "held for", on the
// membership's lease (as `baton shard` does): it goes with the lease.
func (s *Server) recordShard(ctx context.Context, ns, group string, sh *shard.Shard) {
	keyspace.RecordHeld(ctx, sh.Txn, keyspace.HeldPut(ns, keys.Shard, keyspace.ShardHeldName(group, sh.ID()), sh.Lease(), sh.Acquired()))
}

// libraryDrain is the drain timeout a membership gives the library, which
// releases a moved shard at it whatever the caller did: the caller's
// drain_timeout (drain, enforced by the membership) and the TTL's twice
// over, which covers what may follow the moved message before the
// release: its send and lost's (a twentieth of the TTL each, and as much
// again waiting for another send), then the validity the caller had been
// given when lost was sent (at most the budget, four fifths of the TTL),
// or the membership's end and its validity. A drain_timeout within
// 2×TTL of shard.MaxDrainTimeout is cut to leave that room (drainOf).
func libraryDrain(drain, ttl time.Duration) time.Duration {
	return min(drainOf(drain, ttl)+2*ttl, shard.MaxDrainTimeout)
}

// drainOf is how long a membership waits for Drained after moved: the
// caller's drain_timeout, less what libraryDrain needs past it under
// shard.MaxDrainTimeout.
func drainOf(drain, ttl time.Duration) time.Duration {
	return max(0, min(drain, shard.MaxDrainTimeout-2*ttl))
}

// memberIdentity is the identity a membership asks for: the request's;
// by default the transport's when it proves one (mTLS, a Unix socket),
// else the member's name.
func memberIdentity(c caller, sp shardsSpec) string {
	if sp.identity != "" || c.principal() != "" {
		return sp.identity
	}
	return sp.member
}

// runEnded is Run's error before the member joined.
type runEnded struct{ err error }

func (r runEnded) Error() string { return r.err.Error() }
func (r runEnded) Unwrap() error { return r.err }

// join waits until the member's key is in etcd on the membership's lease
// (Run joined), Run ends (runEnded), the stream closes or the server
// shuts down.
func (s *Server) join(ctx context.Context, lease func() clientv3.LeaseID, key string, runDone <-chan error) error {
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.stopCtx, func() { cancel(errServerShutdown) })()
	found := make(chan error, 1)
	go func() {
		found <- s.awaitKey(jctx, key, func(kv *mvccpb.KeyValue) bool { return kv != nil && kv.Lease != 0 && kv.Lease == int64(lease()) })
	}()
	select {
	case err := <-found:
		if err != nil && jctx.Err() != nil {
			return context.Cause(jctx)
		}
		return err
	case err := <-runDone:
		cancel(nil)
		<-found
		if err == nil {
			err = errors.New("Run returned")
		}
		return runEnded{err}
	}
}

// joinRefused is the error of a membership that ended before it joined:
// err is join's, runErr Run's once told to stop.
func (s *Server) joinRefused(ctx context.Context, err, runErr error) error {
	result, code := "error", connect.CodeUnavailable
	switch {
	case errors.Is(err, shard.ErrCountMismatch):
		result, code, err = "refused", connect.CodeFailedPrecondition, fmt.Errorf("count: %w", err)
	case errors.Is(err, shard.ErrDuplicateMember):
		result, code, err = "refused", connect.CodeAlreadyExists, fmt.Errorf("member: %w", err)
	case errors.Is(err, shard.ErrInvalid):
		result, code = "refused", connect.CodeInvalidArgument
	case errors.Is(err, errServerShutdown):
		result, code = "canceled", connect.CodeUnavailable
	case ctx.Err() != nil:
		result, code, err = "canceled", connect.CodeCanceled, errStreamClosed
	case cmdutil.IsPermissionDenied(err), cmdutil.IsPermissionDenied(runErr):
		code = connect.CodePermissionDenied
	}
	s.metrics.requests.WithLabelValues(result).Inc()
	return connect.NewError(code, err)
}

// awaitKey waits until key's state (nil: absent) satisfies ok: it reads
// the key, then follows its watch.
func (s *Server) awaitKey(ctx context.Context, key string, ok func(*mvccpb.KeyValue) bool) error {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return err
	}
	var kv *mvccpb.KeyValue
	if len(resp.Kvs) > 0 {
		kv = resp.Kvs[0]
	}
	if ok(kv) {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range s.cli.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			kv = ev.Kv
			if ev.Type == mvccpb.DELETE {
				kv = nil
			}
			if ok(kv) {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("the watch of " + key + " ended")
}

// Drained acknowledges that the caller stopped working on a moved shard:
// the shard is released, and the call returns once its key is gone.
// FAILED_PRECONDITION when the shard is not moving away from this member
// (never moved, or sent lost already at its drain deadline).
func (s *Server) Drained(ctx context.Context, req *connect.Request[batonv1.DrainedRequest]) (*connect.Response[batonv1.DrainedResponse], error) {
	h, err := s.holdOf(ctx, req.Msg.GetHoldId())
	if err != nil {
		return nil, err
	}
	if h.members == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("hold_id: not a shard membership's hold"))
	}
	key, err := h.members.drained(req.Msg.GetShard())
	if err != nil {
		return nil, err
	}
	if err := s.awaitKey(ctx, key, func(kv *mvccpb.KeyValue) bool { return kv == nil }); err != nil {
		if ctx.Err() != nil {
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		}
		return nil, etcdError(err)
	}
	return connect.NewResponse(&batonv1.DrainedResponse{}), nil
}

// membership is a Shards stream's member: what it sent of each shard, and
// the stream's sends, one at a time under the write deadline (each
// shard's work is a goroutine of Run).
type membership struct {
	stream *connect.ServerStream[batonv1.ShardsResponse]
	sender sender
	ns     string
	group  string
	count  int
	drain  time.Duration // drainOf the caller's drain_timeout
	budget time.Duration // how long a heartbeat keeps the membership
	record func(ctx context.Context, ns, group string, sh *shard.Shard)
	hooks  *hooks // the server's pause points (tests); nil
	// stopped is closed when the server shuts down; released when the
	// caller's Release arrives.
	stopped, released <-chan struct{}
	// lease is the member's session's current lease (nil before a grant).
	lease func() *core.Lease
	// validity is the hold's (hold.validity): set before joined is sent.
	validity func() time.Time
	ctx      context.Context // ends when the membership ends
	stop     context.CancelCauseFunc
	joined   chan struct{} // closed once joined is sent
	cut      chan struct{} // closed once a send failed: the membership ends

	mu      sync.Mutex
	free    time.Time // the latest validity a heartbeat may have given with no shard owned
	over    bool      // the end began: nothing more is sent of shards
	sendErr error     // the first failed send's (sender.send's); nothing is sent after it
	owned   map[int]*ownedShard
	// toldLost are the shards sent lost while owned (at their drain
	// deadline, or lost by the library), until owned again: every
	// heartbeat's reply names them.
	toldLost map[int]*batonv1.ShardEnded
}

type ownedShard struct {
	sh      *shard.Shard
	drained chan struct{} // made by moved, closed by Drained
	once    sync.Once
}

func newMembership(stream *connect.ServerStream[batonv1.ShardsResponse], snd sender, sp shardsSpec,
	record func(ctx context.Context, ns, group string, sh *shard.Shard)) *membership {
	m := &membership{stream: stream, sender: snd, ns: sp.namespace, group: sp.group, count: sp.count, drain: drainOf(sp.drain, sp.ttl), budget: budgetOf(sp.ttl), record: record,
		joined: make(chan struct{}), cut: make(chan struct{}), owned: make(map[int]*ownedShard),
		toldLost: make(map[int]*batonv1.ShardEnded)}
	m.ctx, m.stop = context.WithCancelCause(context.Background())
	return m
}

// Deadline is the library's deadline of the member's lease: its key and
// its shards' go with it (one lease for all), a lost lease's not before
// (config.KeysToDeadline). A validity given while the member owns no
// shard is bounded by it too, since a shard taken next has its key on
// that lease. Past a lost lease's deadline, before the next grant,
// nothing is at stake: the heartbeats alone keep the membership, and the
// next shard's key is on a lease granted after them (free records how
// far they may have carried the caller's validity: see given).
func (m *membership) Deadline() time.Time {
	now := time.Now()
	if l := m.lease(); l != nil {
		if d := l.Deadline(); d.After(now) {
			return d
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.free = now.Add(m.budget)
	return now.Add(24 * time.Hour)
}

// given is the latest validity the caller may have been given: the hold's
// validity now (the heartbeat deadline and the lease's both move only
// on), or one given while the member owned no shard, which the lease did
// not bound (joined, a heartbeat before the first owned): the caller
// keeps believing it owns a shard taken since until then.
func (m *membership) given() time.Time {
	m.mu.Lock()
	free := m.free
	m.mu.Unlock()
	if v := m.validity(); v.After(free) {
		return v
	}
	return free
}

// Context ends when the membership ends.
func (m *membership) Context() context.Context { return m.ctx }

// send sends msg through the stream's sender, unless a send failed
// already; the first failure closes cut. Called with m.mu held: a send
// holds up the membership's others for at most sendTimeout.
func (m *membership) send(msg *batonv1.ShardsResponse) error {
	if m.sendErr != nil {
		return m.sendErr
	}
	if err := m.sender.send(func() error { return m.stream.Send(msg) }); err != nil {
		m.sendErr = err
		close(m.cut)
		return err
	}
	return nil
}

// streamEnd is the cause of an end by the stream: the failed send's
// (errCallerUnreachable past the write deadline, which also resets the
// stream), else errStreamClosed. It waits for a send in progress.
func (m *membership) streamEnd() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sendErr != nil {
		return m.sendErr
	}
	return errStreamClosed
}

// join sends joined, the first message; owned may follow.
func (m *membership) join(j *batonv1.Joined) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer close(m.joined)
	return m.send(&batonv1.ShardsResponse{Event: &batonv1.ShardsResponse_Joined{Joined: j}})
}

// ended sends ended, the last message.
func (m *membership) ended(cause error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.send(&batonv1.ShardsResponse{Event: &batonv1.ShardsResponse_Ended{Ended: &batonv1.Lost{Cause: causeOf(cause), Message: cause.Error()}}})
}

// work is Run's fn for one shard: owned, then moved, lost or nothing
// (the membership's end tells of it).
func (m *membership) work(ctx context.Context, sh *shard.Shard) error {
	m.record(ctx, m.ns, m.group, sh) // before owned: a caller told sees it
	if !m.own(ctx, sh) {
		<-ctx.Done() // the membership ends: Run releases it
		return nil
	}
	<-ctx.Done()
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, shard.ErrMoved):
		m.drainMoved(sh)
		m.drop(sh.ID())
	case errors.Is(cause, shard.ErrReleased):
		m.drop(sh.ID())
	default:
		m.lost(sh, cause)
		if errors.Is(cause, errs.ErrRenewalFailed) {
			// The lease's keys stay to its deadline (config.KeysToDeadline),
			// which bounds every validity given while the shard was owned
			// (a reply given since names it lost), and the library deletes
			// the shard's once this returns: not before, unless the
			// caller's Release says it does not hold.
			t := time.NewTimer(time.Until(sh.Deadline()))
			select {
			case <-t.C:
			case <-m.released:
			case <-m.stopped:
			}
			t.Stop()
		}
	}
	return nil
}

// own sends owned once joined was sent; false once the end began.
func (m *membership) own(ctx context.Context, sh *shard.Shard) bool {
	select {
	case <-m.joined:
	case <-ctx.Done():
		return false
	case <-m.ctx.Done():
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.over {
		return false
	}
	m.owned[sh.ID()] = &ownedShard{sh: sh} // kept, sent or not: the caller may have read it
	delete(m.toldLost, sh.ID())
	_ = m.send(&batonv1.ShardsResponse{Event: &batonv1.ShardsResponse_Owned{Owned: &batonv1.ShardOwned{
		Shard: uint32(sh.ID()), Token: int64(sh.Token()), Key: sh.Key(),
	}}})
	return true
}

// moved sends moved, and returns the channel Drained closes and the
// drain's deadline; nil once the end began or when moved was not sent.
func (m *membership) moved(sh *shard.Shard) (drained <-chan struct{}, deadline time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owned[sh.ID()]
	if m.over || o == nil {
		return nil, time.Time{}
	}
	deadline = time.Now().Add(m.drain)
	if err := m.send(&batonv1.ShardsResponse{Event: &batonv1.ShardsResponse_Moved{Moved: &batonv1.ShardEnded{
		Shard: uint32(sh.ID()), Token: int64(sh.Token()), Cause: batonv1.Cause_CAUSE_MOVED, DrainDeadline: timestamppb.New(deadline),
	}}}); err != nil {
		return nil, time.Time{}
	}
	o.drained = make(chan struct{})
	return o.drained, deadline
}

// drainMoved returns once shard sh, moved away, may be released (the table at
// the top): the caller acknowledged its drain; or it was sent lost at the
// drain deadline and the validity it had been given then ran out; or the
// membership ended (Shards' end waits for the validity when the caller
// may not know). The library's drain timeout (libraryDrain) is longer
// than any of these waits.
func (m *membership) drainMoved(sh *shard.Shard) {
	drained, deadline := m.moved(sh)
	if drained == nil {
		// The caller was not told (the end began, or it did not take
		// moved): it may still believe it owns the shard until the
		// membership ends.
		<-m.ctx.Done()
		return
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-drained:
		return
	case <-m.ctx.Done():
		return
	case <-t.C:
	}
	if planted.On("t") {
		// Planted bug t: released at the drain deadline, the caller
		// neither sent lost nor out of its validity.
		return
	}
	switch until, out := m.drainTimedOut(sh); out {
	case drainAcked:
	case drainNotTold:
		<-m.ctx.Done() // the end began, or lost's send failed: the membership ends
	case drainTold:
		t.Reset(time.Until(until))
		select {
		case <-t.C:
		case <-m.ctx.Done():
		}
	}
}

// What drainTimedOut did.
const (
	drainTold    = iota // sent lost
	drainAcked          // nothing: Drained came first
	drainNotTold        // nothing, or a send that failed: the end began
)

// drainTimedOut sends lost (MOVED) for a moved shard whose drain deadline
// passed unacknowledged, and forgets it (no Drained, no write under it
// from then on); until is the validity the caller has been given by then.
func (m *membership) drainTimedOut(sh *shard.Shard) (until time.Time, out int) {
	if m.hooks != nil && m.hooks.drainTimedOut != nil {
		m.hooks.drainTimedOut(sh.ID())
	}
	if out = m.tellDrainTimedOut(sh); out != drainTold {
		return time.Time{}, out
	}
	// After the send: a heartbeat answered before it counts. Not under
	// m.mu, which the validity's Deadline takes.
	return m.given().Add(driftMargin(m.budget)), drainTold
}

func (m *membership) tellDrainTimedOut(sh *shard.Shard) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owned[sh.ID()]
	if m.over || o == nil {
		return drainNotTold
	}
	select {
	case <-o.drained:
		return drainAcked
	default:
	}
	delete(m.owned, sh.ID())
	msg := shardLost(sh, shard.ErrMoved)
	// Told in every heartbeat's reply from now on too (before the send: a
	// reply of a heartbeat that extended the validity after it was
	// counted must name it), so a caller slow to read its stream stops
	// before the shard is released.
	m.toldLost[sh.ID()] = msg.GetLost()
	if m.send(msg) != nil {
		return drainNotTold
	}
	return drainTold
}

// toldLostShards are the shards sent lost while owned, for a heartbeat's
// reply.
func (m *membership) toldLostShards() []*batonv1.ShardEnded {
	if planted.On("u") {
		return nil // planted bug u: the replies name none
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*batonv1.ShardEnded, 0, len(m.toldLost))
	for _, l := range m.toldLost {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *batonv1.ShardEnded) int { return int(a.Shard) - int(b.Shard) })
	return out
}

// lost sends lost for one shard, unless the end began (which sent it),
// and names it in every heartbeat's reply from then on: a reply's
// validity, from a lease granted since, may run past the lost lease's
// deadline, when its key goes.
func (m *membership) lost(sh *shard.Shard, cause error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.over || m.owned[sh.ID()] == nil {
		return
	}
	delete(m.owned, sh.ID())
	msg := shardLost(sh, cause)
	m.toldLost[sh.ID()] = msg.GetLost()
	_ = m.send(msg)
}

func (m *membership) drop(id int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.owned, id)
}

// finish begins the end: lost for every shard it owns (tell), lowest
// first, and nothing of shards after.
func (m *membership) finish(cause error, tell bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.over = true
	if tell {
		for _, id := range slices.Sorted(maps.Keys(m.owned)) {
			_ = m.send(shardLost(m.owned[id].sh, cause))
		}
	}
	clear(m.owned)
}

// drained acknowledges the drain of shard id and returns its key.
func (m *membership) drained(id uint32) (string, error) {
	if int64(id) >= int64(m.count) {
		return "", invalid("shard", "%d: the group's shards are 0 to %d", id, m.count-1)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owned[int(id)]
	if o == nil || o.drained == nil {
		return "", connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("shard: %d is not moving away from this member (never moved, or lost at its drain deadline)", id))
	}
	o.once.Do(func() { close(o.drained) })
	return o.sh.Key(), nil
}

// owner is shard id, for a fenced write: one the member owns, or drains
// after moved (its key still guards the write until it is released).
func (m *membership) owner(id uint32) (*shard.Shard, error) {
	if int64(id) >= int64(m.count) {
		return nil, invalid("write.shard", "%d: the group's shards are 0 to %d", id, m.count-1)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.owned[int(id)]
	if o == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("write.shard: this member does not own shard %d", id))
	}
	return o.sh, nil
}

func shardLost(sh *shard.Shard, cause error) *batonv1.ShardsResponse {
	return &batonv1.ShardsResponse{Event: &batonv1.ShardsResponse_Lost{Lost: &batonv1.ShardEnded{
		Shard: uint32(sh.ID()), Token: int64(sh.Token()), Cause: causeOf(cause),
	}}}
}
