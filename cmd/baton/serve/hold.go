package serve

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/request"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/semaphore"
	"github.com/batonhq/baton/session"
)

// A Hold stream, from its request to its last message:
//
//	state    event                                  action, next state
//	-------  -------------------------------------  ------------------------------------------
//	check    a field is invalid / not allowed       INVALID_ARGUMENT / PERMISSION_DENIED, end
//	check    over --max-holds(-per-identity)        RESOURCE_EXHAUSTED, end
//	waiting  acquired                               send held, held
//	waiting  try found it held / wait_timeout       ABORTED / DEADLINE_EXCEEDED, end
//	waiting  stream closed / server shutting down   CANCELED / UNAVAILABLE, end (no key left)
//	held     heartbeat before the deadline          deadline = its arrival + budget, held
//	held     operator's release request             send release_requested, held
//	held     Release                                delete the key, send released, end
//	held     stream closed                          delete the key, end
//	held     heartbeat deadline passed              send lost, delete the key, end
//
// With a lock_delay, every end but Release deletes the keys as a loss
// (abandon): the next contender waits the delay out.
//	held     library's Context ended (lease, key)   send lost, delete (guarded), end
//	held     server shutting down                   send lost, delete the key, end
//	any      a message not taken within sendTimeout  end; delete the key once the caller's validity ran out
//
// Every end is chosen in run, and every held end goes through end: a
// lost is always sent before the key is deleted, and from the moment a
// hold ends no heartbeat extends it.

// hold is one acquisition of a Hold or Lead stream, or a Shards stream's
// membership: what Heartbeat and Release find by its hold_id.
type hold struct {
	id        string
	principal string        // who may heartbeat and release it besides the hold_id ("" for anyone)
	budget    time.Duration // how long after a heartbeat's arrival the server keeps the hold
	abandon   bool          // a lock-delay: ends other than Release are losses
	lock      *acquired     // nil for a shard membership
	members   *membership   // a Shards stream's membership; nil for a lock or a term
	identity  string        // the identity the policy let in
	ns        string
	names     []string

	releaseOnce sync.Once
	release     chan struct{}        // closed by Release
	transfers   chan transferRequest // a term's Transfer requests; nil for a lock
	ended       chan struct{}        // closed once the key is deleted (or found gone)
	endErr      error                // the delete's outcome, for Release; set before ended closes

	mu     sync.Mutex
	beatBy time.Time // the last heartbeat's arrival (or held's) + budget
	cause  error     // why it ended; nil while held
}

// heartbeatInterval is how often a caller should send heartbeats: five a
// TTL, so that two can be lost before the shortest validity a reply can
// carry (budget or the lease's, whichever is earlier) runs out.
func heartbeatInterval(ttl time.Duration) time.Duration { return ttl / 5 }

// budgetOf is how long the server keeps a hold after a heartbeat: the TTL
// less the library's default safety margin (a fifth), the same slack the
// library keeps between its deadline and the lease's expiry.
func budgetOf(ttl time.Duration) time.Duration { return ttl - ttl/5 }

// liveness is what a hold lives on besides its heartbeats: the library's
// deadline and Context (a lock's or a term's; a membership's, shards.go).
type liveness interface {
	Deadline() time.Time
	Context() context.Context
}

func (h *hold) live() liveness {
	if h.members != nil {
		return h.members
	}
	return h.lock
}

// validUntil is the hold's validity deadline, the one its caller is
// given: the earlier of the heartbeat deadline and the library's (the
// lease's), less driftMargin, so never later than the library's. The
// server ends the hold at the heartbeat deadline itself: the margin is
// the caller's time to notice its deadline passed (a timer's lateness,
// the rates of two clocks) before the key can go. Called with h.mu held.
func (h *hold) validUntil() time.Time {
	if planted.On("q") && h.lock != nil {
		// Planted bug q: a whole TTL from the last heartbeat, past both
		// the heartbeat deadline (a fifth of a TTL less) and the lease's.
		return h.beatBy.Add(h.lock.TTL() - h.budget)
	}
	until := h.beatBy
	if d := h.live().Deadline(); d.Before(until) {
		until = d
	}
	return until.Add(-driftMargin(h.budget))
}

