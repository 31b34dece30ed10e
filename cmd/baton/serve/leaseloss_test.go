package serve_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/serve"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/shard"
)

// A hold lost by the library (its lease's renewals refused twice, etcd
// itself reachable) while its caller is cut off: the caller never hears
// lost, and counts on the validity its last heartbeat's reply gave, so
// the key (neither revoked with the lease nor deleted by the server)
// outlives that validity: nobody else can acquire while the caller may
// still believe it holds.
func TestALeaseLostUnderACutOffCallerKeepsItsKeyPastTheCallersValidity(t *testing.T) {
	cli, refuse := renewalRefusingClient(t)
	e := start(t, func(c *serve.Config) { c.Client = cli })
	ctx := ctxT(t)
	s := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"renewals"}, Ttl: dur(3 * time.Second), Identity: "cut"})
	h := s.held(t)
	resp, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: h.HoldId}))
	if err != nil {
		t.Fatal(err)
	}
	// The caller's validity, by its rule: the reply's validity from the
	// heartbeat's send, which is before now.
	valid := time.Now().Add(resp.Msg.GetValidity().AsDuration())
	// From here the caller is cut off: no heartbeat, nothing read.
	w := e.etcd.Watch(ctx, h.GetKeys()[0])
	refuse.Store(true)
	keyOutlives(t, w, valid)
}

// A caller that stopped reading is sent a message it does not take (an
// operator's release request), which ends its hold as unreachable, and
// the lease under it is lost to refused renewals meanwhile: the key still
// outlives the validity held gave it, the caller's only one.
func TestALeaseLostWhileAnUnreachableCallersHoldEndsKeepsItsKey(t *testing.T) {
	cli, refuse := renewalRefusingClient(t)
	e := start(t, func(c *serve.Config) { c.Client = cli })
	ctx := ctxT(t)
	addr := strings.TrimPrefix(e.url, "http://")
	c := dialH2(t, addr, 65535)
	c.call(t, addr, "Hold", `{"names":["frozen"],"ttl":"3s","identity":"frozen"}`)
	held := c.awaitHeld(t)
	// From now on the caller takes nothing more (its stream's window goes
	// below zero), and sends no heartbeat.
	var st [6]byte
	binary.BigEndian.PutUint16(st[:2], settingInitialWindowSize)
	if err := c.frame(frameSettings, 0, 0, st[:]); err != nil {
		t.Fatal(err)
	}
	w := e.etcd.Watch(ctx, held.GetKeys()[0])
	if err := mutex.RequestRelease(ctx, e.etcd, "frozen", "review", mutex.WithNamespace(e.ns), mutex.WithIdentity("oncall")); err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	keyOutlives(t, w, held.Deadline.AsTime())
}

// keyOutlives waits for w's key to be deleted, and fails if that came
// before valid.
func keyOutlives(t *testing.T, w clientv3.WatchChan, valid time.Time) {
	t.Helper()
	var gone time.Time
	for wr := range w {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				gone = time.Now()
			}
		}
		if !gone.IsZero() || wr.Err() != nil {
			break
		}
	}
	if gone.IsZero() {
		t.Fatal("the key's deletion was not seen")
	}
	t.Logf("key deleted %v after the caller's validity ran out", gone.Sub(valid).Round(time.Millisecond))
	if gone.Before(valid) {
		t.Fatalf("the key went %v before the validity the caller was given ran out", valid.Sub(gone).Round(time.Millisecond))
	}
}

// renewalRefusingClient is an etcd client whose lease renewals fail
// (Unavailable) once refuse is set.
func renewalRefusingClient(t *testing.T) (*clientv3.Client, *atomic.Bool) {
	cli, refuse, _ := renewalTimingClient(t)
	return cli, refuse
}

// renewalTimingClient is renewalRefusingClient's, and tells when its last
// renewal not refused began (UnixNano; 0: none yet).
func renewalTimingClient(t *testing.T) (*clientv3.Client, *atomic.Bool, *atomic.Int64) {
	var refuse atomic.Bool
	var last atomic.Int64
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: clitest.Srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				if method == "/etcdserverpb.Lease/LeaseKeepAlive" {
					if refuse.Load() {
						return nil, status.Error(codes.Unavailable, "test: renewal refused")
					}
					last.Store(time.Now().UnixNano())
				}
				return streamer(ctx, desc, cc, method, opts...)
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli, &refuse, &last
}

// A Shards member cut off while the lease under its shards is lost to
// refused renewals: its shard's key outlives the validity its last
// heartbeat's reply gave it.
func TestALeaseLostUnderACutOffMemberKeepsItsShardKeys(t *testing.T) {
	e, refuse, _, j, o := refusedMember(t, "renewals")
	ctx := ctxT(t)
	resp, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: j.HoldId}))
	if err != nil {
		t.Fatal(err)
	}
	valid := time.Now().Add(resp.Msg.GetValidity().AsDuration())
	w := e.etcd.Watch(ctx, o.Key)
	refuse.Store(true)
	keyOutlives(t, w, valid)
}

