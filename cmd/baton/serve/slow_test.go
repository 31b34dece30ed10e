package serve_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/cmd/baton/serve"
)

// rawH2 is an HTTP/2 client connection written frame by frame, to behave
// as no well-mannered client does: never read a stream, trickle headers.
type rawH2 struct {
	conn net.Conn
	mu   sync.Mutex // guards writes
	// rst receives the stream ID of each RST_STREAM the server sends.
	rst chan uint32
	// closed is closed once the server closed the connection (or sent
	// GOAWAY and then closed it).
	closed chan struct{}
	// acked is closed once the server's first SETTINGS is acknowledged:
	// no frame may come between a HEADERS and its CONTINUATION.
	acked  chan struct{}
	dataMu sync.Mutex
	data   []byte // the payloads of the DATA frames the server sent
}

// HTTP/2 frame types and flags (RFC 9113).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4

	settingInitialWindowSize = 0x4
)

// dialH2 opens an h2c connection (prior knowledge) whose SETTINGS set
// every stream's initial flow-control window to window: with 0 the server
// can send a stream's headers and no byte of its messages.
func dialH2(t *testing.T, addr string, window uint32) *rawH2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &rawH2{conn: conn, rst: make(chan uint32, 16), closed: make(chan struct{}), acked: make(chan struct{})}
	t.Cleanup(func() { _ = conn.Close(); <-c.closed })
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	var s [6]byte
	binary.BigEndian.PutUint16(s[:2], settingInitialWindowSize)
	binary.BigEndian.PutUint32(s[2:], window)
	if err := c.frame(frameSettings, 0, 0, s[:]); err != nil {
		t.Fatal(err)
	}
	go c.read()
	select {
	case <-c.acked:
	case <-time.After(10 * time.Second):
		t.Fatal("no SETTINGS from the server")
	}
	return c
}

// read reads the server's frames until the connection closes: it
// acknowledges SETTINGS and reports RST_STREAM; it never sends a
// WINDOW_UPDATE, so no stream's window ever opens.
func (c *rawH2) read() {
	defer close(c.closed)
	r := bufio.NewReader(c.conn)
	var hdr [9]byte
	acked := false
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags, id := hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&0x7fffffff
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		switch {
		case typ == frameSettings && flags&flagAck == 0:
			_ = c.frame(frameSettings, flagAck, 0, nil)
			if !acked {
				acked = true
				close(c.acked)
			}
		case typ == frameData:
			c.dataMu.Lock()
			c.data = append(c.data, payload...)
			c.dataMu.Unlock()
		case typ == frameRSTStream:
			select {
			case c.rst <- id:
			default:
			}
		}
	}
}

// listenOn serves hs on a loopback listener until the test ends, and
// returns its address.
func listenOn(t *testing.T, hs *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close(); <-served })
	return ln.Addr().String()
}

// dialRead connects to addr and reads whatever the server sends; closed
// closes once the server closed the connection.
func dialRead(t *testing.T, addr string) (conn net.Conn, closed <-chan struct{}) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := make(chan struct{})
	go func() { defer close(c); _, _ = io.Copy(io.Discard, conn) }()
	return conn, c
}

// cut is how long after its first byte the server cut a slow caller off.
type cut struct {
	kind  string
	after time.Duration
}

// trickle writes (write(i)) once every 100 ms for 20 s, unless cutOff
// closes first, when it reports on cuts how long after began, or stop
// does.
func trickle(cuts chan<- cut, stop <-chan struct{}, kind string, began time.Time, cutOff <-chan struct{}, write func(i int) error) {
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-cutOff:
				cuts <- cut{kind, time.Since(began)}
				return
			case <-stop:
				return
			case <-tick.C:
				if time.Since(began) > 20*time.Second {
					return
				}
				_ = write(i)
			}
		}
	}()
}

// call opens stream 1 with a call of method and its one request message,
// body, and returns when the request was sent.
func (c *rawH2) call(t *testing.T, addr, method, body string) time.Time {
	t.Helper()
	if err := c.frame(frameHeaders, flagEndHeaders, 1, streamHeaders(addr, method)); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	if err := c.frame(frameData, flagEndStream, 1, envelope(body)); err != nil {
		t.Fatal(err)
	}
	return sent
}