// driftMargin is how much earlier than the server's deadline a caller's
// validity ends: a sixteenth of the budget (a twentieth of the TTL, 100 ms
// at the shortest TTL, 750 ms at the default).
func driftMargin(budget time.Duration) time.Duration { return budget / 16 }

// beat extends the hold from a heartbeat that arrived at now, and returns
// its validity from then.
func (h *hold) beat(now time.Time) (time.Duration, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.cause != nil:
		return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the hold ended: %w", h.cause))
	case !now.Before(h.beatBy):
		return 0, connect.NewError(connect.CodeFailedPrecondition, errHeartbeatTimeout)
	case h.live().Context().Err() != nil:
		return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the hold is lost: %w", context.Cause(h.live().Context())))
	}
	h.beatBy = now.Add(h.budget)
	return h.validUntil().Sub(now), nil
}

// beatExpired ends the hold if its heartbeat deadline passed by now;
// otherwise it says how long is left.
func (h *hold) beatExpired(now time.Time) (left time.Duration, expired bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.Before(h.beatBy) {
		return h.beatBy.Sub(now), false
	}
	if h.cause == nil {
		h.cause = errHeartbeatTimeout
	}
	return 0, true
}

// markEnded records the cause of the end, unless one is recorded; it
// returns the one that stands.
func (h *hold) markEnded(cause error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cause == nil {
		h.cause = cause
	}
	return h.cause
}

// requestRelease asks the loop to release.
func (h *hold) requestRelease() { h.releaseOnce.Do(func() { close(h.release) }) }

// errWaitTimeout ends a wait at wait_timeout.
var errWaitTimeout = errors.New("wait_timeout passed")

// Hold acquires a lock and holds it while the stream is open and
// heartbeats arrive.
func (s *Server) Hold(ctx context.Context, req *connect.Request[batonv1.HoldRequest], stream *connect.ServerStream[batonv1.HoldResponse]) error {
	ctx, span := s.startSpan(ctx, req.Header(), "Hold")
	err := s.serveHold(ctx, req, stream)
	endSpan(span, err)
	return err
}

func (s *Server) serveHold(ctx context.Context, req *connect.Request[batonv1.HoldRequest], stream *connect.ServerStream[batonv1.HoldResponse]) error {
	arrival := time.Now()
	sp, err := checkHold(req.Msg, s.cfg.Namespace, s.cfg.MaxTTL)
	if err != nil {
		s.metrics.requests.WithLabelValues("refused").Inc()
		return err
	}
	c := callerOf(ctx)
	identity, leave, err := s.admit(c, sp.namespace, sp.identity)
	if err != nil {
		return err
	}
	defer leave()

	closeFn, lk, err := s.acquire(ctx, sp, identity)
	if closeFn != nil {
		defer func() { _ = closeFn() }()
	}
	if err != nil {
		return err
	}
	h := &hold{
		id: newHoldID(), principal: c.principal(), budget: budgetOf(sp.ttl), abandon: sp.lockDelay > 0, lock: lk, identity: identity, ns: sp.namespace, names: sp.names,
		release: make(chan struct{}), ended: make(chan struct{}),
	}
	s.holds.add(h)
	defer s.holds.remove(h.id)
	s.metrics.holds.WithLabelValues("held").Inc()
	defer s.metrics.holds.WithLabelValues("held").Dec()
	spanHeld(ctx, h)

	h.mu.Lock()
	h.beatBy = time.Now().Add(h.budget)
	until := h.validUntil()
	h.mu.Unlock()
	ev := holdEvents{stream: stream, sender: s.sender(ctx, sp.ttl)}
	err = ev.send(func() error {
		return stream.Send(&batonv1.HoldResponse{Event: &batonv1.HoldResponse_Held{Held: &batonv1.Held{
			HoldId: h.id, Token: int64(lk.Token()), Keys: lk.keys, Lease: int64(lk.Lease()),
			Ttl: durationpb.New(lk.TTL()), Validity: durationpb.New(until.Sub(arrival)),
			Deadline: timestamppb.New(until), HeartbeatInterval: durationpb.New(heartbeatInterval(sp.ttl)),
		}}})
	})
	if err != nil {
		return s.end(ctx, h, ev, err)
	}
	return s.run(ctx, h, ev)
}

