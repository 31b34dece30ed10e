package serve_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/cmd/baton/serve"
	"github.com/batonhq/baton/rbac"
)

func (e *env) fence(ctx context.Context, req *batonv1.FenceRequest) (int64, error) {
	resp, err := e.client.Fence(ctx, connect.NewRequest(req))
	if err != nil {
		return 0, err
	}
	return resp.Msg.GetHighest(), nil
}

func check(resource string, t int64) *batonv1.FenceRequest {
	return &batonv1.FenceRequest{Resource: resource, Op: &batonv1.FenceRequest_CheckToken{CheckToken: t}}
}

// kv is a put: a key and its value.
type kv [2]string

func write(resource, holdID string, puts []kv, deletes ...string) *batonv1.FenceRequest {
	w := &batonv1.FencedWrite{HoldId: holdID, Deletes: deletes}
	for _, p := range puts {
		w.Puts = append(w.Puts, &batonv1.KeyValue{Key: p[0], Value: []byte(p[1])})
	}
	return &batonv1.FenceRequest{Resource: resource, Op: &batonv1.FenceRequest_Write{Write: w}}
}

// staleMark is the highest mark a stale refusal carries in its details.
func staleMark(t *testing.T, err error) int64 {
	t.Helper()
	wantCode(t, err, connect.CodeFailedPrecondition, "")
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%v: not a connect error", err)
	}
	for _, d := range ce.Details() {
		if m, derr := d.Value(); derr == nil {
			if fr, ok := m.(*batonv1.FenceResponse); ok {
				return fr.Highest
			}
		}
	}
	t.Fatalf("%v: no FenceResponse in its details", err)
	return 0
}

func (e *env) get(t *testing.T, key string) (string, bool) {
	t.Helper()
	resp, err := e.etcd.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", false
	}
	return string(resp.Kvs[0].Value), true
}

func TestFenceAdmitsTokensAndRefusesAStaleOneWithTheMark(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	if h, err := e.fence(ctx, check("db", 5)); err != nil || h != 5 {
		t.Fatalf("admit 5: %d %v", h, err)
	}
	if h, err := e.fence(ctx, check("db", 5)); err != nil || h != 5 {
		t.Fatalf("admit 5 again: %d %v", h, err)
	}
	_, err := e.fence(ctx, check("db", 3))
	if m := staleMark(t, err); m != 5 {
		t.Fatalf("stale: mark %d, want 5", m)
	}
	if v, _ := e.get(t, "/"+e.ns+"/v1/fence/db"); v != "5" {
		t.Fatalf("fence key %q, want 5", v)
	}
}

func TestFenceWritesUnderAHoldInTheDataPrefix(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	s := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"invoice"}})
	h := s.held(t)
	data := "/" + e.ns + "/v1/data/"
	if _, err := e.etcd.Put(ctx, data+"old", "x"); err != nil {
		t.Fatal(err)
	}
	hi, err := e.fence(ctx, write("invoices", h.HoldId, []kv{{data + "invoice/42", "paid"}}, data+"old"))
	if err != nil || hi != h.Token {
		t.Fatalf("write: %d %v, want mark %d", hi, err, h.Token)
	}
	if v, ok := e.get(t, data+"invoice/42"); v != "paid" || !ok {
		t.Fatalf("written %q %v", v, ok)
	}
	if _, ok := e.get(t, data+"old"); ok {
		t.Fatal("the delete was not applied")
	}

	// Outside the data prefix: refused, nothing written.
	for _, k := range []string{"/" + e.ns + "/v1/lock/invoice/x", "/" + e.ns + "/v1/fence/invoices", data, "/other/v1/data/x", "relative"} {
		_, err := e.fence(ctx, write("invoices", h.HoldId, []kv{{data + "ok", "v"}, {k, "v"}}))
		wantCode(t, err, connect.CodePermissionDenied, "write.puts[1].key")
		_, err = e.fence(ctx, write("invoices", h.HoldId, nil, k))
		wantCode(t, err, connect.CodePermissionDenied, "write.deletes[0]")
		if _, ok := e.get(t, data+"ok"); ok {
			t.Fatalf("a refused write (%s) wrote its other key", k)
		}
	}
	if v, _ := e.get(t, "/"+e.ns+"/v1/fence/invoices"); v != strconv.FormatInt(h.Token, 10) {
		t.Fatalf("mark %q after refusals, want %d", v, h.Token)
	}

	// A higher token admitted: the hold's write is stale, nothing written.
	if _, err := e.fence(ctx, check("invoices", h.Token+100)); err != nil {
		t.Fatal(err)
	}
	_, err = e.fence(ctx, write("invoices", h.HoldId, []kv{{data + "late", "v"}}))
	if m := staleMark(t, err); m != h.Token+100 {
		t.Fatalf("stale write: mark %d", m)
	}
	if _, ok := e.get(t, data+"late"); ok {
		t.Fatal("a stale write was applied")
	}

	// A hold_id nobody holds; a hold of another namespace.
	_, err = e.fence(ctx, write("invoices", strings.Repeat("0", 32), []kv{{data + "x", "v"}}))
	wantCode(t, err, connect.CodeNotFound, "write.hold_id")
	other := write("invoices", h.HoldId, []kv{{"/elsewhere/v1/data/x", "v"}})
	other.Namespace = "elsewhere"
	_, err = e.fence(ctx, other)
	wantCode(t, err, connect.CodeInvalidArgument, "namespace")

	// Once released, the hold writes nothing.
	if _, err := e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: h.HoldId})); err != nil {
		t.Fatal(err)
	}
	if m := s.next(t); m.GetReleased() == nil {
		t.Fatalf("%v, want released", m)
	}
	if err := s.end(t); err != nil {
		t.Fatal(err)
	}
	_, err = e.fence(ctx, write("invoices", h.HoldId, []kv{{data + "after", "v"}}))
	wantCode(t, err, connect.CodeNotFound, "write.hold_id")
	if _, ok := e.get(t, data+"after"); ok {
		t.Fatal("a released hold wrote")
	}
}

