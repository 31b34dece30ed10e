package serve_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/serve"
	"github.com/batonhq/baton/mutex"
)

func TestHoldSendsHeldFirstAndReleaseDeletesTheKey(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	s := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"invoice-42"}, Identity: "billing-1", Ttl: dur(10 * time.Second)})
	h := s.held(t)
	if h.Token <= 0 || len(h.Keys) != 1 || len(h.HoldId) != 32 {
		t.Fatalf("held %v", h)
	}
	resp, err := e.etcd.Get(ctx, h.Keys[0])
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("key %s: %v %v", h.Keys[0], resp, err)
	}
	if kv := resp.Kvs[0]; kv.CreateRevision != h.Token || string(kv.Value) != "billing-1" || kv.Lease != h.Lease {
		t.Fatalf("key %v, held %v", kv, h)
	}
	if h.Ttl.AsDuration() != 10*time.Second || h.HeartbeatInterval.AsDuration() != 2*time.Second {
		t.Fatalf("ttl %v, heartbeat interval %v", h.Ttl.AsDuration(), h.HeartbeatInterval.AsDuration())
	}
	// The validity is from the request's arrival: at most the budget past
	// the send, and the caller's deadline is ahead of now.
	if v := h.Validity.AsDuration(); v <= 0 || s.sent.Add(v).Before(time.Now()) || v > serve.Budget(10*time.Second)+time.Since(s.sent) {
		t.Fatalf("validity %v", v)
	}

	in, err := e.client.Inspect(ctx, connect.NewRequest(&batonv1.InspectRequest{Target: &batonv1.InspectRequest_LocksPrefix{}}))
	if err != nil {
		t.Fatal(err)
	}
	if l := in.Msg.Locks; len(l) != 1 || l[0].Name != "invoice-42" || l[0].Holder.Token != h.Token || l[0].Holder.Identity != "billing-1" {
		t.Fatalf("inspect: %v", in.Msg)
	}

	if _, err := e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: h.HoldId})); err != nil {
		t.Fatal(err)
	}
	if m := s.next(t); m.GetReleased() == nil {
		t.Fatalf("after Release: %v, want released", m)
	}
	if err := s.end(t); err != nil {
		t.Fatalf("stream end: %v", err)
	}
	if k := e.lockKeys(t); len(k) != 0 {
		t.Fatalf("keys left after Release: %v", k)
	}
	if _, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: h.HoldId})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("heartbeat after release: %v, want NOT_FOUND", err)
	}
	if n := metric(t, e, "baton_serve_holds_ended_total", "released"); n != 1 {
		t.Fatalf("ended{released} = %v", n)
	}
}

// metric is the value of one series (by one label value) of a counter or
// gauge vector of the env's registry; 0 when absent.
func metric(t *testing.T, e *env, name, label string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() != label {
					continue
				}
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// waitGauge waits until baton_serve_holds{state} is n: a waiter parked in
// the library has no event of its own to wait on.
func waitGauge(t *testing.T, e *env, state string, n float64) {
	t.Helper()
	clitest.WaitFor(t, func() bool { return metric(t, e, "baton_serve_holds", state) == n })
}

func waitCounter(t *testing.T, e *env, name, label string, n float64) {
	t.Helper()
	clitest.WaitFor(t, func() bool { return metric(t, e, name, label) == n })
}

func TestNextHolderWaitsAndGetsAGreaterToken(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"report"}})
	ha := a.held(t)
	b := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"report"}})
	waitGauge(t, e, "waiting", 1)
	select {
	case m := <-b.events:
		t.Fatalf("second holder got %v while the first holds", m)
	default:
	}
	if _, err := e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: ha.HoldId})); err != nil {
		t.Fatal(err)
	}
	hb := b.held(t)
	if hb.Token <= ha.Token {
		t.Fatalf("second token %d, first %d", hb.Token, ha.Token)
	}
	b.cancel()
	e.waitNoLockKeys(t)
}

func TestTryOnAHeldLockIsAbortedAndWaitTimeoutIsDeadlineExceeded(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"x"}})
	a.held(t)
	if err := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"x"}, Try: true}).end(t); connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("try: %v, want ABORTED", err)
	}
	if err := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"x"}, WaitTimeout: dur(300 * time.Millisecond)}).end(t); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("wait_timeout: %v, want DEADLINE_EXCEEDED", err)
	}
	if k := e.lockKeys(t); len(k) != 1 {
		t.Fatalf("keys %v, want the holder's alone", k)
	}
}

