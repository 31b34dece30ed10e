package serve_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/cmd/baton/serve"
	ikeys "github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/rbac"
	"github.com/batonhq/baton/shard"
)

// shardsStream is one open Shards, read by a goroutine into events.
type shardsStream struct{ *recv[batonv1.ShardsResponse] }

func (e *env) shards(ctx context.Context, req *batonv1.ShardsRequest) *shardsStream {
	return &shardsStream{open(ctx, 64, func(ctx context.Context) (*connect.ServerStreamForClient[batonv1.ShardsResponse], error) {
		return e.client.Shards(ctx, connect.NewRequest(req))
	})}
}

func (s *shardsStream) joined(t *testing.T) *batonv1.Joined {
	t.Helper()
	m := s.next(t)
	if m.GetJoined() == nil {
		t.Fatalf("first message %v, want joined", m)
	}
	return m.GetJoined()
}

// owned reads n owned messages, by shard.
func (s *shardsStream) owned(t *testing.T, n int) map[uint32]*batonv1.ShardOwned {
	t.Helper()
	out := make(map[uint32]*batonv1.ShardOwned)
	for len(out) < n {
		m := s.next(t)
		o := m.GetOwned()
		if o == nil {
			t.Fatalf("%v, want owned (have %d of %d)", m, len(out), n)
		}
		out[o.Shard] = o
	}
	return out
}

// beat sends a heartbeat for id every interval until the test ends or a
// heartbeat is refused.
func (e *env) beat(t *testing.T, id string, every time.Duration) { e.beater(t, id, time.Time{}, every) }