// A hold opened over a Unix socket is its peer's: another caller's
// write under it is PERMISSION_DENIED, with nothing written.
func TestFenceRefusesAnotherCallersHold(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	dir, err := os.MkdirTemp("", "baton-fence-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serveAlso(t, e, ln, nil)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	uc := batonv1connect.NewBatonServiceClient(&http.Client{Transport: tr}, "http://sidecar", connect.WithProtoJSON())
	h := holdOn(ctx, uc, &batonv1.HoldRequest{Names: []string{"sock"}}).held(t)
	key := "/" + e.ns + "/v1/data/x"
	_, err = e.fence(ctx, write("r", h.HoldId, []kv{{key, "v"}}))
	wantCode(t, err, connect.CodePermissionDenied, "write.hold_id")
	if _, ok := e.get(t, key); ok {
		t.Fatal("another caller's write was applied")
	}
	if _, ok := e.get(t, "/"+e.ns+"/v1/fence/r"); ok {
		t.Fatal("another caller's write raised the mark")
	}
	if _, err := uc.Fence(ctx, connect.NewRequest(write("r", h.HoldId, []kv{{key, "v"}}))); err != nil {
		t.Fatalf("the owner's write: %v", err)
	}
}

func TestFenceInvalidFieldsAndPolicy(t *testing.T) {
	e := start(t, func(c *serve.Config) {
		c.Policy = rbac.Policy{Namespaces: []rbac.Namespace{{Name: c.Namespace, Contenders: []string{"svc-a"}}}}
		c.PolicyFile = "test-policy.yaml"
	})
	ctx := ctxT(t)
	id := strings.Repeat("0", 32)
	data := "/" + e.ns + "/v1/data/"
	for _, c := range []struct {
		field string
		req   *batonv1.FenceRequest
	}{
		{"resource", check("", 1)},
		{"op", &batonv1.FenceRequest{Resource: "r"}},
		{"check_token", check("r", 0)},
		{"check_token", check("r", -4)},
		{"namespace", &batonv1.FenceRequest{Namespace: "a b", Resource: "r", Op: &batonv1.FenceRequest_CheckToken{CheckToken: 1}}},
		{"write.hold_id", write("r", "short", []kv{{data + "x", "v"}})},
		{"write", write("r", id, nil)},
		{"write.puts[0].key", write("r", id, []kv{{"", "v"}})},
		{"write.deletes[0]", write("r", id, []kv{{data + "x", "v"}}, data+"x")},
		{"identity", &batonv1.FenceRequest{Resource: "r", Identity: "a\x1b", Op: &batonv1.FenceRequest_CheckToken{CheckToken: 1}}},
	} {
		_, err := e.fence(ctx, c.req)
		wantCode(t, err, connect.CodeInvalidArgument, c.field)
	}
	// A check is its identity's (over plaintext TCP by default the
	// caller's address), which the policy must let contend: refused, no
	// mark written.
	for _, id := range []string{"", "viewer"} {
		req := check("r", 7)
		req.Identity = id
		_, err := e.fence(ctx, req)
		wantCode(t, err, connect.CodePermissionDenied, "")
	}
	if _, ok := e.get(t, "/"+e.ns+"/v1/fence/r"); ok {
		t.Fatal("a refused check wrote the mark")
	}
	req := check("checked", 7)
	req.Identity = "svc-a"
	if _, err := e.fence(ctx, req); err != nil {
		t.Fatal(err)
	}
	// A write under a hold is its hold's identity's.
	h := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"m"}, Identity: "svc-a"}).held(t)
	req = write("r", h.HoldId, []kv{{data + "x", "v"}})
	req.Identity = "viewer"
	_, err := e.fence(ctx, req)
	wantCode(t, err, connect.CodeInvalidArgument, "identity")
	if _, ok := e.get(t, data+"x"); ok {
		t.Fatal("a refused write was applied")
	}
	if _, err := e.fence(ctx, write("r", h.HoldId, []kv{{data + "x", "v"}})); err != nil {
		t.Fatal(err)
	}
}