// admit lets a stream in, or refuses it before anything is written: the
// caller's identity (requested, or the transport's) must be one the
// namespace policy lets contend, the server must not be shutting down,
// and the limits must have room. leave counts the stream out.
func (s *Server) admit(c caller, ns, requested string) (identity string, leave func(), err error) {
	identity, err = c.identity(requested)
	if err == nil {
		err = s.policy.authorize(ns, identity, contend)
	}
	if err != nil {
		s.metrics.requests.WithLabelValues("refused").Inc()
		return "", nil, err
	}
	if err := s.enter(); err != nil {
		return "", nil, err
	}
	out, err := s.limits.admit(identity)
	if err != nil {
		s.wg.Done()
		s.metrics.requests.WithLabelValues("refused").Inc()
		return "", nil, err
	}
	return identity, func() { out(); s.wg.Done() }, nil
}

// events is how a held stream tells its caller what happens: a Hold's
// messages or a Lead's, each sent under the stream's write deadline
// (sender.send's errors).
type events interface {
	// lost is the last message of an end the caller did not ask for.
	lost(cause error)
	// released is the last message of the caller's Release (a Lead's
	// Resign or Transfer).
	released()
	// releaseRequested passes on an operator's request to let go.
	releaseRequested(r request.Request) error
	// endRequested passes on a request that a leader hand over (only a
	// term's acquisition has one).
	endRequested() error
}

// holdEvents are a Hold stream's messages.
type holdEvents struct {
	sender
	stream *connect.ServerStream[batonv1.HoldResponse]
}

func (e holdEvents) lost(cause error) { _ = e.send(func() error { return e.stream.Send(lost(cause)) }) }

func (e holdEvents) released() {
	_ = e.send(func() error {
		return e.stream.Send(&batonv1.HoldResponse{Event: &batonv1.HoldResponse_Released{Released: &batonv1.Released{}}})
	})
}

func (e holdEvents) releaseRequested(r request.Request) error {
	return e.send(func() error {
		return e.stream.Send(&batonv1.HoldResponse{Event: &batonv1.HoldResponse_ReleaseRequested{ReleaseRequested: &batonv1.ReleaseRequested{
			Reason: r.Reason, By: r.By, At: timestamppb.New(r.At),
		}}})
	})
}

func (holdEvents) endRequested() error { return nil } // a lock has none

// acquire waits for the lock (or tries it) until the stream closes, the
// server shuts down or wait_timeout passes. closeFn closes the primitive
// once the hold ends (nil on a refused option).
func (s *Server) acquire(ctx context.Context, sp holdSpec, identity string) (closeFn func() error, lk *acquired, err error) {
	// With a lock-delay, a lost holder is told from a clean release by its
	// own key and record; holds of one name on a shared lease would share
	// both, so such a hold gets a lease of its own.
	var sess *session.Session
	done := func() {}
	if sp.lockDelay > 0 {
		sess, err = s.sessions.own(sp.ttl)
		done = func() { _ = sess.Close() }
	} else {
		sess, done, err = s.sessions.take(sp.ttl, sessionNames(sp))
	}
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeUnavailable, err)
	}
	opts := []mutex.Option{mutex.WithSession(sess), mutex.WithNamespace(sp.namespace), mutex.WithIdentity(identity),
		mutex.WithMetricLabel("serve")}
	if sp.lockDelay > 0 {
		opts = append(opts, mutex.WithLockDelay(sp.lockDelay))
	}
	a, err := newAcquirer(s.cli, sp, opts)
	if err != nil {
		done()
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	closeFn = func() error {
		defer done()
		return a.close()
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.stopCtx, func() { cancel(errServerShutdown) })
	defer stop()
	if sp.waitTimeout > 0 {
		var c2 context.CancelFunc
		wctx, c2 = context.WithTimeoutCause(wctx, sp.waitTimeout, errWaitTimeout)
		defer c2()
	}
	s.metrics.holds.WithLabelValues("waiting").Inc()
	lk, err = a.acquire(wctx, sp.try)
	s.metrics.holds.WithLabelValues("waiting").Dec()
	if err == nil {
		s.metrics.requests.WithLabelValues("held").Inc()
		return closeFn, lk, nil
	}
	result, code := "error", connect.CodeUnavailable
	switch cause := context.Cause(wctx); {
	case busy(err):
		result, code = "busy", connect.CodeAborted
	case errors.Is(err, semaphore.ErrLimitMismatch):
		result, code, err = "refused", connect.CodeFailedPrecondition, fmt.Errorf("limit: %w", err)
	case errors.Is(cause, errWaitTimeout):
		result, code, err = "timeout", connect.CodeDeadlineExceeded, cause
	case errors.Is(cause, errServerShutdown):
		result, code, err = "canceled", connect.CodeUnavailable, cause
	case ctx.Err() != nil:
		result, code, err = "canceled", connect.CodeCanceled, errStreamClosed
	case cmdutil.IsPermissionDenied(err):
		code = connect.CodePermissionDenied
	case errors.Is(err, mutex.ErrTooManyHeld):
		code = connect.CodeResourceExhausted
	}
	s.metrics.requests.WithLabelValues(result).Inc()
	return closeFn, nil, connect.NewError(code, err)
}