// shardKeys is the shard keys of group (member and shard queues) with
// their values.
func (e *env) shardKeys(t *testing.T, group string) map[string]string {
	t.Helper()
	resp, err := e.etcd.Get(context.Background(), "/"+e.ns+"/v1/shard/"+group+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string)
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func (e *env) drained(ctx context.Context, id string, shard uint32) error {
	_, err := e.client.Drained(ctx, connect.NewRequest(&batonv1.DrainedRequest{HoldId: id, Shard: shard}))
	return err
}

// Two members split four shards: the first owns all, the second's join
// moves the two highest, each released at the first's Drained and then
// owned by the second with a higher token; Inspect shows the group as
// `baton shards` does; the first's end hands its shards over.
func TestShardsJoinedOwnedAcrossTwoMembersAndMovedWithDrained(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	req := func(member string) *batonv1.ShardsRequest {
		return &batonv1.ShardsRequest{Group: "ingest", Count: 4, Member: member, Ttl: dur(10 * time.Second), DrainTimeout: dur(time.Minute)}
	}
	a := e.shards(ctx, req("a"))
	ja := a.joined(t)
	if len(ja.HoldId) != 32 || ja.HeartbeatInterval.AsDuration() != 2*time.Second || ja.Validity.AsDuration() <= 0 {
		t.Fatalf("joined %v", ja)
	}
	e.beat(t, ja.HoldId, time.Second)
	ownedA := a.owned(t, 4)
	for id, o := range ownedA {
		if o.Token <= 0 || o.Key == "" {
			t.Fatalf("shard %d: %v", id, o)
		}
	}

	b := e.shards(ctx, req("b"))
	jb := b.joined(t)
	e.beat(t, jb.HoldId, time.Second)
	moved := map[uint32]*batonv1.ShardEnded{}
	for len(moved) < 2 {
		m := a.next(t)
		mv := m.GetMoved()
		if mv == nil {
			t.Fatalf("%v, want moved", m)
		}
		if mv.Cause != batonv1.Cause_CAUSE_MOVED || mv.Token != ownedA[mv.Shard].Token || !mv.DrainDeadline.AsTime().After(time.Now().Add(30*time.Second)) {
			t.Fatalf("moved %v", mv)
		}
		moved[mv.Shard] = mv
	}
	if moved[2] == nil || moved[3] == nil {
		t.Fatalf("moved %v, want shards 2 and 3", moved)
	}
	// Until the drain is acknowledged the first member's keys stay.
	keys := e.shardKeys(t, "ingest")
	for _, id := range []uint32{2, 3} {
		if _, ok := keys[ownedA[id].Key]; !ok {
			t.Fatalf("shard %d's key gone before Drained: %v", id, keys)
		}
	}
	for _, id := range []uint32{2, 3} {
		if err := e.drained(ctx, ja.HoldId, id); err != nil {
			t.Fatalf("Drained %d: %v", id, err)
		}
		if _, ok := e.shardKeys(t, "ingest")[ownedA[id].Key]; ok {
			t.Fatalf("shard %d's key still there after Drained", id)
		}
	}
	ownedB := b.owned(t, 2)
	for _, id := range []uint32{2, 3} {
		if ownedB[id] == nil || ownedB[id].Token <= ownedA[id].Token {
			t.Fatalf("b owns %v, want 2 and 3 with tokens above %d, %d", ownedB, ownedA[2].Token, ownedA[3].Token)
		}
	}
	// Each owner recorded when it took its shard, as baton shard does.
	st, err := shard.Inspect(ctx, e.etcd, "ingest", shard.WithNamespace(e.ns))
	if err != nil {
		t.Fatal(err)
	}
	held, err := keyspace.ReadHeld(ctx, e.etcd, e.ns, ikeys.Shard, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range keyspace.ShardsView("ingest", st, held, time.Now()).Owners {
		if o.HeldSince == nil {
			t.Fatalf("shard %d has no acquisition record: %v", o.Shard, held)
		}
	}
	err = e.drained(ctx, ja.HoldId, 2)
	wantCode(t, err, connect.CodeFailedPrecondition, "shard")
	err = e.drained(ctx, ja.HoldId, 4)
	wantCode(t, err, connect.CodeInvalidArgument, "shard")

	resp, err := e.client.Inspect(ctx, connect.NewRequest(&batonv1.InspectRequest{Target: &batonv1.InspectRequest_ShardGroup{ShardGroup: "ingest"}}))
	if err != nil {
		t.Fatal(err)
	}
	g := resp.Msg.GetShardGroup()
	if g.GetGroup() != "ingest" || g.GetCount() != 4 || fmt.Sprint(g.GetMembers()) != "[a b]" || len(g.GetOwners()) != 4 || resp.Msg.GetRevision() <= 0 {
		t.Fatalf("inspect %v", resp.Msg)
	}
	for _, o := range g.GetOwners() {
		want := map[bool]*batonv1.ShardOwned{true: ownedA[o.Shard], false: ownedB[o.Shard]}[o.Shard < 2]
		if o.Member != map[bool]string{true: "a", false: "b"}[o.Shard < 2] || o.Token != want.Token || o.Key != want.Key {
			t.Fatalf("owner %v, want %v", o, want)
		}
	}

	// The first member's stream closes: it leaves, the second takes over.
	a.cancel()
	if err := a.end(t); connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("a's end: %v", err)
	}
	more := b.owned(t, 2)
	if more[0] == nil || more[1] == nil {
		t.Fatalf("b owns %v after a left, want 0 and 1", more)
	}
	if _, err := e.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: jb.HoldId})); err != nil {
		t.Fatal(err)
	}
	lost := map[uint32]bool{}
	for len(lost) < 4 {
		m := b.next(t)
		if l := m.GetLost(); l == nil || l.Cause != batonv1.Cause_CAUSE_RELEASED {
			t.Fatalf("%v, want lost (released)", m)
		} else {
			lost[l.Shard] = true
		}
	}
	if m := b.next(t); m.GetEnded().GetCause() != batonv1.Cause_CAUSE_RELEASED {
		t.Fatalf("%v, want ended (released)", m)
	}
	if err := b.end(t); err != nil {
		t.Fatal(err)
	}
	if k := e.shardKeys(t, "ingest"); len(k) != 0 {
		t.Fatalf("keys left: %v", k)
	}
}

// stampedMsg is a stream's message with the time the test's reader took it.
type stampedMsg struct {
	m  *batonv1.ShardsResponse
	at time.Time
}

// stamped reads s's messages until the test ends, each with its arrival
// time, calling each (if set) on it first.
func (s *shardsStream) stamped(t *testing.T, each func(*batonv1.ShardsResponse)) <-chan stampedMsg {
	out := make(chan stampedMsg, 64)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case m := <-s.events:
				at := time.Now()
				if each != nil {
					each(m)
				}
				out <- stampedMsg{m, at}
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
	return out
}