// A caller whose heartbeats stop loses the hold: lost with
// HEARTBEAT_TIMEOUT reaches it while its key still exists, no later than
// the deadline it computed from held's validity, and the next holder gets
// a greater token.
func TestSilentCallerIsToldLostBeforeItsKeyIsDeleted(t *testing.T) {
	keyAtLost := make(chan int64, 1)
	var holderKey atomic.Pointer[string]
	var e *env
	e = start(t, func(c *serve.Config) {
		serve.WithHooks(c, serve.Hooks{BeforeUnlock: func(id string, cause error) {
			resp, err := e.etcd.Get(context.Background(), *holderKey.Load(), clientv3.WithCountOnly())
			if err == nil {
				keyAtLost <- resp.Count
			}
		}})
	})
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"silent"}, Ttl: dur(2 * time.Second)})
	ha := a.held(t)
	holderKey.Store(&ha.Keys[0])
	clientDeadline := a.sent.Add(ha.Validity.AsDuration())
	next := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"silent"}, Ttl: dur(2 * time.Second)})
	m := a.next(t)
	lostAt := time.Now()
	if m.GetLost().GetCause() != batonv1.Cause_CAUSE_HEARTBEAT_TIMEOUT {
		t.Fatalf("got %v, want lost HEARTBEAT_TIMEOUT", m)
	}
	if n := <-keyAtLost; n != 1 {
		t.Fatal("the holder's key was gone when lost was sent")
	}
	if lostAt.Before(clientDeadline) {
		t.Fatalf("lost at %v, before the caller's own deadline %v: the server ended a hold the caller still believed in", lostAt, clientDeadline)
	}
	hn := next.held(t)
	if hn.Token <= ha.Token {
		t.Fatalf("next token %d, lost one %d", hn.Token, ha.Token)
	}
	if err := a.end(t); err != nil {
		t.Fatalf("lost stream's end: %v", err)
	}
	if _, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: ha.HoldId})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("late heartbeat: %v, want NOT_FOUND", err)
	}
}

// Heartbeats keep a hold past its TTL; each reply's validity is within
// the budget and the lease's deadline.
func TestHeartbeatsKeepTheHold(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	ttl := 2 * time.Second
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"beat"}, Ttl: dur(ttl)})
	ha := a.held(t)
	end := time.Now().Add(2 * ttl)
	for i := 0; time.Now().Before(end); i++ {
		if i > 100 {
			t.Fatal("too many heartbeats")
		}
		sent := time.Now()
		r, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: ha.HoldId}))
		if err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
		if v := r.Msg.Validity.AsDuration(); v <= 0 || v > serve.Budget(ttl) {
			t.Fatalf("validity %v, budget %v", v, serve.Budget(ttl))
		}
		if !sent.Add(r.Msg.Validity.AsDuration()).After(time.Now()) {
			t.Fatalf("the caller's deadline already passed on receipt")
		}
		select {
		case m := <-a.events:
			t.Fatalf("while heartbeating: %v", m)
		case <-time.After(ha.HeartbeatInterval.AsDuration()):
		}
	}
	a.cancel()
	e.waitNoLockKeys(t)
}

func TestClosedStreamDeletesTheKey(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"closed"}, Ttl: dur(60 * time.Second)})
	a.held(t)
	a.cancel()
	e.waitNoLockKeys(t) // well before the 60 s TTL: the stream's end released it
	waitCounter(t, e, "baton_serve_holds_ended_total", "stream_closed", 1)
}

func TestOperatorDeleteEndsTheHoldWithKeyGone(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"forced"}})
	ha := a.held(t)
	if _, err := e.etcd.Delete(ctx, ha.Keys[0]); err != nil {
		t.Fatal(err)
	}
	if m := a.next(t); m.GetLost().GetCause() != batonv1.Cause_CAUSE_KEY_GONE {
		t.Fatalf("got %v, want lost KEY_GONE", m)
	}
	if err := a.end(t); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseRequestArrivesOnTheStream(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"asked"}})
	a.held(t)
	if err := mutex.RequestRelease(ctx, e.etcd, "asked", "deploy in progress", mutex.WithNamespace(e.ns), mutex.WithIdentity("oncall")); err != nil {
		t.Fatal(err)
	}
	m := a.next(t).GetReleaseRequested()
	if m == nil || m.Reason != "deploy in progress" || !strings.Contains(m.By, "oncall") {
		t.Fatalf("got %v, want release_requested", m)
	}
	a.cancel()
	e.waitNoLockKeys(t)
}