// sessionNames are what a hold of sp uses on a shared session, each
// "namespace kind name": a mutex's (or a set's), a semaphore's or a
// read/write lock's names.
func sessionNames(sp holdSpec) []string {
	kind := "m"
	switch sp.kind {
	case batonv1.LockKind_LOCK_KIND_SEMAPHORE:
		kind = "s"
	case batonv1.LockKind_LOCK_KIND_READ, batonv1.LockKind_LOCK_KIND_WRITE:
		kind = "rw"
	}
	out := make([]string, len(sp.names))
	for i, n := range sp.names {
		out[i] = sp.namespace + "\x00" + kind + "\x00" + n
	}
	return out
}

// run is a held stream's loop: it owns the hold's end, and chooses its
// cause (see the table above).
func (s *Server) run(ctx context.Context, h *hold, ev events) error {
	recorded := s.recordHeld(h)
	defer recorded()
	var requests <-chan request.Request
	if h.lock.reqKeys != nil {
		if s.cfg.hooks != nil && s.cfg.hooks.beforeFollow != nil {
			s.cfg.hooks.beforeFollow(h.id)
		}
		var stop func()
		requests, stop = s.requests.follow(h.lock.Context(), h.ns, h.lock.reqKeys)
		defer stop()
	}
	ends := h.lock.ends // closed once, then not selected again
	h.mu.Lock()
	timer := time.NewTimer(time.Until(h.beatBy))
	h.mu.Unlock()
	defer timer.Stop()
	for {
		var cause error
		select {
		case <-h.lock.Done():
			cause = context.Cause(h.lock.Context())
		case <-timer.C:
			left, expired := h.beatExpired(time.Now())
			if !expired {
				timer.Reset(left)
				continue
			}
			cause = errHeartbeatTimeout
		case <-h.release:
			cause = errReleasedByCaller
		case <-ctx.Done():
			cause = errStreamClosed
		case <-s.stopCtx.Done():
			cause = errServerShutdown
		case r := <-requests:
			if cause = ev.releaseRequested(r); cause == nil {
				continue
			}
		case <-ends:
			ends = nil
			if cause = ev.endRequested(); cause == nil {
				continue
			}
		case tr := <-h.transfers:
			token, err := s.transfer(ctx, h, tr)
			tr.reply <- transferReply{token: token, err: err}
			switch {
			case err == nil:
				cause = errTransferred
			case h.lock.Context().Err() != nil:
				cause = context.Cause(h.lock.Context()) // it resigned, or was lost meanwhile
			default:
				continue // refused: the term goes on, untouched
			}
		}
		return s.end(ctx, h, ev, cause)
	}
}