// awaitReset waits for the server's RST_STREAM of stream 1, the unread one.
func (c *rawH2) awaitReset(t *testing.T) {
	t.Helper()
	select {
	case id := <-c.rst:
		if id != 1 {
			t.Fatalf("RST_STREAM of stream %d", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the unread stream was not reset")
	}
}

func (c *rawH2) frame(typ, flags byte, stream uint32, payload []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = typ, flags
	binary.BigEndian.PutUint32(b[5:], stream)
	_, err := c.conn.Write(append(b, payload...))
	return err
}

// hpackLiteral encodes one header field as a literal without indexing,
// with a new name and no Huffman coding (RFC 7541 6.2.2): every name and
// value here is shorter than 127 bytes.
func hpackLiteral(name, value string) []byte {
	b := []byte{0x00, byte(len(name))}
	b = append(b, name...)
	b = append(b, byte(len(value)))
	return append(b, value...)
}

// streamHeaders is the header block of a Connect (JSON) stream request
// of method (Hold, Lead, Shards).
func streamHeaders(authority, method string) []byte {
	var b []byte
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", authority},
		{":path", "/" + batonv1connect.BatonServiceName + "/" + method}, {"content-type", "application/connect+json"}} {
		b = append(b, hpackLiteral(f[0], f[1])...)
	}
	return b
}

// messages is what the server sent of a Connect (JSON) stream: each whole
// message, without a last one cut short.
func (c *rawH2) messages(t *testing.T) []*batonv1.ShardsResponse {
	t.Helper()
	c.dataMu.Lock()
	b := slices.Clone(c.data)
	c.dataMu.Unlock()
	var out []*batonv1.ShardsResponse
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			break
		}
		m := new(batonv1.ShardsResponse)
		if err := protojson.Unmarshal(b[5:5+n], m); err != nil {
			t.Fatalf("%q: %v", b[5:5+n], err)
		}
		out, b = append(out, m), b[5+n:]
	}
	return out
}

// envelope is a Connect stream's message: flags, length, the JSON.
func envelope(msg string) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// A caller that never reads its Hold stream (its streams' flow-control
// window is 0, so held cannot leave the server) is cut off at the send
// timeout: the stream is reset, other callers are unaffected, and its key
// is kept until the validity the server gave it ran out (it might believe
// it holds until then), then deleted: the next holder gets it then,
// before the TTL.
func TestCallerThatNeverReadsItsStreamIsCutOff(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	ttl := 2 * time.Second
	addr := strings.TrimPrefix(e.url, "http://")

	other := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"bystander"}, Ttl: dur(ttl)})
	ho := other.held(t)

	c := dialH2(t, addr, 0)
	sent := c.call(t, addr, "Hold", `{"names":["unread"],"ttl":"2s","identity":"mute"}`)
	waitGauge(t, e, "held", 2)
	next := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"unread"}, Ttl: dur(ttl)})

	// The held message waits on the window: the server resets the stream.
	c.awaitReset(t)
	reset := time.Since(sent)

	// Meanwhile the bystander heartbeats on, and the key stays until the
	// cut-off caller's validity ran out.
	for {
		if _, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: ho.HoldId})); err != nil {
			t.Fatalf("bystander's heartbeat: %v", err)
		}
		select {
		case m := <-next.events:
			if m.GetHeld() == nil {
				t.Fatalf("next: %v", m)
			}
			got := time.Since(sent)
			// The validity held would have carried is the earlier of the
			// heartbeat budget and the shared lease's deadline, at least
			// the budget less a renewal period (a third of the TTL).
			least := serve.Budget(ttl) - ttl/3
			t.Logf("stream reset %v after the request (send timeout %v); next holder %v after it (validity at least %v, at most %v; TTL %v)",
				reset.Round(time.Millisecond), serve.SendTimeout(ttl), got.Round(time.Millisecond), least, serve.Budget(ttl), ttl)
			if got < least || got > ttl+time.Second {
				t.Fatalf("the next holder acquired %v after the cut-off caller's request: want after its validity (%v to %v), before the TTL", got, least, serve.Budget(ttl))
			}
			if m := other.events; len(m) != 0 {
				t.Fatalf("bystander: %v", <-m)
			}
			if n := counter(t, e, "baton_serve_send_timeouts_total"); n != 1 {
				t.Fatalf("baton_serve_send_timeouts_total %v, want 1", n)
			}
			waitCounter(t, e, "baton_serve_holds_ended_total", "stream_closed", 1)
			return
		case err := <-next.done:
			t.Fatalf("next holder: %v", err)
		case <-time.After(ho.HeartbeatInterval.AsDuration()):
			if time.Since(sent) > 10*time.Second {
				t.Fatal("the cut-off caller's key was not deleted in 10 s")
			}
		}
	}
}

