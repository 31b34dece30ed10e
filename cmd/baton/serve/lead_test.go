package serve_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/serve"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/rbac"
)

// leadStream is one open Lead, read by a goroutine into events.
type leadStream struct{ *recv[batonv1.LeadResponse] }

func (e *env) lead(ctx context.Context, req *batonv1.LeadRequest) *leadStream {
	return &leadStream{open(ctx, 16, func(ctx context.Context) (*connect.ServerStreamForClient[batonv1.LeadResponse], error) {
		return e.client.Lead(ctx, connect.NewRequest(req))
	})}
}

func (s *leadStream) leading(t *testing.T) *batonv1.Leading {
	t.Helper()
	m := s.next(t)
	if m.GetLeading() == nil {
		t.Fatalf("first message %v, want leading", m)
	}
	return m.GetLeading()
}

// quiet fails if the stream has a message now.
func (s *leadStream) quiet(t *testing.T) {
	t.Helper()
	select {
	case m := <-s.events:
		t.Fatalf("got %v while another leads", m)
	default:
	}
}

// electionKeys is the number of candidate keys of election name.
func (e *env) electionKeys(t *testing.T, name string) int64 {
	t.Helper()
	resp, err := e.etcd.Get(context.Background(), "/"+e.ns+"/v1/election/"+name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// waitCandidates waits until election name has n candidates.
func (e *env) waitCandidates(t *testing.T, name string, n int) {
	t.Helper()
	el, err := election.New(e.etcd, name, election.WithNamespace(e.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = el.Close() }()
	clitest.WaitFor(t, func() bool {
		c, err := el.Candidates(context.Background())
		return err == nil && len(c) == n
	})
}

func (e *env) resign(ctx context.Context, id string) error {
	_, err := e.client.Resign(ctx, connect.NewRequest(&batonv1.ResignRequest{HoldId: id}))
	return err
}

func TestLeadSendsLeadingAndTheNextLeadsWhenTheStreamCloses(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "scheduler", Identity: "host-a", Ttl: dur(10 * time.Second)})
	la := a.leading(t)
	if la.Token <= 0 || len(la.HoldId) != 32 || la.HeartbeatInterval.AsDuration() != 2*time.Second {
		t.Fatalf("leading %v", la)
	}
	if v := la.Validity.AsDuration(); v <= 0 || v > serve.Budget(10*time.Second)+time.Since(a.sent) {
		t.Fatalf("validity %v", v)
	}
	resp, err := e.etcd.Get(ctx, la.Key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("key %s: %v %v", la.Key, resp, err)
	}
	if kv := resp.Kvs[0]; kv.CreateRevision != la.Token || string(kv.Value) != "host-a" || kv.Lease != la.Lease {
		t.Fatalf("key %v, leading %v: want the identity as the value", kv, la)
	}
	b := e.lead(ctx, &batonv1.LeadRequest{Name: "scheduler", Value: "b's value", Identity: "host-b"})
	waitGauge(t, e, "waiting", 1)
	e.waitCandidates(t, "scheduler", 2)
	b.quiet(t)
	a.cancel()
	lb := b.leading(t)
	if lb.Token <= la.Token {
		t.Fatalf("second token %d, first %d", lb.Token, la.Token)
	}
	if resp, err := e.etcd.Get(ctx, lb.Key); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "b's value" {
		t.Fatalf("key %s: %v %v", lb.Key, resp, err)
	}
	waitCounter(t, e, "baton_serve_holds_ended_total", "stream_closed", 1)
	b.cancel()
	clitest.WaitFor(t, func() bool { return e.electionKeys(t, "scheduler") == 0 })
}

// A leader whose heartbeats stop is told ended with HEARTBEAT_TIMEOUT
// while its key still exists; then the next candidate leads.
func TestSilentLeaderIsToldEndedBeforeItsKeyIsDeleted(t *testing.T) {
	keyAtEnd := make(chan int64, 1)
	var e *env
	var leaderKey atomic.Value // the leader's key, set once it leads
	e = start(t, func(c *serve.Config) {
		serve.WithHooks(c, serve.Hooks{BeforeUnlock: func(id string, cause error) {
			resp, err := e.etcd.Get(context.Background(), leaderKey.Load().(string), clientv3.WithCountOnly())
			if err == nil {
				keyAtEnd <- resp.Count
			}
		}})
	})
	ctx := ctxT(t)
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "silent", Ttl: dur(2 * time.Second)})
	la := a.leading(t)
	leaderKey.Store(la.Key) // before the term can end: it ends at the budget past the request
	clientDeadline := a.sent.Add(la.Validity.AsDuration())
	b := e.lead(ctx, &batonv1.LeadRequest{Name: "silent", Ttl: dur(2 * time.Second)})
	m := a.next(t)
	endedAt := time.Now()
	if m.GetEnded().GetCause() != batonv1.Cause_CAUSE_HEARTBEAT_TIMEOUT {
		t.Fatalf("got %v, want ended HEARTBEAT_TIMEOUT", m)
	}
	if n := <-keyAtEnd; n != 1 {
		t.Fatalf("leader's key count %d when ended was sent, want 1", n)
	}
	if endedAt.Before(clientDeadline) {
		t.Fatalf("ended at %v, before the caller's own deadline %v", endedAt, clientDeadline)
	}
	lb := b.leading(t)
	if lb.Token <= la.Token {
		t.Fatalf("next token %d, silent one %d", lb.Token, la.Token)
	}
	if err := a.end(t); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: la.HoldId})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("late heartbeat: %v, want NOT_FOUND", err)
	}
}

