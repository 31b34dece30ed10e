package election_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

// An operator's forced hand-over (`baton resign --to --force`) is built
// as the leader's own Transfer is: these tests prove each rule the
// operator's copy once lacked.

// operator returns an Election made as the CLI makes it: no lock-delay of
// its own, whatever the candidates use.
func operator(t *testing.T, cli *clientv3.Client, name, ns string) *election.Election {
	t.Helper()
	e, err := election.New(cli, name, election.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// forceTo prepares and commits a forced hand-over to the candidate key to.
func forceTo(t *testing.T, ctx context.Context, op *election.Election, to string, cmps []clientv3.Cmp, ops []clientv3.Op) (bool, error) {
	t.Helper()
	ho, err := op.PrepareHandOver(ctx, to)
	if err != nil {
		t.Fatalf("PrepareHandOver(%s) = %v", to, err)
	}
	return ho.Commit(ctx, cmps, ops)
}

// A forced hand-over from a leader with a lock-delay deletes the leader's
// delay record with its key, as a clean end: the successor leads at once,
// and so does the one after it when the successor resigns. A record left
// behind reads as a leader lost without releasing: the successor would
// wait out the whole delay (a minute here) before its Campaign returned.
func TestForcedHandOverUnderLockDelayLeavesNoDelayRecord(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	const name, ns = "force-delay", "elforce"
	opts := []election.Option{election.WithNamespace(ns), election.WithLockDelay(time.Minute)}
	a, b, c := newElection(t, client(t), name, opts...), newElection(t, client(t), name, opts...), newElection(t, client(t), name, opts...)
	_, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B"}, queued{e: c, v: "C"})
	// A's record as a build before per-hold records also wrote it, at
	// held/<segment>: the hand-over of such a leader deletes that one too.
	segA := cands[0].Key[strings.LastIndexByte(cands[0].Key, '/')+1:]
	legacy := fmt.Sprintf(`{"key":%q,"token":%d,"delay_ms":60000}`, cands[0].Key, cands[0].Token)
	if _, err := client(t).Put(ctx, "/"+ns+"/v1/delay/election/"+name+"/held/"+segA, legacy); err != nil {
		t.Fatal(err)
	}
	done, err := forceTo(t, ctx, operator(t, client(t), name, ns), cands[1].Key, nil, nil)
	if err != nil || !done {
		t.Fatalf("forced hand-over to B = %v, %v; want done", done, err)
	}
	tb := await(t, res[0], 10*time.Second, "B (a delay record of A's left behind makes it wait a minute)")
	for _, k := range etcdtest.Keys(t, client(t), "/"+ns+"/v1/delay/") {
		if strings.Contains(k, "/held/"+segA) || strings.Contains(k, "/until/") {
			t.Errorf("after the forced hand-over: delay key %s, want none of A's and no running delay", k)
		}
	}
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tc := await(t, res[1], 10*time.Second, "C, after B resigned")
	_ = tc.Resign(ctx)
}

// A Proclaim lands between the operator's PrepareHandOver and its Commit:
// the leader is no longer the one the operator was shown (its key's
// ModRevision moved), so nothing is done and the leader leads on.
func TestForcedHandOverRacingAProclaimDoesNothing(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name, ns = "force-proclaim", "elforce"
	opts := []election.Option{election.WithNamespace(ns)}
	a, b := newElection(t, client(t), name, opts...), newElection(t, client(t), name, opts...)
	ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B"})
	ho, err := operator(t, client(t), name, ns).PrepareHandOver(ctx, cands[1].Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := ta.Proclaim(ctx, "A2"); err != nil {
		t.Fatal(err)
	}
	done, err := ho.Commit(ctx, nil, nil)
	if err != nil || done {
		t.Fatalf("forced hand-over after the leader proclaimed = %v, %v; want not done, nil", done, err)
	}
	l, err := a.Leader(ctx)
	if err != nil || l.Key != ta.Key() || l.Value != "A2" || !ta.IsLeader() {
		t.Fatalf("Leader() = %+v, %v; want A (key %s) with A2 leading on", l, err, ta.Key())
	}
	notYet(t, res[0], "B")
	_ = ta.Resign(ctx)
	tb := await(t, res[0], 5*time.Second, "B")
	_ = tb.Resign(ctx)
}

// deletesKey reports whether a transaction's ops (nested ones included)
// delete key.
func deletesKey(ops []*etcdserverpb.RequestOp, key string) bool {
	for _, op := range ops {
		if d := op.GetRequestDeleteRange(); d != nil && string(d.Key) == key {
			return true
		}
		if n := op.GetRequestTxn(); n != nil && (deletesKey(n.Success, key) || deletesKey(n.Failure, key)) {
			return true
		}
	}
	return false
}

// The operator's hand-over applies but its reply is lost (the operator's
// client reports the first transaction that deletes the leader's key as
// unavailable after etcd applied it): Commit retries, the retry's compare
// fails, and its read recognises the hand-over as done; the audit record
// sent with it is written once.
func TestForcedHandOverWhoseReplyIsLostIsDone(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const name, ns = "force-unheard", "elforce"
	opts := []election.Option{election.WithNamespace(ns)}
	var leaderKey atomic.Value
	leaderKey.Store("")
	var lost atomic.Bool
	icli := icptClient(t, func(ictx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ictx, method, req, reply, cc, opts...)
		if tr, ok := req.(*etcdserverpb.TxnRequest); ok && err == nil && deletesKey(tr.Success, leaderKey.Load().(string)) && lost.CompareAndSwap(false, true) {
			return status.Error(codes.Unavailable, "the reply was lost")
		}
		return err
	})
	a, b := newElection(t, client(t), name, opts...), newElection(t, client(t), name, opts...)
	ta, res, cands := leadThenQueue(t, ctx, a, "A", queued{e: b, v: "B"})
	leaderKey.Store(ta.Key())
	audit := "/" + ns + "/v1/audit/force-unheard-test"
	done, err := forceTo(t, ctx, operator(t, icli, name, ns), cands[1].Key,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(audit), "=", 0)}, []clientv3.Op{clientv3.OpPut(audit, "forced")})
	if !lost.Load() {
		t.Fatal("no hand-over transaction went through the operator's client")
	}
	if err != nil || !done {
		t.Fatalf("forced hand-over whose reply was lost = %v, %v; want done", done, err)
	}
	tb := await(t, res[0], 5*time.Second, "B")
	defer func() { _ = tb.Resign(ctx) }()
	if r, err := client(t).Get(ctx, audit); err != nil || len(r.Kvs) != 1 || r.Kvs[0].Version != 1 {
		t.Fatalf("audit record after the hand-over: %v, %v; want written once", r, err)
	}
}