// A leader that never reads its Lead stream is cut off the same way: the
// next candidate leads once the validity the server gave the silent one
// ran out, before the TTL.
func TestLeaderThatNeverReadsItsStreamIsCutOff(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	ttl := 2 * time.Second
	addr := strings.TrimPrefix(e.url, "http://")
	c := dialH2(t, addr, 0)
	sent := c.call(t, addr, "Lead", `{"name":"mute-term","ttl":"2s","identity":"mute"}`)
	waitGauge(t, e, "held", 1)
	next := e.lead(ctx, &batonv1.LeadRequest{Name: "mute-term", Ttl: dur(ttl)})
	c.awaitReset(t)
	l := next.leading(t)
	got := time.Since(sent)
	least := serve.Budget(ttl) - ttl/3
	t.Logf("the next candidate leads %v after the silent one's request (validity at least %v, at most %v; TTL %v)", got.Round(time.Millisecond), least, serve.Budget(ttl), ttl)
	if got < least || got > ttl+time.Second {
		t.Fatalf("the next candidate led %v after the silent one's request: want after its validity, before the TTL", got)
	}
	if n := counter(t, e, "baton_serve_send_timeouts_total"); n != 1 {
		t.Fatalf("baton_serve_send_timeouts_total %v, want 1", n)
	}
	if _, err := e.client.Resign(ctx, connect.NewRequest(&batonv1.ResignRequest{HoldId: l.HoldId})); err != nil {
		t.Fatal(err)
	}
}

// A Shards member that stops reading its stream (its window takes joined
// and a few owned, then never opens: a shard's work waits on the send)
// is cut off the same way: the stream is reset, the membership ends with
// CAUSE_STREAM_CLOSED, and the shards its caller was told it owns go to
// the next member only once the validity the server gave the silent one
// ran out, before the TTL; a bystander's hold heartbeats on meanwhile.
func TestShardsMemberThatNeverReadsItsStreamIsCutOff(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	ttl := 2 * time.Second
	addr := strings.TrimPrefix(e.url, "http://")

	other := e.hold(ctx, &batonv1.HoldRequest{Names: []string{"bystander"}, Ttl: dur(ttl)})
	ho := other.held(t)
	e.beat(t, ho.HoldId, ho.HeartbeatInterval.AsDuration())

	const count = 16
	c := dialH2(t, addr, 400)
	sent := c.call(t, addr, "Shards", fmt.Sprintf(`{"group":"mute-group","count":%d,"member":"mute","ttl":"2s"}`, count))
	c.awaitReset(t)
	reset := time.Since(sent)
	msgs := c.messages(t)
	if len(msgs) < 2 || msgs[0].GetJoined() == nil {
		t.Fatalf("the cut-off member was sent %v, want joined and owned", msgs)
	}
	told := make(map[uint32]bool)
	for _, m := range msgs[1:] {
		if m.GetOwned() == nil {
			t.Fatalf("the cut-off member was sent %v, want owned", m)
		}
		told[m.GetOwned().Shard] = true
	}

	next := e.shards(ctx, &batonv1.ShardsRequest{Group: "mute-group", Count: count, Member: "next", Ttl: dur(ttl)})
	jn := next.joined(t)
	e.beat(t, jn.HoldId, jn.HeartbeatInterval.AsDuration())
	least := serve.Budget(ttl) - ttl/3
	var last time.Duration
	for range count {
		o := next.owned(t, 1)
		for id := range o {
			got := time.Since(sent)
			if !told[id] {
				continue
			}
			last = max(last, got)
			if got < least {
				t.Fatalf("the next member owned shard %d %v after the cut-off member's request, which was told it owns it: want after its validity (%v to %v)", id, got, least, serve.Budget(ttl))
			}
		}
	}
	t.Logf("stream reset %v after the request (send timeout %v; %d of %d shards told); the next member owned them all %v after it (validity at least %v, at most %v; TTL %v)",
		reset.Round(time.Millisecond), serve.SendTimeout(ttl), len(told), count, last.Round(time.Millisecond), least, serve.Budget(ttl), ttl)
	if last > ttl+time.Second {
		t.Fatalf("the next member owned the cut-off member's shards %v after its request: want before the TTL", last)
	}
	if k := e.shardKeys(t, "mute-group"); k["/"+e.ns+"/v1/shard/mute-group/m/mute"] != "" {
		t.Fatalf("the cut-off member is still in the group: %v", k)
	}
	if n := counter(t, e, "baton_serve_send_timeouts_total"); n != 1 {
		t.Fatalf("baton_serve_send_timeouts_total %v, want 1", n)
	}
	waitCounter(t, e, "baton_serve_holds_ended_total", "stream_closed", 1)
	if m := other.events; len(m) != 0 {
		t.Fatalf("bystander: %v", <-m)
	}
	if _, err := e.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: ho.HoldId})); err != nil {
		t.Fatalf("bystander's heartbeat: %v", err)
	}
}