// end ends a held stream with cause: lost first (unless the caller ended
// it), then the guarded delete, then released for a Release.
func (s *Server) end(ctx context.Context, h *hold, ev events, cause error) error {
	cause = h.markEnded(cause)
	byCaller := errors.Is(cause, errReleasedByCaller) || errors.Is(cause, errStreamClosed)
	if !byCaller {
		ev.lost(cause)
	}
	if errors.Is(cause, errCallerUnreachable) || !byCaller && errors.Is(cause, errs.ErrRenewalFailed) {
		// The caller may still believe it holds (it does not read, or
		// cannot hear lost after failed renewals: the lease's keys stay to
		// its deadline, config.KeysToDeadline): its key outlives the
		// validity it was given.
		s.awaitValidity(h, h.validity())
	}
	if s.cfg.hooks != nil && s.cfg.hooks.beforeUnlock != nil {
		s.cfg.hooks.beforeUnlock(h.id, cause)
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if h.abandon && !errors.Is(cause, errReleasedByCaller) {
		s.abandon(uctx, h)
	}
	err := h.lock.release(uctx)
	if errors.Is(cause, errTransferred) {
		err = nil // the successor's now: Resign only forgets the term
	}
	h.endErr = err
	close(h.ended)
	final := causeOf(cause)
	if errors.Is(cause, errReleasedByCaller) {
		if err != nil {
			// Lost before the release: say why instead.
			final = causeOf(context.Cause(h.lock.Context()))
			ev.lost(context.Cause(h.lock.Context()))
		} else {
			ev.released()
		}
	}
	s.metrics.ended.WithLabelValues(causeLabel(final)).Inc()
	spanEnded(ctx, final)
	s.log.Debug("hold ended", zap.String("hold_id", h.id), zap.Strings("names", h.names), zap.Int64("token", int64(h.lock.Token())),
		zap.String("cause", causeLabel(final)), zap.Error(err))
	return nil
}

// abandon ends a hold with a lock-delay as a loss, not a release: its keys
// are deleted (guarded by its token) and its record is left, so the next
// contender waits the delay out. Only the caller's Release is clean.
func (s *Server) abandon(ctx context.Context, h *hold) {
	if h.lock.Context().Err() != nil {
		return // lost already: the keys are gone or going
	}
	dels := make([]clientv3.Op, 0, len(h.lock.keys))
	for _, k := range h.lock.keys {
		dels = append(dels, clientv3.OpDelete(k))
	}
	resp, err := s.cli.Txn(ctx).If(h.lock.compares...).Then(dels...).Commit()
	if err == nil && resp.Succeeded {
		select { // the library hears of the delete; Unlock then only forgets
		case <-h.lock.Done():
		case <-ctx.Done():
		}
	}
}

func lost(cause error) *batonv1.HoldResponse {
	return &batonv1.HoldResponse{Event: &batonv1.HoldResponse_Lost{Lost: &batonv1.Lost{Cause: causeOf(cause), Message: cause.Error()}}}
}

// recordAfter is how long a hold is held before its acquisition record
// is written: a short hold (a request's critical section) costs the
// library's two etcd requests and no more, and `baton locks` shows HELD
// FOR from then on.
const recordAfter = time.Second

// recordHeld writes, once the hold is recordAfter old, the acquisition
// records `baton locks` shows as HELD FOR (on the lease, in a transaction
// guarded by the hold); the returned func cancels the write, or waits for
// it and deletes the records, guarded by the revision that wrote them: a
// later holder's record on the same lease is never touched.
func (s *Server) recordHeld(h *hold) (done func()) {
	var rev int64
	wrote := make(chan struct{})
	write := time.AfterFunc(recordAfter, func() {
		defer close(wrote)
		ctx, cancel := context.WithTimeout(h.lock.Context(), 2*time.Second)
		defer cancel()
		ops := make([]clientv3.Op, len(h.names))
		for i, n := range h.names {
			ops[i] = keyspace.HeldPut(h.ns, h.lock.kind, n, h.lock.Lease(), h.lock.Acquired())
		}
		if resp, err := h.lock.Txn(ctx).Then(ops...).Commit(); err == nil && resp.Succeeded {
			rev = resp.Header.Revision
		}
	})
	return func() {
		if write.Stop() {
			return // never written
		}
		<-wrote
		if rev == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, n := range h.names {
			k := keyspace.HeldKey(h.ns, h.lock.kind, n, h.lock.Lease())
			_, _ = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpDelete(k)).Commit()
		}
	}
}
