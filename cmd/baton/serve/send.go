package serve

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// A caller that stops reading its stream (a frozen process, a full event
// loop, a client that never reads) makes the stream's next message wait on
// HTTP/2 flow control or a full socket: an unbounded Send would keep the
// hold's loop from its deadlines, and the hold from its end. Every message
// of a stream (Hold, Lead, Shards, Observe) is sent by its sender, under a
// write deadline, sendTimeout; past it
// net/http resets the stream (HTTP/2) or closes the connection (HTTP/1.1)
// and the Send fails.
//
// Such a caller may still believe it holds, until the validity it was last
// given: the hold ends at once (no heartbeat extends it from then on), but
// its key is deleted only once that validity has run out, as at a
// heartbeat timeout. A membership's shards are kept as long: it leaves its
// group only then.

// sendTimeout bounds one message's send on a stream of ttl: a twentieth of
// the TTL. A hold's loop sends at most one message (release_requested,
// end_requested) before it sees a deadline, then lost: two sends take at
// most a tenth of the TTL, within the fifth that the library's margin
// keeps between its deadline and the lease's expiry, so lost is still
// sent, and the key deleted, before the lease could expire.
func sendTimeout(ttl time.Duration) time.Duration { return ttl / 20 }

// errCallerUnreachable ends a hold whose caller did not take a message
// within sendTimeout. It is a stream's end (CAUSE_STREAM_CLOSED), not the
// caller's: see awaitValidity.
var errCallerUnreachable = fmt.Errorf("%w: the caller did not take a message within the send timeout", errStreamClosed)

type writerKey struct{}

// withWriter keeps each request's response controller in its context, for
// the write deadline of a stream's sends.
func withWriter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), writerKey{}, http.NewResponseController(w))))
	})
}

// sender sends a stream's messages, each under a write deadline.
type sender struct {
	rc      *http.ResponseController // nil outside Handler (no deadline)
	timeout time.Duration
	onLate  func() // counts a send past its deadline
	// beforeLate (tests) runs in a late send's timer before the deadline
	// is set: the timer goroutine's scheduling delay.
	beforeLate func()
}

func (s *Server) sender(ctx context.Context, ttl time.Duration) sender {
	rc, _ := ctx.Value(writerKey{}).(*http.ResponseController)
	snd := sender{rc: rc, timeout: sendTimeout(ttl), onLate: s.metrics.sendTimeouts.Inc}
	if s.cfg.hooks != nil {
		snd.beforeLate = s.cfg.hooks.lateSend
	}
	return snd
}

// send runs send (a Stream's Send) under the write deadline. It returns
// nil, errCallerUnreachable when the deadline passed, or errStreamClosed
// (wrapping the Send's error) when the stream ended otherwise.
//
// The deadline is set only once the send is late: a timer sets it to the
// past, which resets the stream (HTTP/2) or fails the connection's write
// (HTTP/1.1) under the blocked Send. A send in time costs the timer, not
// two deadline changes and a flush through the connection's goroutine.
func (s sender) send(send func() error) error {
	if s.rc == nil {
		if err := send(); err != nil {
			return fmt.Errorf("%w: %w", errStreamClosed, err)
		}
		return nil
	}
	fired := make(chan struct{})
	late := time.AfterFunc(s.timeout, func() {
		defer close(fired)
		if s.beforeLate != nil {
			s.beforeLate()
		}
		s.onLate()                            // counted before the reset goes out: a caller that sees it finds the count
		_ = s.rc.SetWriteDeadline(time.Now()) // ErrNotSupported: no deadline to keep
	})
	err := send()
	if !late.Stop() {
		// The deadline passed, during the send or just after it: the
		// stream is reset, whether or not the message went out. Its
		// setting must be done before the handler may return: net/http
		// forgets (and pools) a stream's writer then.
		<-fired
		return errCallerUnreachable
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errStreamClosed, err)
	}
	return nil
}

// validity is the hold's validity deadline now (validUntil): for a hold
// that ended, never earlier than the last validity its caller was given,
// since no heartbeat extended it since and the library's deadline only
// moves on.
func (h *hold) validity() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil()
}

// awaitValidity waits, for a hold whose caller may not have heard of its
// end, until the validity the caller was last given (until, from
// validity: the caller ends the hold there by its own clock, if it lives)
// and the drift margin after it have run out, or the caller's Release
// says it does not hold, or the server shuts down. Not for the lease's
// loss: its keys may outlive it (config.KeysToDeadline). The hold is
// already ended: no heartbeat extends it meanwhile.
func (s *Server) awaitValidity(h *hold, until time.Time) {
	until = until.Add(driftMargin(h.budget))
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-t.C:
	case <-h.release:
	case <-s.stopCtx.Done():
	}
}