// Slow callers are cut off and nobody else waits for them: callers that
// trickle their request headers (over HTTP/1.1, or HEADERS and
// CONTINUATION frames over HTTP/2) are disconnected at the read-header
// or idle timeout, while a caller on the same listener holds (longer than
// the idle timeout, which spares a connection with a stream open),
// heartbeats, releases and checks health as usual.
func TestSlowCallersAreCutOffWithoutAffectingOthers(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	const readHeader, idle = time.Second, 2 * time.Second
	addr := listenOn(t, serve.HTTPServerWithTimeouts(e.srv.Handler(), readHeader, idle))

	stop := make(chan struct{})
	defer close(stop)
	cuts := make(chan cut, 32)
	const slowHTTP1 = 10
	for range slowHTTP1 {
		conn, closed := dialRead(t, addr)
		began := time.Now()
		if _, err := io.WriteString(conn, "POST /"+batonv1connect.BatonServiceName+"/Hold HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
		trickle(cuts, stop, "http/1.1 headers", began, closed, func(int) error { _, err := io.WriteString(conn, "a"); return err })
	}
	h2 := dialH2(t, addr, 65535)
	if err := h2.frame(frameHeaders, 0, 1, streamHeaders(addr, "Hold")); err != nil { // no END_HEADERS: more to come
		t.Fatal(err)
	}
	trickle(cuts, stop, "http/2 continuation", time.Now(), h2.closed, func(i int) error {
		return h2.frame(frameContinuation, 0, 1, hpackLiteral("x-slow", fmt.Sprint(i)))
	})

	// A caller on the same listener, over HTTP/1.1 and HTTP/2, meanwhile.
	holdBeside(ctx, t, e, addr, idle+time.Second, "the idle timeout must spare a connection with a stream open")

	for range slowHTTP1 + 1 {
		select {
		case c := <-cuts:
			limit := readHeader
			if c.kind == "http/2 continuation" {
				limit = idle
			}
			t.Logf("%s: cut off after %v", c.kind, c.after.Round(time.Millisecond))
			if c.after < limit-200*time.Millisecond || c.after > limit+3*time.Second {
				t.Fatalf("%s: cut off after %v, want about %v", c.kind, c.after, limit)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("a slow caller was not cut off")
		}
	}
}

// counter is the value of a counter without labels of the env's registry.
func counter(t *testing.T, e *env, name string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// holdBeside holds a lock on addr over HTTP/1.1 and then over HTTP/2,
// each heartbeating for lasting beside the slow callers the test started:
// every heartbeat answered within a second, nothing sent on the stream
// and the stream not ended (spared says why it must be) until its
// release, which is answered with released.
func holdBeside(ctx context.Context, t *testing.T, e *env, addr string, lasting time.Duration, spared string) {
	t.Helper()
	hc := h2Only()
	defer hc.CloseIdleConnections()
	for _, c := range []struct {
		name   string
		client batonv1connect.BatonServiceClient
	}{
		{"http/1.1", batonv1connect.NewBatonServiceClient(e.hc, "http://"+addr, connect.WithProtoJSON())},
		{"http/2", batonv1connect.NewBatonServiceClient(hc, "http://"+addr, connect.WithGRPC())},
	} {
		s := holdOn(ctx, c.client, &batonv1.HoldRequest{Names: []string{"meanwhile-" + c.name}, Ttl: dur(2 * time.Second)})
		h := s.held(t)
		for end := time.Now().Add(lasting); time.Now().Before(end); {
			t0 := time.Now()
			if _, err := c.client.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: h.HoldId})); err != nil {
				t.Fatalf("%s: heartbeat beside slow callers: %v", c.name, err)
			}
			if d := time.Since(t0); d > time.Second {
				t.Fatalf("%s: a heartbeat took %v beside slow callers", c.name, d)
			}
			select {
			case m := <-s.events:
				t.Fatalf("%s: %v while heartbeating (%s)", c.name, m, spared)
			case err := <-s.done:
				t.Fatalf("%s: the stream ended while heartbeating (%s): %v", c.name, spared, err)
			case <-time.After(h.HeartbeatInterval.AsDuration()):
			}
		}
		if _, err := c.client.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: h.HoldId})); err != nil {
			t.Fatalf("%s: release: %v", c.name, err)
		}
		if m := s.next(t); m.GetReleased() == nil {
			t.Fatalf("%s: %v, want released", c.name, m)
		}
	}
}