func TestResignHandsLeadershipToTheNextCandidate(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "r"})
	la := a.leading(t)
	b := e.lead(ctx, &batonv1.LeadRequest{Name: "r"})
	e.waitCandidates(t, "r", 2)
	if _, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: la.HoldId})); err != nil {
		t.Fatal(err)
	}
	if err := e.resign(ctx, la.HoldId); err != nil {
		t.Fatal(err)
	}
	if m := a.next(t); m.GetResigned() == nil {
		t.Fatalf("after Resign: %v, want resigned", m)
	}
	if err := a.end(t); err != nil {
		t.Fatal(err)
	}
	if lb := b.leading(t); lb.Token <= la.Token {
		t.Fatalf("next token %d after %d", lb.Token, la.Token)
	}
	if err := e.resign(ctx, la.HoldId); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("second Resign: %v, want NOT_FOUND", err)
	}
	waitCounter(t, e, "baton_serve_holds_ended_total", "released", 1)
	// Resign and Transfer are for terms.
	h := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"r"}})
	hh := h.held(t)
	wantCode(t, e.resign(ctx, hh.HoldId), connect.CodeFailedPrecondition, "hold_id")
	_, err := e.client.Transfer(ctx, connect.NewRequest(&batonv1.TransferRequest{HoldId: hh.HoldId, To: "x"}))
	wantCode(t, err, connect.CodeFailedPrecondition, "hold_id")
}

// Transfer skips the next candidate for the one it names, by identity or
// by key; a candidate that is not there is NOT_FOUND and the term goes on.
func TestTransferHandsOverToTheNamedCandidate(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "t", Identity: "svc-a"})
	la := a.leading(t)
	b := e.lead(ctx, &batonv1.LeadRequest{Name: "t", Identity: "svc-b"})
	e.waitCandidates(t, "t", 2)
	c := e.lead(ctx, &batonv1.LeadRequest{Name: "t", Identity: "svc-c"})
	e.waitCandidates(t, "t", 3)

	_, err := e.client.Transfer(ctx, connect.NewRequest(&batonv1.TransferRequest{HoldId: la.HoldId, To: "svc-z"}))
	wantCode(t, err, connect.CodeNotFound, "to")
	_, err = e.client.Transfer(ctx, connect.NewRequest(&batonv1.TransferRequest{HoldId: la.HoldId, To: "/" + e.ns + "/v1/election/t/1"}))
	wantCode(t, err, connect.CodeNotFound, "to")
	if _, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: la.HoldId})); err != nil {
		t.Fatalf("the term after a refused Transfer: %v", err)
	}
	a.quiet(t)

	r, err := e.client.Transfer(ctx, connect.NewRequest(&batonv1.TransferRequest{HoldId: la.HoldId, To: "svc-c"}))
	if err != nil {
		t.Fatal(err)
	}
	if m := a.next(t); m.GetResigned() == nil {
		t.Fatalf("after Transfer: %v, want resigned", m)
	}
	if err := a.end(t); err != nil {
		t.Fatal(err)
	}
	lc := c.leading(t)
	if lc.Token <= la.Token || r.Msg.Token != lc.Token {
		t.Fatalf("successor's token %d (Transfer said %d), old leader's %d", lc.Token, r.Msg.Token, la.Token)
	}
	b.quiet(t)

	// By key, back to b.
	el, err := election.New(e.etcd, "t", election.WithNamespace(e.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = el.Close() }()
	var bKey string
	clitest.WaitFor(t, func() bool {
		cands, err := el.Candidates(ctx)
		for _, x := range cands {
			if x.Value == "svc-b" {
				bKey = x.Key
			}
		}
		return err == nil && bKey != ""
	})
	if _, err := e.client.Transfer(ctx, connect.NewRequest(&batonv1.TransferRequest{HoldId: lc.HoldId, To: bKey})); err != nil {
		t.Fatal(err)
	}
	if lb := b.leading(t); lb.Key != bKey || lb.Token <= lc.Token {
		t.Fatalf("leading %v after a transfer to %s (token %d)", lb, bKey, lc.Token)
	}
}

