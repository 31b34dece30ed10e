package serve_test

import (
	"testing"

	"connectrpc.com/connect"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
)

func TestSemaphoreHoldsAtMostLimit(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	req := func(try bool) *batonv1.HoldRequest {
		return &batonv1.HoldRequest{Names: []string{"exports"}, Kind: batonv1.LockKind_LOCK_KIND_SEMAPHORE, Limit: 2, Try: try}
	}
	a, b := e.hold(ctx, req(false)), e.hold(ctx, req(false))
	ha, hb := a.held(t), b.held(t)
	if ha.Token == hb.Token {
		t.Fatalf("two permits, one token %d", ha.Token)
	}
	if err := e.hold(ctx, req(true)).end(t); connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("a third permit of 2: %v, want ABORTED", err)
	}
	err := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"exports"}, Kind: batonv1.LockKind_LOCK_KIND_SEMAPHORE, Limit: 3}).end(t)
	wantCode(t, err, connect.CodeFailedPrecondition, "limit")
	c := e.hold(ctx, req(false))
	waitGauge(t, e, "waiting", 1)
	if _, err := e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: ha.HoldId})); err != nil {
		t.Fatal(err)
	}
	if hc := c.held(t); hc.Token <= hb.Token {
		t.Fatalf("token %d after %d", hc.Token, hb.Token)
	}
	in, err := e.client.Inspect(ctx, connect.NewRequest(&batonv1.InspectRequest{Target: &batonv1.InspectRequest_LocksPrefix{LocksPrefix: "exports"}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Msg.Locks) != 2 || in.Msg.Locks[0].Kind != batonv1.LockKind_LOCK_KIND_SEMAPHORE || in.Msg.Locks[0].Limit != 2 {
		t.Fatalf("inspect: %v", in.Msg)
	}
	b.cancel()
	c.cancel()
}

func TestReadersShareAndAWriterExcludes(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	rw := func(kind batonv1.LockKind, try bool) *batonv1.HoldRequest {
		return &batonv1.HoldRequest{Names: []string{"catalog"}, Kind: kind, Try: try}
	}
	r1, r2 := e.hold(ctx, rw(batonv1.LockKind_LOCK_KIND_READ, false)), e.hold(ctx, rw(batonv1.LockKind_LOCK_KIND_READ, false))
	h1 := r1.held(t)
	r2.held(t)
	if err := e.hold(ctx, rw(batonv1.LockKind_LOCK_KIND_WRITE, true)).end(t); connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("a writer while readers hold: %v, want ABORTED", err)
	}
	w := e.hold(ctx, rw(batonv1.LockKind_LOCK_KIND_WRITE, false))
	waitGauge(t, e, "waiting", 1)
	r1.cancel()
	r2.cancel()
	if hw := w.held(t); hw.Token <= h1.Token {
		t.Fatalf("writer's token %d after a reader's %d", hw.Token, h1.Token)
	}
	if err := e.hold(ctx, rw(batonv1.LockKind_LOCK_KIND_READ, true)).end(t); connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("a reader while the writer holds: %v, want ABORTED", err)
	}
	w.cancel()
}