func nextStamped(t *testing.T, ch <-chan stampedMsg, what string) stampedMsg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s in 30 s", what)
	}
	return stampedMsg{}
}

// beater sends heartbeats for a hold and keeps what the caller believes:
// the latest validity deadline it was given, measured from each
// heartbeat's send, as a caller's clock does. A heartbeat round trip
// holds sem: whoever takes it holds heartbeats back.
type beater struct {
	id      string // the hold's
	sem     chan struct{}
	mu      sync.Mutex
	replies []beatReply
}

type beatReply struct {
	until, received time.Time
	lost            []*batonv1.ShardEnded // the shards the reply says were lost
}

func (e *env) beater(t *testing.T, id string, given time.Time, every time.Duration) *beater {
	b := &beater{id: id, sem: make(chan struct{}, 1), replies: []beatReply{{until: given}}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			select {
			case b.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			sent := time.Now()
			resp, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: id}))
			if err == nil {
				b.mu.Lock()
				b.replies = append(b.replies, beatReply{until: sent.Add(resp.Msg.Validity.AsDuration()), received: time.Now(), lost: resp.Msg.Lost})
				b.mu.Unlock()
			}
			<-b.sem
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return b
}

// believed is the validity deadline the caller held at `at`: the latest
// of the replies it had received by then.
func (b *beater) believed(at time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var until time.Time
	for _, r := range b.replies {
		if r.received.Before(at) && r.until.After(until) {
			until = r.until
		}
	}
	return until
}

// believesShard is whether the caller, reading heartbeat replies only (a
// slow reader of its stream), still believed at `at` that it owned shard
// with token: no reply received by then named it lost, and the validity
// it held then (believed) lies after at.
func (b *beater) believesShard(at time.Time, shard uint32, token int64) (bool, time.Time) {
	b.mu.Lock()
	for _, r := range b.replies {
		for _, l := range r.lost {
			if r.received.Before(at) && l.Shard == shard && l.Token == token {
				b.mu.Unlock()
				return false, r.received
			}
		}
	}
	b.mu.Unlock()
	until := b.believed(at)
	return until.After(at), until
}

// drainingOfTwo is member's request to join group g of two shards, with
// a 2 s TTL and a drain timeout of 200 ms.
func drainingOfTwo(member string) *batonv1.ShardsRequest {
	return &batonv1.ShardsRequest{Group: "g", Count: 2, Member: member, Ttl: dur(2 * time.Second), DrainTimeout: dur(200 * time.Millisecond)}
}

// firstOfTwo joins member a (drainingOfTwo), heartbeating twice an
// interval with a beater that follows its validity, and returns once it
// owns both shards.
func (e *env) firstOfTwo(ctx context.Context, t *testing.T) (*shardsStream, *beater, map[uint32]*batonv1.ShardOwned) {
	t.Helper()
	a := e.shards(ctx, drainingOfTwo("a"))
	ja := a.joined(t)
	ba := e.beater(t, ja.HoldId, a.sent.Add(ja.Validity.AsDuration()), ja.HeartbeatInterval.AsDuration()/2)
	return a, ba, a.owned(t, 2)
}

// secondOfTwo joins member b (drainingOfTwo), heartbeating every
// interval, and returns its messages as they arrive.
func (e *env) secondOfTwo(ctx context.Context, t *testing.T) <-chan stampedMsg {
	t.Helper()
	b := e.shards(ctx, drainingOfTwo("b"))
	jb := b.joined(t)
	e.beat(t, jb.HoldId, jb.HeartbeatInterval.AsDuration())
	return b.stamped(t, nil)
}