// A better candidate under Preferred, an operator's `baton resign --to`
// and `baton resign --request` each reach the leader as end_requested.
func TestEndRequestedArrivesOnTheStream(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "p", Identity: "old", Strategy: batonv1.Strategy_STRATEGY_PREFERRED, Version: "v1.0"})
	la := a.leading(t)
	if err := election.RequestRelease(ctx, e.etcd, "p", "deploy in progress", election.WithNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	if m := a.next(t).GetEndRequested(); m == nil || m.Reason != "deploy in progress" {
		t.Fatalf("got %v, want end_requested with the operator's reason", m)
	}
	b := e.lead(ctx, &batonv1.LeadRequest{Name: "p", Identity: "better", Strategy: batonv1.Strategy_STRATEGY_PREFERRED, Priority: 5})
	m := a.next(t).GetEndRequested()
	if m == nil || m.Deadline == nil || !m.Deadline.AsTime().After(time.Now()) {
		t.Fatalf("got %v, want end_requested with a deadline", m)
	}
	b.quiet(t)
	if err := e.resign(ctx, la.HoldId); err != nil {
		t.Fatal(err)
	}
	if m := a.next(t); m.GetResigned() == nil {
		t.Fatalf("got %v, want resigned", m)
	}
	if lb := b.leading(t); lb.Token <= la.Token {
		t.Fatalf("token %d after %d", lb.Token, la.Token)
	}
}

func TestLeadRefusesUnlistedIdentitiesWithNothingWritten(t *testing.T) {
	e := start(t, func(c *serve.Config) {
		c.Policy = rbac.Policy{Namespaces: []rbac.Namespace{{Name: c.Namespace, Contenders: []string{"svc-a"}, Observers: []string{"viewer"}}}}
		c.PolicyFile = "test-policy.yaml"
	})
	ctx := ctxT(t)
	for _, req := range []*batonv1.LeadRequest{
		{Name: "x", Identity: "svc-b"},
		{Name: "x", Identity: "viewer"},
		{Namespace: "other", Name: "x", Identity: "svc-a"},
	} {
		wantCode(t, e.lead(ctx, req).end(t), connect.CodePermissionDenied, "")
	}
	for _, ns := range []string{e.ns, "other"} {
		r, err := e.etcd.Get(ctx, "/"+ns+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || r.Count != 0 {
			t.Fatalf("refused campaigns wrote in %s: %v %v", ns, r, err)
		}
	}
	e.lead(ctx, &batonv1.LeadRequest{Name: "x", Identity: "svc-a"}).leading(t)
}

func TestBadLeadRequestsAreInvalidArgumentNamingTheField(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	for field, req := range map[string]*batonv1.LeadRequest{
		"namespace": {Namespace: "a/b", Name: "x"},
		"name":      {},
		"value":     {Name: "x", Value: "a\x00b"},
		"ttl":       {Name: "x", Ttl: dur(time.Second)},
		"strategy":  {Name: "x", Strategy: 9},
		"version":   {Name: "x", Version: "v 1"},
		"identity":  {Name: "x", Identity: strings.Repeat("i", 300)},
	} {
		wantCode(t, e.lead(ctx, req).end(t), connect.CodeInvalidArgument, field)
	}
	wantCode(t, e.resign(ctx, "short"), connect.CodeInvalidArgument, "hold_id")
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "x"})
	la := a.leading(t)
	_, err := e.client.Transfer(ctx, connect.NewRequest(&batonv1.TransferRequest{HoldId: la.HoldId}))
	wantCode(t, err, connect.CodeInvalidArgument, "to")
	if n := e.electionKeys(t, "x"); n != 1 {
		t.Fatalf("%d keys, want the leader's", n)
	}
}