// A release request put after a hold's acquisition but applied by the
// namespace's watch of requests before the hold follows them (forced: the
// hold paused between held and following) still arrives; and one hold's
// request never reaches another.
func TestReleaseRequestMadeBeforeTheHoldFollowsArrives(t *testing.T) {
	var follows atomic.Int32
	paused, resume := make(chan struct{}), make(chan struct{})
	var seenMu sync.Mutex
	seenRev := int64(0)
	e := start(t, func(c *serve.Config) {
		serve.WithHooks(c, serve.Hooks{
			BeforeFollow: func(string) {
				if follows.Add(1) == 2 {
					close(paused)
					<-resume
				}
			},
			RequestsSeen: func(_ string, rev int64) {
				seenMu.Lock()
				seenRev = max(seenRev, rev)
				seenMu.Unlock()
			},
		})
	})
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"other"}}) // starts the namespace's watch
	a.held(t)
	b := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"asked"}})
	b.held(t)
	<-paused
	if err := mutex.RequestRelease(ctx, e.etcd, "asked", "before follow", mutex.WithNamespace(e.ns), mutex.WithIdentity("oncall")); err != nil {
		t.Fatal(err)
	}
	g, err := e.etcd.Get(ctx, "/"+e.ns+"/v1/release/", clientv3.WithPrefix())
	if err != nil || len(g.Kvs) != 1 {
		t.Fatalf("request keys: %v %v", g, err)
	}
	for i := 0; ; i++ {
		seenMu.Lock()
		done := seenRev >= g.Kvs[0].ModRevision
		seenMu.Unlock()
		if done {
			break
		}
		if i > 500 {
			t.Fatal("the namespace's watch never applied the request")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(resume)
	if m := b.next(t).GetReleaseRequested(); m == nil || m.Reason != "before follow" {
		t.Fatalf("got %v, want release_requested", m)
	}
	select {
	case m := <-a.events:
		t.Fatalf("the other hold got %v", m)
	case <-time.After(200 * time.Millisecond):
	}
	a.cancel()
	b.cancel()
	e.waitNoLockKeys(t)
}

// Shutdown ends every held stream with lost SERVER_SHUTDOWN, every waiting
// one with UNAVAILABLE, and leaves no key.
func TestShutdownEndsEveryStreamWithACause(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"one"}})
	b := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"two", "three"}})
	a.held(t)
	b.held(t)
	w := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"one"}})
	waitGauge(t, e, "waiting", 1)
	e.stop()
	for _, s := range []*stream{a, b} {
		if m := s.next(t); m.GetLost().GetCause() != batonv1.Cause_CAUSE_SERVER_SHUTDOWN {
			t.Fatalf("got %v, want lost SERVER_SHUTDOWN", m)
		}
	}
	if err := w.end(t); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("waiting stream: %v, want UNAVAILABLE", err)
	}
	if k := e.lockKeys(t); len(k) != 0 {
		t.Fatalf("keys left: %v", k)
	}
}

func TestSetHoldsEveryNameWithOneToken(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"ledger", "accounts"}})
	h := a.held(t)
	if len(h.Keys) != 2 {
		t.Fatalf("keys %v", h.Keys)
	}
	for _, k := range h.Keys {
		resp, err := e.etcd.Get(ctx, k)
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != h.Token {
			t.Fatalf("key %s: %v %v, want CreateRevision %d", k, resp, err, h.Token)
		}
	}
	if err := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"accounts"}, Try: true}).end(t); connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("try one name of a held set: %v", err)
	}
	a.cancel()
	e.waitNoLockKeys(t)
}

// Forced at the step between a hold's end and its key's delete (the
// BeforeUnlock hook): a heartbeat is refused, so nothing revives a hold that
// ended, and a Release says the hold ended first instead of succeeding.
func TestNothingRevivesAHoldThatEnded(t *testing.T) {
	type probe struct {
		beat    error
		release chan error
	}
	probes := make(chan probe, 1)
	waiting := make(chan struct{}, 1)
	var e *env
	e = start(t, func(c *serve.Config) {
		serve.WithHooks(c, serve.Hooks{ReleaseWaiting: func(string) { waiting <- struct{}{} }, BeforeUnlock: func(id string, cause error) {
			ctx := context.Background()
			_, beat := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: id}))
			p := probe{beat: beat, release: make(chan error, 1)}
			// Release waits for the delete this hook holds back: it runs
			// on, and is judged once the hold's end goes on.
			go func() {
				_, err := e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: id}))
				p.release <- err
			}()
			<-waiting
			probes <- p
		}})
	})
	ctx := ctxT(t)
	for _, c := range []struct {
		name  string
		cause batonv1.Cause
		end   func(h *batonv1.Held)
	}{
		{"heartbeat timeout", batonv1.Cause_CAUSE_HEARTBEAT_TIMEOUT, func(*batonv1.Held) {}},
		{"key deleted", batonv1.Cause_CAUSE_KEY_GONE, func(h *batonv1.Held) {
			if _, err := e.etcd.Delete(ctx, h.Keys[0]); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		s := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"ended"}, Ttl: dur(2 * time.Second)})
		h := s.held(t)
		c.end(h)
		if m := s.next(t); m.GetLost().GetCause() != c.cause {
			t.Fatalf("%s: got %v", c.name, m)
		}
		p := <-probes
		if connect.CodeOf(p.beat) != connect.CodeFailedPrecondition {
			t.Fatalf("%s: a heartbeat after the end: %v, want FAILED_PRECONDITION", c.name, p.beat)
		}
		if err := <-p.release; connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("%s: a release after the end: %v, want FAILED_PRECONDITION", c.name, err)
		}
		if err := s.end(t); err != nil {
			t.Fatal(err)
		}
		e.waitNoLockKeys(t)
	}
}

