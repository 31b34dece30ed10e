package serve_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/serve"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rbac"
)

// observeStream is one open Observe, read into states.
type observeStream struct {
	states chan *batonv1.ObserveResponse
	done   chan error
	cancel context.CancelFunc
}

func (e *env) observe(ctx context.Context, req *batonv1.ObserveRequest) *observeStream {
	ctx, cancel := context.WithCancel(ctx)
	s := &observeStream{states: make(chan *batonv1.ObserveResponse, 16), done: make(chan error, 1), cancel: cancel}
	go func() {
		st, err := e.client.Observe(ctx, connect.NewRequest(req))
		if err != nil {
			s.done <- err
			return
		}
		defer func() { _ = st.Close() }()
		for st.Receive() {
			s.states <- st.Msg()
		}
		s.done <- st.Err()
	}()
	return s
}

// next is the next state; it fails when the stream ends first.
func (s *observeStream) next(t *testing.T) *batonv1.ObserveResponse {
	t.Helper()
	select {
	case m := <-s.states:
		return m
	case err := <-s.done:
		t.Fatalf("observation ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no state in 30 s")
	}
	return nil
}

func TestObserveFollowsTheLeaderAndTheHolder(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	o := e.observe(ctx, &batonv1.ObserveRequest{Kind: batonv1.ObjectKind_OBJECT_KIND_ELECTION, Name: "o"})
	if m := o.next(t); m.Holder != nil || m.Revision <= 0 {
		t.Fatalf("first state %v, want none", m)
	}
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "o", Value: "host-a"})
	la := a.leading(t)
	m := o.next(t)
	if h := m.Holder; h == nil || h.Key != la.Key || h.Token != la.Token || h.Value != "host-a" || h.Lease != la.Lease {
		t.Fatalf("state %v, want leader %v", m, la)
	}
	if err := e.resign(ctx, la.HoldId); err != nil {
		t.Fatal(err)
	}
	if next := o.next(t); next.Holder != nil || next.Revision <= m.Revision {
		t.Fatalf("state %v after the resignation at a revision past %d, want none", next, m.Revision)
	}

	l := e.observe(ctx, &batonv1.ObserveRequest{Kind: batonv1.ObjectKind_OBJECT_KIND_LOCK, Name: "m"})
	if m := l.next(t); m.Holder != nil {
		t.Fatalf("first state %v, want free", m)
	}
	h := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"m"}, Identity: "svc-h"})
	hh := h.held(t)
	if m := l.next(t); m.Holder == nil || m.Holder.Key != hh.Keys[0] || m.Holder.Token != hh.Token || m.Holder.Identity != "svc-h" {
		t.Fatalf("state %v, want holder %v", m, hh)
	}
	// Shutdown ends an observation with UNAVAILABLE.
	e.stop()
	for {
		select {
		case <-l.states: // the release's state, if it came first
			continue
		case err := <-l.done:
			if connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("observation at shutdown: %v, want UNAVAILABLE", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("observation did not end at shutdown")
		}
		break
	}
	o.cancel()
}

func TestObserveChecksItsFieldsAndTheReadRight(t *testing.T) {
	e := start(t, func(c *serve.Config) {
		c.Policy = rbac.Policy{Namespaces: []rbac.Namespace{{Name: c.Namespace, Observers: []string{"viewer"}}}}
		c.PolicyFile = "test-policy.yaml"
	})
	ctx := ctxT(t)
	for field, req := range map[string]*batonv1.ObserveRequest{
		"kind":      {Name: "x"},
		"name":      {Kind: batonv1.ObjectKind_OBJECT_KIND_LOCK},
		"namespace": {Namespace: "a b", Kind: batonv1.ObjectKind_OBJECT_KIND_LOCK, Name: "x"},
	} {
		o := e.observe(ctx, req)
		wantCode(t, <-o.done, connect.CodeInvalidArgument, field)
	}
	// Over plaintext TCP the caller is its address, which the policy
	// does not list: no read.
	o := e.observe(ctx, &batonv1.ObserveRequest{Kind: batonv1.ObjectKind_OBJECT_KIND_ELECTION, Name: "x"})
	wantCode(t, <-o.done, connect.CodePermissionDenied, "")
}

// An observer that never reads its stream (its streams' flow-control
// window is 0, so the first state cannot leave the server) is cut off at
// the send timeout, as a holder is: the stream is reset, the send
// counted, and the observation ends (the leak check at the end finds no
// goroutine of it). Another observer of the same lock follows it
// meanwhile.
func TestObserverThatNeverReadsItsStreamIsCutOff(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	addr := strings.TrimPrefix(e.url, "http://")
	other := e.observe(ctx, &batonv1.ObserveRequest{Kind: batonv1.ObjectKind_OBJECT_KIND_LOCK, Name: "watched"})
	if m := other.next(t); m.Holder != nil {
		t.Fatalf("first state %v, want none", m)
	}

	c := dialH2(t, addr, 0)
	sent := c.call(t, addr, "Observe", `{"kind":"OBJECT_KIND_LOCK","name":"watched"}`)
	c.awaitReset(t)
	timeout := serve.SendTimeout(mutex.DefaultTTL)
	if got := time.Since(sent); got < timeout {
		t.Fatalf("reset %v after the request, before the send timeout %v", got, timeout)
	}
	if n := counter(t, e, "baton_serve_send_timeouts_total"); n != 1 {
		t.Fatalf("baton_serve_send_timeouts_total %v, want 1", n)
	}

	h := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"watched"}, Ttl: dur(10 * time.Second)})
	held := h.held(t)
	if m := other.next(t); m.Holder == nil || m.Holder.Token != held.Token {
		t.Fatalf("state %v, want the holder with token %d", m, held.Token)
	}
}