// A member whose stream reader is slow (it has read neither moved nor
// lost; its heartbeats go on, as a client's heartbeat thread does) is told
// by its heartbeats' replies that it lost a moved shard at the drain
// deadline: by the time another member owns the shard, a reply had named
// it lost, or the validity it held had run out.
func TestShardsSlowReaderIsToldByItsHeartbeatsThatAMovedShardIsLost(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	_, ba, ownedA := e.firstOfTwo(ctx, t)
	// From here a's application reads nothing more of its stream.
	msgsB := e.secondOfTwo(ctx, t)
	var ob stampedMsg
	for {
		ob = nextStamped(t, msgsB, "owned")
		if o := ob.m.GetOwned(); o != nil && o.Shard == 1 {
			break
		}
	}
	believes, until := ba.believesShard(ob.at, 1, ownedA[1].Token)
	if believes {
		t.Fatalf("b owned shard 1 while a (a slow reader, heartbeating) still believed it owned it until %v later", until.Sub(ob.at).Round(time.Millisecond))
	}
	t.Logf("a stopped believing it owned shard 1 %v before b owned it", ob.at.Sub(until).Round(time.Millisecond))
}

// A moved shard the caller never acknowledges is sent lost at its drain
// deadline, and released only once the validity the caller had been given
// then has run out: another member owns it only after the caller, by its
// own clock, stopped believing it owns it. So too when the caller's
// heartbeats stop as the shard moves (its membership ends on their
// timeout, after that validity). The pause point at the drain deadline
// holds the caller's heartbeats back until it read lost, so no
// heartbeat's reply can cross it.
func TestShardsMovedShardIsTakenOnlyAfterTheCallersValidity(t *testing.T) {
	for _, stopBeats := range []bool{false, true} {
		t.Run(map[bool]string{false: "no ack", true: "heartbeats stop"}[stopBeats], func(t *testing.T) {
			var onDrain atomic.Pointer[func(shard int)]
			e := start(t, func(c *serve.Config) {
				serve.WithHooks(c, serve.Hooks{DrainTimedOut: func(shard int) {
					if f := onDrain.Load(); f != nil {
						(*f)(shard)
					}
				}})
			})
			ctx := ctxT(t)
			a, ba, ownedA := e.firstOfTwo(ctx, t)

			paused := make(chan struct{}, 1) // the pause point holds ba.sem
			if !stopBeats {
				f := func(shard int) {
					select {
					case ba.sem <- struct{}{}:
						paused <- struct{}{}
					case <-time.After(10 * time.Second):
					}
				}
				onDrain.Store(&f)
			}
			var heardLost sync.Once
			msgsA := a.stamped(t, func(m *batonv1.ShardsResponse) {
				if m.GetLost() != nil && !stopBeats {
					heardLost.Do(func() {
						select {
						case <-paused:
							<-ba.sem // the caller read lost: heartbeats go on
						default:
						}
					})
				}
			})

			msgsB := e.secondOfTwo(ctx, t)

			mv := nextStamped(t, msgsA, "moved")
			if mv.m.GetMoved() == nil || mv.m.GetMoved().Shard != 1 {
				t.Fatalf("%v, want moved 1", mv.m)
			}
			if stopBeats {
				ba.sem <- struct{}{} // no heartbeat from now on
			}

			var ob stampedMsg
			for range 2 { // shard 0 too, once a's heartbeats stopped
				ob = nextStamped(t, msgsB, "owned")
				if o := ob.m.GetOwned(); o == nil || o.Shard == 1 {
					break
				}
			}
			if o := ob.m.GetOwned(); o == nil || o.Shard != 1 || o.Token <= ownedA[1].Token {
				t.Fatalf("b: %v, want owned 1 with a token above %d", ob.m, ownedA[1].Token)
			}
			// What a read by then: lost for shard 1 must be among it.
			var lost *stampedMsg
			for lost == nil {
				select {
				case m := <-msgsA:
					if !m.at.Before(ob.at) {
						t.Fatalf("b owned shard 1 at %v, before a was sent lost for it (a read %v at %v)", ob.at, m.m, m.at)
					}
					if l := m.m.GetLost(); l != nil && l.Shard == 1 {
						lost = &m
					}
				default:
					t.Fatalf("b owned shard 1 at %v, a not told it lost it (validity believed until %v)", ob.at, ba.believed(ob.at))
				}
			}
			if l := lost.m.GetLost(); l.Token != ownedA[1].Token || (l.Cause != batonv1.Cause_CAUSE_MOVED && l.Cause != batonv1.Cause_CAUSE_HEARTBEAT_TIMEOUT) {
				t.Fatalf("a: %v, want lost 1 (moved or heartbeat timeout)", lost.m)
			}
			if believed := ba.believed(lost.at); !ob.at.After(believed) {
				t.Fatalf("b owned shard 1 at %v, while a, told lost at %v, believed it owned it until %v", ob.at, lost.at, believed)
			}
			if !stopBeats {
				err := e.drained(ctx, ba.id, 1)
				wantCode(t, err, connect.CodeFailedPrecondition, "shard")
			}
		})
	}
}