// lock_delay reaches the library: after a holder is lost without
// releasing, the next waits the delay out (timed by etcd).
func TestLockDelayHoldsOffTheNextHolderAfterALoss(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	req := &batonv1.HoldRequest{Names: []string{"delayed"}, LockDelay: dur(2 * time.Second)}
	a := e.hold(ctx, req)
	ha := a.held(t)
	b := e.hold(ctx, req)
	waitGauge(t, e, "waiting", 1)
	if _, err := e.etcd.Delete(ctx, ha.Keys[0]); err != nil { // an operator's force-unlock: no release
		t.Fatal(err)
	}
	deleted := time.Now()
	if m := a.next(t); m.GetLost() == nil {
		t.Fatalf("got %v, want lost", m)
	}
	hb := b.held(t)
	if waited := time.Since(deleted); waited < 1500*time.Millisecond {
		t.Fatalf("the next holder acquired %v after the loss, within the 2 s lock-delay", waited)
	}
	if hb.Token <= ha.Token {
		t.Fatalf("token %d after %d", hb.Token, ha.Token)
	}
}

// A silent holder with a lock_delay is a loss too: the next holder waits
// the delay out after the server ends the hold.
func TestLockDelayFollowsAHeartbeatTimeout(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	req := &batonv1.HoldRequest{Names: []string{"delayed-silent"}, Ttl: dur(2 * time.Second), LockDelay: dur(2 * time.Second)}
	a := e.hold(ctx, req)
	ha := a.held(t)
	b := e.hold(ctx, req)
	if m := a.next(t); m.GetLost().GetCause() != batonv1.Cause_CAUSE_HEARTBEAT_TIMEOUT {
		t.Fatalf("got %v", m)
	}
	lost := time.Now()
	hb := b.held(t)
	if waited := time.Since(lost); waited < 1500*time.Millisecond {
		t.Fatalf("the next holder acquired %v after the timeout, within the 2 s lock-delay", waited)
	}
	if hb.Token <= ha.Token {
		t.Fatalf("token %d after %d", hb.Token, ha.Token)
	}
	// Release is clean: no delay after it.
	if _, err := e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: hb.HoldId})); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	c := e.hold(ctx, req)
	c.held(t)
	if waited := time.Since(released); waited > time.Second {
		t.Fatalf("%v after a clean release", waited)
	}
}

// Holds of different names share one session (one lease); a hold of a
// name already held or waited for takes another session of the TTL, so
// it is queued in etcd by a key of its own and holds once the holder's
// key is deleted, with no write after it.
func TestAWaiterIsQueuedInEtcdOnASessionOfItsOwn(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"queued"}})
	ha := a.held(t)
	o := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"other"}})
	if ho := o.held(t); ho.Lease != ha.Lease {
		t.Fatalf("holds of two names on leases %x and %x, want one", ho.Lease, ha.Lease)
	}
	w := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"queued"}})
	var waiter int64 // the waiter's key's CreateRevision
	for i := 0; waiter == 0; i++ {
		resp, err := e.etcd.Get(ctx, "/"+e.ns+"/v1/lock/queued/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if kv.CreateRevision != ha.Token {
				if kv.Lease == ha.Lease {
					t.Fatalf("the waiter's key is on the holder's lease %x", kv.Lease)
				}
				waiter = kv.CreateRevision
			}
		}
		if i > 500 {
			t.Fatal("the waiter's key never appeared in etcd")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: ha.HoldId})); err != nil {
		t.Fatal(err)
	}
	if hw := w.held(t); hw.Token != waiter || hw.Lease == ha.Lease {
		t.Fatalf("the waiter holds with token %d on lease %x, want its queued key's %d on a lease other than %x", hw.Token, hw.Lease, waiter, ha.Lease)
	}
	a.cancel()
	o.cancel()
	w.cancel()
	e.waitNoLockKeys(t)
}
