package serve_test

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/cmd/baton/serve"
)

// unaryHeaders is the header block of a Connect (JSON) unary request of
// method, with a body to come.
func unaryHeaders(authority, method string) []byte {
	var b []byte
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", authority},
		{":path", "/" + batonv1connect.BatonServiceName + "/" + method}, {"content-type", "application/json"}} {
		b = append(b, hpackLiteral(f[0], f[1])...)
	}
	return b
}

// Callers that send their request's headers and then trickle its body (a
// slowloris on the body: a unary call's, a Hold stream's request) are cut
// off at --read-timeout, over HTTP/1.1 (the connection closed) and HTTP/2
// (the stream reset, the connection kept), while Hold streams on the same
// listener, over both, last past it (their request was read) with their
// heartbeats, and release as usual.
func TestSlowBodyIsCutOffButNotAStream(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	const readTimeout = time.Second
	addr := listenOn(t, serve.HTTPServerWithReadTimeout(e.srv.Handler(), readTimeout))

	stop := make(chan struct{})
	defer close(stop)
	cuts := make(chan cut, 16)
	for _, method := range []string{"Heartbeat", "Hold"} {
		conn, closed := dialRead(t, addr)
		ct := "application/json"
		if method == "Hold" {
			ct = "application/connect+json"
		}
		began := time.Now()
		if _, err := fmt.Fprintf(conn, "POST /%s/%s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: 1000\r\n\r\n",
			batonv1connect.BatonServiceName, method, ct); err != nil {
			t.Fatal(err)
		}
		trickle(cuts, stop, "http/1.1 "+method, began, closed, func(int) error { _, err := io.WriteString(conn, " "); return err })
	}
	h2 := dialH2(t, addr, 65535)
	resets := map[uint32]chan struct{}{1: make(chan struct{}), 3: make(chan struct{})}
	reset := map[uint32]chan struct{}{1: resets[1], 3: resets[3]} // the test's
	go func() {                                                   // the server's RST_STREAM of each slow stream
		for {
			select {
			case id := <-h2.rst:
				if c, ok := resets[id]; ok {
					close(c)
					delete(resets, id)
				}
			case <-stop:
				return
			}
		}
	}()
	for i, method := range []string{"Heartbeat", "Hold"} {
		id := uint32(2*i + 1)
		hdr := unaryHeaders(addr, method)
		if method == "Hold" {
			hdr = streamHeaders(addr, method)
		}
		began := time.Now()
		if err := h2.frame(frameHeaders, flagEndHeaders, id, hdr); err != nil { // no END_STREAM: a body to come
			t.Fatal(err)
		}
		trickle(cuts, stop, "http/2 "+method, began, reset[id], func(int) error { return h2.frame(frameData, 0, id, []byte(" ")) })
	}

	// Callers on the same listener, over HTTP/1.1 and HTTP/2, meanwhile:
	// a stream outlives the bound on its request.
	holdBeside(ctx, t, e, addr, 2*readTimeout+500*time.Millisecond, "--read-timeout must spare a stream whose request was read")

	for range 4 {
		select {
		case c := <-cuts:
			t.Logf("%s: cut off after %v", c.kind, c.after.Round(time.Millisecond))
			if c.after < readTimeout-200*time.Millisecond || c.after > readTimeout+3*time.Second {
				t.Fatalf("%s: cut off after %v, want about %v", c.kind, c.after, readTimeout)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("a slow body was not cut off")
		}
	}
	select {
	case <-h2.closed:
		t.Fatal("the HTTP/2 connection was closed: only its slow streams should be")
	default:
	}
}