// A member whose heartbeats stop is sent lost for every shard, then its
// keys are deleted, then ended.
func TestShardsLostBeforeTheKeysAreDeletedWhenHeartbeatsStop(t *testing.T) {
	at := make(chan error, 1)
	resume := make(chan struct{})
	e := start(t, func(c *serve.Config) {
		serve.WithHooks(c, serve.Hooks{BeforeUnlock: func(_ string, cause error) { at <- cause; <-resume }})
	})
	ctx := ctxT(t)
	a := e.shards(ctx, &batonv1.ShardsRequest{Group: "g", Count: 2, Member: "a", Ttl: dur(2 * time.Second)})
	a.joined(t)
	owned := a.owned(t, 2)
	var cause error
	select {
	case cause = <-at:
	case <-time.After(30 * time.Second):
		t.Fatal("the membership did not end")
	}
	if cause.Error() == "" {
		t.Fatal("no cause")
	}
	for range 2 {
		m := a.next(t)
		if l := m.GetLost(); l == nil || l.Cause != batonv1.Cause_CAUSE_HEARTBEAT_TIMEOUT || l.Token != owned[l.Shard].Token {
			t.Fatalf("%v, want lost (heartbeat timeout)", m)
		}
	}
	keys := e.shardKeys(t, "g")
	for id, o := range owned {
		if _, ok := keys[o.Key]; !ok {
			t.Fatalf("shard %d's key deleted before lost was sent: %v", id, keys)
		}
	}
	close(resume)
	if m := a.next(t); m.GetEnded().GetCause() != batonv1.Cause_CAUSE_HEARTBEAT_TIMEOUT {
		t.Fatalf("%v, want ended (heartbeat timeout)", m)
	}
	if err := a.end(t); err != nil {
		t.Fatal(err)
	}
	if k := e.shardKeys(t, "g"); len(k) != 0 {
		t.Fatalf("keys left: %v", k)
	}
}