// A member that owns no shard is given validity bounded by its lease's
// deadline too: the next shard it takes has its key on that lease. Here
// its renewals are refused from just before one is due (the lease's
// deadline then two thirds of a TTL away) while it heartbeats, owning
// nothing; the older member leaves, it takes the shard, and it is cut off:
// the shard's key outlives every validity its replies gave it. (A reply
// once gave a whole budget from the heartbeat, past the lease's deadline.)
func TestAFreeMembersValidityIsBoundedByItsLease(t *testing.T) {
	const ttl = 3 * time.Second
	cli, refuse, renewed := renewalTimingClient(t)
	e := start(t, func(c *serve.Config) { c.Client = cli })
	ctx := ctxT(t)
	// a: a library member on a client of its own, the older, owns the
	// group's only shard until it leaves.
	g, err := shard.New(e.etcd, "bounded", 1, shard.WithNamespace(e.ns), shard.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	actx, leave := context.WithCancel(ctx)
	owned, left := make(chan struct{}, 1), make(chan error, 1)
	go func() {
		left <- g.Run(actx, "a", func(ctx context.Context, _ *shard.Shard) error {
			owned <- struct{}{}
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case <-owned:
	case <-time.After(10 * time.Second):
		t.Fatal("a never owned the shard")
	}
	b := e.shards(ctx, &batonv1.ShardsRequest{Group: "bounded", Count: 1, Member: "b", Ttl: dur(ttl)})
	j := b.joined(t)
	var latest time.Time
	beat := func() {
		sent := time.Now()
		resp, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: j.HoldId}))
		if err != nil {
			t.Fatal(err)
		}
		if v := sent.Add(resp.Msg.GetValidity().AsDuration()); v.After(latest) {
			latest = v
		}
	}
	// Renewals go every third of a TTL: refused from 0.9 of that after
	// the last one, the next one's.
	for first := renewed.Load(); renewed.Load() == first; time.Sleep(10 * time.Millisecond) {
	}
	for time.Since(time.Unix(0, renewed.Load())) < ttl*3/10 {
		beat()
		time.Sleep(50 * time.Millisecond)
	}
	member, err := e.etcd.Get(ctx, "/"+e.ns+"/v1/shard/bounded/m/b")
	if err != nil || len(member.Kvs) != 1 {
		t.Fatalf("b's member key: %v %v", member, err)
	}
	refuse.Store(true)
	// The loss comes a renewal attempt and two failed ones (a sixth of a
	// TTL each) from here; b takes the shard well before.
	for end := time.Now().Add(ttl / 15); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		beat()
	}
	leave()
	if err := <-left; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("a's Run: %v", err)
	}
	o := b.owned(t, 1)[0]
	// From here b is cut off: no heartbeat, nothing read.
	w := e.etcd.Watch(ctx, o.Key, clientv3.WithRev(o.Token))
	if k, err := e.etcd.Get(ctx, o.Key); err != nil || len(k.Kvs) != 1 || k.Kvs[0].Lease != member.Kvs[0].Lease {
		t.Fatalf("b took the shard on another lease than the one whose renewals were refused (%x): %v %v", member.Kvs[0].Lease, k, err)
	}
	keyOutlives(t, w, latest)
}

// A shard lost to failed renewals is named in every heartbeat's reply
// from then on, as one sent lost at its drain deadline is: once a new
// lease is granted, a reply's validity runs past the lost lease's
// deadline, when the shard's key goes, and a member slow to read its
// stream would count the shard its own after that.
func TestAShardLostToFailedRenewalsIsNamedInHeartbeatReplies(t *testing.T) {
	e, refuse, s, j, o := refusedMember(t, "named")
	ctx := ctxT(t)
	e.beat(t, j.HoldId, 300*time.Millisecond)
	refuse.Store(true)
	if l := s.next(t).GetLost(); l == nil || l.Shard != o.Shard || l.Token != o.Token {
		t.Fatalf("want lost for shard %d (token %d)", o.Shard, o.Token)
	}
	refuse.Store(false)
	resp, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: j.HoldId}))
	if err != nil {
		t.Fatal(err)
	}
	if l := resp.Msg.GetLost(); len(l) != 1 || l[0].Shard != o.Shard || l[0].Token != o.Token {
		t.Fatalf("the heartbeat's reply names %v, want shard %d (token %d) lost", l, o.Shard, o.Token)
	}
}

// refusedMember is a server whose lease renewals fail once refuse is set,
// and the one member (TTL 3 s) of a group of one shard, which it owns.
func refusedMember(t *testing.T, group string) (*env, *atomic.Bool, *shardsStream, *batonv1.Joined, *batonv1.ShardOwned) {
	t.Helper()
	cli, refuse := renewalRefusingClient(t)
	e := start(t, func(c *serve.Config) { c.Client = cli })
	s := e.shards(ctxT(t), &batonv1.ShardsRequest{Group: group, Count: 1, Member: "m", Ttl: dur(3 * time.Second)})
	j := s.joined(t)
	return e, refuse, s, j, s.owned(t, 1)[0]
}