// Shutdown ends a term with ended SERVER_SHUTDOWN, a waiting candidate
// with UNAVAILABLE, and leaves no candidate key.
func TestShutdownEndsATermWithACause(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "down"})
	a.leading(t)
	b := e.lead(ctx, &batonv1.LeadRequest{Name: "down"})
	e.waitCandidates(t, "down", 2)
	e.stop()
	if m := a.next(t); m.GetEnded().GetCause() != batonv1.Cause_CAUSE_SERVER_SHUTDOWN {
		t.Fatalf("got %v, want ended SERVER_SHUTDOWN", m)
	}
	if err := a.end(t); err != nil {
		t.Fatal(err)
	}
	if err := b.end(t); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("waiting candidate: %v, want UNAVAILABLE", err)
	}
	if n := e.electionKeys(t, "down"); n != 0 {
		t.Fatalf("%d candidate keys left", n)
	}
}

// A Lead stream counts as a hold toward --max-holds-per-identity, and
// Release on a term's hold_id resigns it.
func TestLeadCountsTowardTheLimitsAndReleaseResigns(t *testing.T) {
	e := start(t, func(c *serve.Config) { c.MaxHolds, c.MaxHoldsPerIdentity = 10, 1 })
	ctx := ctxT(t)
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "lim", Identity: "svc-a"})
	la := a.leading(t)
	wantCode(t, e.hold(ctx, &batonv1.HoldRequest{Names: []string{"other"}, Identity: "svc-a"}).end(t), connect.CodeResourceExhausted, "")
	wantCode(t, e.lead(ctx, &batonv1.LeadRequest{Name: "lim2", Identity: "svc-a"}).end(t), connect.CodeResourceExhausted, "")
	if _, err := e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: la.HoldId})); err != nil {
		t.Fatal(err)
	}
	if m := a.next(t); m.GetResigned() == nil {
		t.Fatalf("after Release: %v, want resigned", m)
	}
	if err := a.end(t); err != nil {
		t.Fatal(err)
	}
	if n := e.electionKeys(t, "lim"); n != 0 {
		t.Fatalf("%d keys after the release", n)
	}
}

// A Transfer that would skip a candidate that is not baton's (an etcd
// concurrency.Election) is FAILED_PRECONDITION, and the term goes on.
func TestTransferPastAForeignCandidateIsFailedPrecondition(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "f", Identity: "svc-a"})
	la := a.leading(t)
	sess, err := concurrency.NewSession(e.etcd, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sess.Close() }()
	fctx, stop := context.WithCancel(ctx)
	campaigned := make(chan error, 1)
	go func() {
		campaigned <- concurrency.NewElection(sess, "/"+e.ns+"/v1/election/f/").Campaign(fctx, "foreign")
	}()
	defer func() { stop(); <-campaigned }()
	e.waitCandidates(t, "f", 2)
	b := e.lead(ctx, &batonv1.LeadRequest{Name: "f", Identity: "svc-b"})
	e.waitCandidates(t, "f", 3)
	_, err = e.client.Transfer(ctx, connect.NewRequest(&batonv1.TransferRequest{HoldId: la.HoldId, To: "svc-b"}))
	wantCode(t, err, connect.CodeFailedPrecondition, "to")
	if _, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: la.HoldId})); err != nil {
		t.Fatalf("the term after a refused Transfer: %v", err)
	}
	a.quiet(t)
	b.quiet(t)
	a.cancel()
	b.cancel()
}
