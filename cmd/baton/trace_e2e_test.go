package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/cmd/baton/cli"
)

// collector is an OTLP/gRPC trace receiver on 127.0.0.1: the collector's
// own service definition, keeping every span it is sent.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string // service.name of each span's resource
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{addr: ln.Addr().String()}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, c)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return c
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, s)
				c.services = append(c.services, service)
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// byName returns the spans received, by name; each name must be unique.
func (c *collector) byName(t *testing.T) map[string]*tracepb.Span {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]*tracepb.Span{}
	for i, s := range c.spans {
		if _, dup := out[s.GetName()]; dup {
			t.Fatalf("two spans named %q", s.GetName())
		}
		if c.services[i] != "baton" {
			t.Errorf("span %q from service %q, want baton", s.GetName(), c.services[i])
		}
		out[s.GetName()] = s
	}
	return out
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			v := kv.GetValue()
			if v.GetStringValue() != "" {
				return v.GetStringValue()
			}
			return fmt.Sprint(v.GetIntValue())
		}
	}
	return ""
}

var traceparentRE = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-01$`)

// The command run under the hold prints the TRACEPARENT it got: it names
// the hold's span, which baton exported with the wait, the release and
// the command's span, all in one trace, continuing baton's own
// TRACEPARENT.
func TestLockAndElectExportTheHoldAndPassItToTheCommand(t *testing.T) {
	const upstreamTrace, upstreamSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		name      string
		args      []string
		primitive string
		command   string
		hold      string
		release   string
	}{
		{"lock", []string{"lock", "traced-lock"}, "mutex", "baton lock", "mutex hold", "mutex release"},
		{"semaphore", []string{"lock", "traced-pool", "--limit", "2"}, "semaphore", "baton lock", "semaphore hold", "semaphore release"},
		{"elect", []string{"elect", "traced-election", "host-a", "--once"}, "election", "baton elect", "election hold", "election resign"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			col := startCollector(t)
			args := append(append([]string{}, tc.args...), "--", "sh", "-c", `echo "TP=$TRACEPARENT"`)
			p := launch(t, launchConfig{endpoints: srv.Endpoint(), env: []string{
				"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + col.addr,
				"OTEL_EXPORTER_OTLP_INSECURE=true",
				"OTEL_TRACES_EXPORTER=", "OTEL_SDK_DISABLED=", "OTEL_EXPORTER_OTLP_PROTOCOL=",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=",
				"TRACEPARENT=00-" + upstreamTrace + "-" + upstreamSpan + "-01", "TRACESTATE=",
			}}, args...)
			if code := p.wait(30 * time.Second); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out(), p.errOut())
			}
			line := strings.TrimSpace(p.waitLine("TP=", time.Second))
			m := traceparentRE.FindStringSubmatch(strings.TrimPrefix(line, "TP="))
			if m == nil {
				t.Fatalf("the command printed %q, want TP=<a sampled traceparent>", line)
			}
			childTrace, childParent := m[1], m[2]

			spans := col.byName(t) // baton flushed them before it exited
			hold, wait, rel, cmd := spans[tc.hold], spans[tc.primitive+" wait"], spans[tc.release], spans[tc.command]
			if hold == nil || wait == nil || rel == nil || cmd == nil {
				t.Fatalf("spans received: %v, want %q, %q, %q and %q", keys(spans), tc.command, tc.primitive+" wait", tc.hold, tc.release)
			}
			for name, s := range spans {
				if got := hex.EncodeToString(s.GetTraceId()); got != upstreamTrace {
					t.Errorf("span %q in trace %s, want baton's TRACEPARENT's %s", name, got, upstreamTrace)
				}
			}
			if childTrace != upstreamTrace {
				t.Errorf("the command's trace %s, want %s", childTrace, upstreamTrace)
			}
			if got := hex.EncodeToString(hold.GetSpanId()); childParent != got {
				t.Errorf("the command's parent span %s, want the hold's %s", childParent, got)
			}
			if got := hex.EncodeToString(cmd.GetParentSpanId()); got != upstreamSpan {
				t.Errorf("%q's parent %s, want TRACEPARENT's span %s", tc.command, got, upstreamSpan)
			}
			for _, s := range []*tracepb.Span{wait, hold, rel} {
				if string(s.GetParentSpanId()) != string(cmd.GetSpanId()) {
					t.Errorf("%q is not a child of %q", s.GetName(), tc.command)
				}
				if attr(s, "baton.lock.primitive") != tc.primitive || attr(s, "baton.lock.name") != tc.args[1] || attr(s, "baton.lock.namespace") != "baton" {
					t.Errorf("%q attributes %v", s.GetName(), s.GetAttributes())
				}
			}
			if l := hold.GetLinks(); len(l) != 1 || string(l[0].GetSpanId()) != string(wait.GetSpanId()) {
				t.Errorf("hold links %v, want the wait", l)
			}
			if attr(wait, "baton.lock.outcome") != "acquired" || attr(hold, "baton.hold.outcome") != "released" ||
				attr(hold, "baton.fencing.token") == "" || attr(hold, "baton.fencing.token") != attr(wait, "baton.fencing.token") {
				t.Errorf("wait %v\nhold %v", wait.GetAttributes(), hold.GetAttributes())
			}
			if attr(cmd, "process.exit.code") != "0" || cmd.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("command span %v status %v", cmd.GetAttributes(), cmd.GetStatus())
			}
		})
	}
}

// Without an OTLP endpoint nothing is exported and nothing is set up; a
// TRACEPARENT baton got is passed on as it is, none is made up.
func TestLockWithoutAnEndpointPassesTheTraceThrough(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct{ in, want string }{{tp, tp}, {"", ""}} {
		p := launch(t, launchConfig{endpoints: srv.Endpoint(), env: []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "TRACEPARENT=" + tc.in, "TRACESTATE=",
		}}, "lock", "untraced", "--", "sh", "-c", `echo "TP=$TRACEPARENT"`)
		if code := p.wait(30 * time.Second); code != 0 {
			t.Fatalf("exit %d\nstderr:\n%s", code, p.errOut())
		}
		if got := strings.TrimSpace(p.waitLine("TP=", time.Second)); got != "TP="+tc.want {
			t.Errorf("TRACEPARENT %q in: the command printed %q, want %q", tc.in, got, "TP="+tc.want)
		}
	}
}

// otlpEnv points baton at col, and nothing else of the test's own
// environment at any collector or trace.
func otlpEnv(col *collector) []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + col.addr, "OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_TRACES_EXPORTER=", "OTEL_SDK_DISABLED=", "OTEL_EXPORTER_OTLP_PROTOCOL=",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "TRACEPARENT=", "TRACESTATE=",
	}
}

// An operator's delete of the holder's key ends the hold as lost, with
// the reason, and the command's span with baton's exit status.
func TestLockLostByAdminDeleteIsALostHold(t *testing.T) {
	col := startCollector(t)
	const name = "traced-loss"
	p := launch(t, launchConfig{endpoints: srv.Endpoint(), env: otlpEnv(col)},
		"lock", name, "--grace", "1s", "--", "sh", "-c", "echo started; while :; do sleep 0.05; done")
	p.waitLine("started", 15*time.Second)
	resp, err := client(t).Delete(ctxT(t), "/baton/v1/lock/"+name+"/", clientv3.WithPrefix())
	if err != nil || resp.Deleted != 1 {
		t.Fatalf("delete the holder's key: %v, %d deleted", err, resp.Deleted)
	}
	if code := p.wait(15 * time.Second); code != cli.ExitOwnershipLost {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, cli.ExitOwnershipLost, p.errOut())
	}
	spans := col.byName(t)
	hold, cmd := spans["mutex hold"], spans["baton lock"]
	if hold == nil || cmd == nil {
		t.Fatalf("spans received: %v", keys(spans))
	}
	if attr(hold, "baton.hold.outcome") != "lost" || hold.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("hold attributes %v status %v, want lost with an error status", hold.GetAttributes(), hold.GetStatus())
	}
	var lost *tracepb.Span_Event
	for _, e := range hold.GetEvents() {
		if e.GetName() == "baton.hold.lost" {
			lost = e
		}
	}
	if lost == nil {
		t.Fatalf("hold events %v, want baton.hold.lost", hold.GetEvents())
	}
	reason := ""
	for _, kv := range lost.GetAttributes() {
		if kv.GetKey() == "baton.loss.reason" {
			reason = kv.GetValue().GetStringValue()
		}
	}
	if reason != "key_deleted" {
		t.Errorf("loss reason %q, want key_deleted; event %v", reason, lost.GetAttributes())
	}
	if attr(cmd, "process.exit.code") != fmt.Sprint(cli.ExitOwnershipLost) || cmd.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("command span %v status %v", cmd.GetAttributes(), cmd.GetStatus())
	}
}

func keys(m map[string]*tracepb.Span) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