func TestInspectElectionShowsTheLeaderAndCandidates(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.lead(ctx, &batonv1.LeadRequest{Name: "sched", Value: "host-a"})
	la := a.leading(t)
	b := e.lead(ctx, &batonv1.LeadRequest{Name: "sched", Value: "host-b"})
	e.waitCandidates(t, "sched", 2)
	resp, err := e.client.Inspect(ctx, connect.NewRequest(&batonv1.InspectRequest{Target: &batonv1.InspectRequest_Election{Election: "sched"}}))
	if err != nil {
		t.Fatal(err)
	}
	el := resp.Msg.GetElection()
	if el.GetName() != "sched" || el.GetLeader().GetValue() != "host-a" || el.GetLeader().GetToken() != la.Token || el.GetLeader().GetKey() != la.Key {
		t.Fatalf("election %v", el)
	}
	if c := el.GetCandidates(); len(c) != 2 || c[0].GetValue() != "host-a" || c[1].GetValue() != "host-b" || c[1].GetTtl().AsDuration() <= 0 {
		t.Fatalf("candidates %v", c)
	}
	b.quiet(t)
	_, err = e.client.Inspect(ctx, connect.NewRequest(&batonv1.InspectRequest{Target: &batonv1.InspectRequest_Election{Election: ""}}))
	wantCode(t, err, connect.CodeInvalidArgument, "election")
	_, err = e.client.Inspect(ctx, connect.NewRequest(&batonv1.InspectRequest{Target: &batonv1.InspectRequest_ShardGroup{ShardGroup: ""}}))
	wantCode(t, err, connect.CodeInvalidArgument, "shard_group")
	resp, err = e.client.Inspect(ctx, connect.NewRequest(&batonv1.InspectRequest{Target: &batonv1.InspectRequest_Election{Election: "none"}}))
	if err != nil || resp.Msg.GetElection().GetLeader() != nil || len(resp.Msg.GetElection().GetCandidates()) != 0 {
		t.Fatalf("an election without candidates: %v %v", resp, err)
	}
}

// A membership writes under one of its shards: while it owns it, and
// while it drains it after moved; not once it is released.
func TestFenceWritesUnderAShard(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	req := func(member string) *batonv1.ShardsRequest {
		return &batonv1.ShardsRequest{Group: "g", Count: 2, Member: member, Ttl: dur(10 * time.Second), DrainTimeout: dur(time.Minute)}
	}
	a := e.shards(ctx, req("a"))
	ja := a.joined(t)
	e.beat(t, ja.HoldId, time.Second)
	owned := a.owned(t, 2)
	data := "/" + e.ns + "/v1/data/"
	onShard := func(holdID string, shard *uint32, key string) *batonv1.FenceRequest {
		r := write("g-1", holdID, []kv{{data + key, "v"}})
		r.GetWrite().Shard = shard
		return r
	}
	one, five := uint32(1), uint32(5)
	if hi, err := e.fence(ctx, onShard(ja.HoldId, &one, "a")); err != nil || hi != owned[1].Token {
		t.Fatalf("a's write: %d %v, want mark %d", hi, err, owned[1].Token)
	}
	_, err := e.fence(ctx, onShard(ja.HoldId, nil, "x"))
	wantCode(t, err, connect.CodeInvalidArgument, "write.shard")
	_, err = e.fence(ctx, onShard(ja.HoldId, &five, "x"))
	wantCode(t, err, connect.CodeInvalidArgument, "write.shard")
	h := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"l"}}).held(t)
	_, err = e.fence(ctx, onShard(h.HoldId, &one, "x"))
	wantCode(t, err, connect.CodeInvalidArgument, "write.shard")

	b := e.shards(ctx, req("b"))
	jb := b.joined(t)
	e.beat(t, jb.HoldId, time.Second)
	if m := a.next(t); m.GetMoved().GetShard() != 1 {
		t.Fatalf("%v, want moved 1", m)
	}
	if _, err := e.fence(ctx, onShard(ja.HoldId, &one, "draining")); err != nil {
		t.Fatalf("a write while draining: %v", err)
	}
	if err := e.drained(ctx, ja.HoldId, 1); err != nil {
		t.Fatal(err)
	}
	_, err = e.fence(ctx, onShard(ja.HoldId, &one, "late"))
	wantCode(t, err, connect.CodeFailedPrecondition, "write.shard")
	ob := b.owned(t, 1)[1]
	if hi, err := e.fence(ctx, onShard(jb.HoldId, &one, "b")); err != nil || hi != ob.Token {
		t.Fatalf("b's write: %d %v, want mark %d", hi, err, ob.Token)
	}
	if _, ok := e.get(t, data+"x"); ok {
		t.Fatal("a refused write was applied")
	}
	if _, ok := e.get(t, data+"late"); ok {
		t.Fatal("a released shard's write was applied")
	}
}