func TestShardsRefusalsWriteNothing(t *testing.T) {
	e := start(t, func(c *serve.Config) {
		c.Policy = rbac.Policy{Namespaces: []rbac.Namespace{{Name: c.Namespace, Contenders: []string{"a", "a2"}, Observers: []string{"viewer"}}}}
		c.PolicyFile = "test-policy.yaml"
	})
	ctx := ctxT(t)
	ok := &batonv1.ShardsRequest{Group: "g", Count: 2, Member: "a", Ttl: dur(10 * time.Second)}
	for _, c := range []struct {
		field string
		edit  func(r *batonv1.ShardsRequest)
	}{
		{"namespace", func(r *batonv1.ShardsRequest) { r.Namespace = "a/b" }},
		{"group", func(r *batonv1.ShardsRequest) { r.Group = "" }},
		{"count", func(r *batonv1.ShardsRequest) { r.Count = 0 }},
		{"count", func(r *batonv1.ShardsRequest) { r.Count = 16385 }},
		{"member", func(r *batonv1.ShardsRequest) { r.Member = "" }},
		{"ttl", func(r *batonv1.ShardsRequest) { r.Ttl = dur(time.Second) }},
		{"drain_timeout", func(r *batonv1.ShardsRequest) { r.DrainTimeout = dur(-time.Second) }},
		{"drain_timeout", func(r *batonv1.ShardsRequest) { r.DrainTimeout = dur(2 * time.Hour) }},
		{"identity", func(r *batonv1.ShardsRequest) { r.Identity = "a\x1b" }},
	} {
		r := &batonv1.ShardsRequest{Group: ok.Group, Count: ok.Count, Member: ok.Member, Ttl: ok.Ttl}
		c.edit(r)
		wantCode(t, e.shards(ctx, r).end(t), connect.CodeInvalidArgument, c.field)
	}
	// Over plaintext TCP the identity is the request's, by default the
	// member's name: the policy does not let "viewer" contend, nor "b" at
	// all.
	for _, m := range []string{"viewer", "b"} {
		wantCode(t, e.shards(ctx, &batonv1.ShardsRequest{Group: "g", Count: 2, Member: m}).end(t), connect.CodePermissionDenied, "")
		wantCode(t, e.shards(ctx, &batonv1.ShardsRequest{Group: "g", Count: 2, Member: "a", Identity: m}).end(t), connect.CodePermissionDenied, "")
	}
	if k := e.shardKeys(t, "g"); len(k) != 0 {
		t.Fatalf("refused joins wrote %v", k)
	}
	a := e.shards(ctx, &batonv1.ShardsRequest{Group: "g", Count: 2, Member: "a", Identity: "a2", Ttl: dur(10 * time.Second)})
	e.beat(t, a.joined(t).HoldId, time.Second)
	a.owned(t, 2)
	if v := e.shardKeys(t, "g")["/"+e.ns+"/v1/shard/g/m/a"]; v != `{"count":2,"identity":"a2"}` {
		t.Fatalf("member key %q", v)
	}
	err := e.shards(ctx, &batonv1.ShardsRequest{Group: "g", Count: 3, Member: "a2"}).end(t)
	wantCode(t, err, connect.CodeFailedPrecondition, "count")
	err = e.shards(ctx, &batonv1.ShardsRequest{Group: "g", Count: 2, Member: "a"}).end(t)
	wantCode(t, err, connect.CodeAlreadyExists, "member")
	// A lock's hold_id is no membership's.
	h := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"x"}, Identity: "a"})
	err = e.drained(ctx, h.held(t).HoldId, 0)
	wantCode(t, err, connect.CodeFailedPrecondition, "hold_id")
}

// A shard whose key an operator deletes is lost (and taken again, with a
// new token); a shutdown sends lost for every shard, then ended.
func TestShardsLostOnAnOperatorsDeleteAndAtShutdown(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	a := e.shards(ctx, &batonv1.ShardsRequest{Group: "g", Count: 2, Member: "a", Ttl: dur(10 * time.Second)})
	j := a.joined(t)
	hb, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: j.HoldId}))
	if err != nil || hb.Msg.Validity.AsDuration() <= 0 || hb.Msg.Validity.AsDuration() > serve.Budget(10*time.Second) {
		t.Fatalf("heartbeat: %v %v", hb, err)
	}
	e.beat(t, j.HoldId, time.Second)
	err = e.resign(ctx, j.HoldId)
	wantCode(t, err, connect.CodeFailedPrecondition, "hold_id")
	owned := a.owned(t, 2)
	if _, err := e.etcd.Delete(ctx, owned[0].Key); err != nil {
		t.Fatal(err)
	}
	m := a.next(t)
	if l := m.GetLost(); l == nil || l.Shard != 0 || l.Token != owned[0].Token || l.Cause != batonv1.Cause_CAUSE_KEY_GONE {
		t.Fatalf("%v, want lost 0 (key gone)", m)
	}
	again := a.owned(t, 1)[0]
	if again == nil || again.Token <= owned[0].Token {
		t.Fatalf("shard 0 again: %v", again)
	}
	e.stop()
	for range 2 {
		m := a.next(t)
		if l := m.GetLost(); l == nil || l.Cause != batonv1.Cause_CAUSE_SERVER_SHUTDOWN {
			t.Fatalf("%v, want lost (shutdown)", m)
		}
	}
	if m := a.next(t); m.GetEnded().GetCause() != batonv1.Cause_CAUSE_SERVER_SHUTDOWN {
		t.Fatalf("%v, want ended (shutdown)", m)
	}
	if err := a.end(t); err != nil {
		t.Fatal(err)
	}
	if k := e.shardKeys(t, "g"); len(k) != 0 {
		t.Fatalf("keys left: %v", k)
	}
}
