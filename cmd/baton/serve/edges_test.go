package serve_test

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"strings"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/serve"
	"github.com/batonhq/baton/mutex"
)

// awaitHeld waits, up to about 5 s, for the Hold stream c reads to bring
// its first message, which must be held.
func (c *rawH2) awaitHeld(t *testing.T) *batonv1.Held {
	t.Helper()
	for range 1000 {
		if ms := c.holdMessages(t); len(ms) > 0 {
			if ms[0].GetHeld() == nil {
				t.Fatalf("first message %v", ms[0])
			}
			return ms[0].GetHeld()
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no held")
	return nil
}

// holdMessages parses the Connect (JSON) messages of a Hold stream read by c.
func (c *rawH2) holdMessages(t *testing.T) []*batonv1.HoldResponse {
	t.Helper()
	c.dataMu.Lock()
	b := append([]byte(nil), c.data...)
	c.dataMu.Unlock()
	var out []*batonv1.HoldResponse
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			break
		}
		m := new(batonv1.HoldResponse)
		if b[0]&0x2 == 0 { // not the end-of-stream message
			if err := protojson.Unmarshal(b[5:5+n], m); err != nil {
				t.Fatalf("%q: %v", b[5:5+n], err)
			}
			out = append(out, m)
		}
		b = b[5+n:]
	}
	return out
}

// A caller cut off (a message not taken within sendTimeout) after it was
// given a validity keeps its key for the drift margin after that
// validity, as at a heartbeat timeout: time to notice its deadline passed
// before the key can go.
func TestACutOffCallersKeyOutlivesItsValidityByTheDriftMargin(t *testing.T) {
	ttl := 10 * time.Second
	var mu sync.Mutex
	var unlockAt time.Time
	var unlockCause error
	unlocked := make(chan struct{})
	e := start(t, func(c *serve.Config) {
		serve.WithHooks(c, serve.Hooks{BeforeUnlock: func(_ string, cause error) {
			mu.Lock()
			defer mu.Unlock()
			if unlockAt.IsZero() {
				unlockAt, unlockCause = time.Now(), cause
				close(unlocked)
			}
		}})
	})
	ctx := ctxT(t)
	addr := strings.TrimPrefix(e.url, "http://")
	c := dialH2(t, addr, 65535)
	c.call(t, addr, "Hold", `{"names":["cut"],"ttl":"10s","identity":"mute"}`)
	held := c.awaitHeld(t)
	deadline := held.Deadline.AsTime()
	// From now on the caller takes nothing more: its stream's window goes
	// below zero (SETTINGS_INITIAL_WINDOW_SIZE 0 after held used some).
	var s [6]byte
	binary.BigEndian.PutUint16(s[:2], settingInitialWindowSize)
	if err := c.frame(frameSettings, 0, 0, s[:]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := mutex.RequestRelease(ctx, e.etcd, "cut", "review", mutex.WithNamespace(e.ns), mutex.WithIdentity("oncall")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-unlocked:
	case <-time.After(30 * time.Second):
		t.Fatal("never unlocked")
	}
	mu.Lock()
	defer mu.Unlock()
	margin := serve.Budget(ttl) / 16
	t.Logf("cause %v; key deleted %v after the validity given in held (drift margin %v)", unlockCause, unlockAt.Sub(deadline).Round(time.Millisecond), margin)
	if got := unlockAt.Sub(deadline); got < margin {
		t.Fatalf("the cut-off caller's key went %v after the validity it was given: want at least the drift margin %v (as at a heartbeat timeout)", got.Round(time.Millisecond), margin)
	}
}

// A send whose timer fires as it completes (or after) has its stream's
// write deadline set before the handler may return: net/http forgets, and
// pools, an HTTP/2 stream's writer once its handler returned, and a
// deadline set then crashed the server (a nil writer state). The pause
// point holds the timer before it sets the deadline while the caller's
// window opens, so the send completes late; the handler must wait for the
// timer, and the server lives on.
func TestALateSendsDeadlineIsSetBeforeItsHandlerReturns(t *testing.T) {
	entered, resume := make(chan struct{}, 1), make(chan struct{})
	e := start(t, func(c *serve.Config) {
		serve.WithHooks(c, serve.Hooks{LateSend: func() {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-resume
		}})
	})
	addr := strings.TrimPrefix(e.url, "http://")
	c := dialH2(t, addr, 0)
	c.call(t, addr, "Observe", `{"kind":"OBJECT_KIND_LOCK","name":"late"}`)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the send was never late")
	}
	var inc [4]byte
	binary.BigEndian.PutUint32(inc[:], 1<<20)
	if err := c.frame(0x8, 0, 1, inc[:]); err != nil { // WINDOW_UPDATE: the late send goes out
		t.Fatal(err)
	}
	ended := func() bool {
		c.dataMu.Lock()
		b := append([]byte(nil), c.data...)
		c.dataMu.Unlock()
		for len(b) >= 5 {
			n := int(binary.BigEndian.Uint32(b[1:5]))
			if len(b) < 5+n {
				break
			}
			if b[0]&0x2 != 0 {
				return true
			}
			b = b[5+n:]
		}
		return false
	}
	// While the timer is held, the handler waits for it: no end of stream.
	for range 30 {
		if ended() {
			close(resume)
			t.Fatal("the handler returned before its late send's timer set the deadline")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(resume)
	resp, err := e.hc.Post(e.url+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatalf("the server after the late send: %v", err)
	}
	_ = resp.Body.Close()
}

// failFirstRequestsRead refuses the first read of a namespace's release
// requests with PermissionDenied (an RBAC change under way), then reads.
type failFirstRequestsRead struct {
	clientv3.KV
	failed atomic.Bool
}

func (f *failFirstRequestsRead) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if strings.Contains(key, "/v1/release/") && f.failed.CompareAndSwap(false, true) {
		return nil, rpctypes.ErrPermissionDenied
	}
	return f.KV.Get(ctx, key, opts...)
}

// A refused read of a namespace's release requests (permission denied, as
// during an RBAC change) fails the holds following them then, as the
// library's per-hold read failed its one hold; a later hold of the
// namespace reads again and gets its requests.
func TestARefusedReadOfRequestsFailsOnlyTheHoldsFollowingThen(t *testing.T) {
	cli := clitest.Srv.Client(t)
	f := &failFirstRequestsRead{KV: cli.KV}
	cli.KV = f
	ended := make(chan struct{})
	e := start(t, func(c *serve.Config) {
		c.Client = cli
		serve.WithHooks(c, serve.Hooks{RequestsSeen: func(_ string, rev int64) {
			if rev == -1 {
				close(ended)
			}
		}})
	})
	ctx := ctxT(t)
	a := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"first"}})
	a.held(t)
	select {
	case <-ended: // refused; the permission is back
	case <-time.After(10 * time.Second):
		t.Fatal("the namespace's watch of requests did not end on the refusal")
	}
	b := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"asked"}})
	b.held(t)
	if err := mutex.RequestRelease(ctx, e.etcd, "asked", "later", mutex.WithNamespace(e.ns), mutex.WithIdentity("oncall")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-b.events:
		if m.GetReleaseRequested() == nil {
			t.Fatalf("got %v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a release request made after the read was allowed again never reached its hold (the namespace's watch ended for good)")
	}
	a.cancel()
	b.cancel()
}
