package main

import (
	"encoding/hex"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
)

// baton serve exports each Hold stream's span to the OTLP endpoint its
// environment names, as baton lock does: the child of the caller's
// traceparent header, with the library's wait and hold under it, flushed
// before it exits on SIGTERM.
func TestServeExportsTheStreamSpanUnderTheCallersTraceparent(t *testing.T) {
	const upstreamTrace, upstreamSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	col := startCollector(t)
	p := launch(t, launchConfig{endpoints: srv.Endpoint(), env: otlpEnv(col)}, "serve", "--listen", "127.0.0.1:0")
	line := p.waitLine("serving on http://", 30*time.Second)
	url := strings.TrimSpace(line[strings.Index(line, "http://"):])

	ctx := ctxT(t)
	c := batonv1connect.NewBatonServiceClient(http.DefaultClient, url, connect.WithProtoJSON())
	req := connect.NewRequest(&batonv1.HoldRequest{Names: []string{"traced-serve"}})
	req.Header().Set("traceparent", "00-"+upstreamTrace+"-"+upstreamSpan+"-01")
	st, err := c.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetHeld() == nil {
		t.Fatalf("first message %v (%v), want held", st.Msg(), st.Err())
	}
	held := st.Msg().GetHeld()
	// A unary call's span: the child of its own traceparent.
	const beatSpan = "b7ad6b7169203331"
	beat := connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: held.HoldId})
	beat.Header().Set("traceparent", "00-"+upstreamTrace+"-"+beatSpan+"-01")
	if _, err := c.Heartbeat(ctx, beat); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: held.HoldId})); err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	_ = st.Close()
	http.DefaultClient.CloseIdleConnections()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.errOut())
	}

	spans := col.byName(t) // flushed before the exit
	t.Logf("spans: %v", keys(spans))
	stream, wait, hold, hb := spans["baton.v1.BatonService/Hold"], spans["mutex wait"], spans["mutex hold"], spans["baton.v1.BatonService/Heartbeat"]
	if stream == nil || wait == nil || hold == nil || hb == nil {
		t.Fatalf("spans received: %v, want the stream's, the wait, the hold and the heartbeat's", keys(spans))
	}
	if got := hex.EncodeToString(hb.GetParentSpanId()); got != beatSpan || attr(hb, "baton.hold.id") != held.HoldId {
		t.Errorf("the heartbeat's span: parent %s (want %s), attributes %v", got, beatSpan, hb.GetAttributes())
	}
	delete(spans, "baton.v1.BatonService/Release") // no traceparent: a trace of its own
	for name, s := range spans {
		if got := hex.EncodeToString(s.GetTraceId()); got != upstreamTrace {
			t.Errorf("span %q in trace %s, want the caller's %s", name, got, upstreamTrace)
		}
	}
	if got := hex.EncodeToString(stream.GetParentSpanId()); got != upstreamSpan {
		t.Errorf("the stream's span's parent %s, want the traceparent's %s", got, upstreamSpan)
	}
	for _, s := range []string{"mutex wait", "mutex hold"} {
		if string(spans[s].GetParentSpanId()) != string(stream.GetSpanId()) {
			t.Errorf("%q is not a child of the stream's span", s)
		}
	}
	if attr(stream, "baton.hold.id") != held.HoldId || attr(stream, "baton.hold.outcome") != "released" ||
		attr(hold, "baton.fencing.token") != attr(stream, "baton.fencing.token") {
		t.Errorf("stream span %v\nhold span %v", stream.GetAttributes(), hold.GetAttributes())
	}
}
