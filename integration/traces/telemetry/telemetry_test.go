package telemetry_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/batonhq/baton/internal/telemetry"
)

func recorder(t *testing.T) (*tracetest.SpanRecorder, trace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

// attrs maps a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func byName(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no span %q among %d", name, len(spans))
	return nil
}

func TestWaitThenHoldIsASiblingLinkedToTheWait(t *testing.T) {
	rec, tp := recorder(t)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "job")
	tg := telemetry.NewTarget(tp, telemetry.RWMutex, "team", "nightly").Mode("write")

	_, w := tg.StartWait(ctx)
	if !w.Recording() {
		t.Fatal("a wait of an SDK provider not recording")
	}
	w.Enqueued(2)
	hctx, h := w.Acquired(context.Background(), 42, 0x1f, "/team/v1/lock/nightly/1f", 15)
	if telemetry.HoldFrom(hctx) != h || telemetry.HoldFrom(context.Background()) != (telemetry.Hold{}) {
		t.Fatal("HoldFrom does not find the hold in its context")
	}
	if got := trace.SpanContextFromContext(hctx); !got.Equal(h.SpanContext()) || !got.IsValid() {
		t.Fatalf("hold context carries %v, want the hold's %v", got, h.SpanContext())
	}
	h.RenewalFailed(errors.New("deadline exceeded"))
	h.ReleaseRequested("ops")
	if w.Recording() || !h.Recording() {
		t.Fatal("the wait records after it ended, or the hold does not")
	}
	_, op := h.StartRelease(ctx)
	h.Released()
	h.Lost("key_deleted", errors.New("late")) // after the end: nothing
	op.End(nil)
	parent.End()

	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans ended, want 4 (wait, hold, release, job)", len(spans))
	}
	wait, hold, rel := byName(t, spans, "rwmutex wait"), byName(t, spans, "rwmutex hold"), byName(t, spans, "rwmutex release")
	for _, s := range []sdktrace.ReadOnlySpan{wait, hold, rel} {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s: parent %v, want the caller's span", s.Name(), s.Parent().SpanID())
		}
		a := attrs(s)
		if a[telemetry.LockName].AsString() != "nightly" || a[telemetry.LockNamespace].AsString() != "team" ||
			a[telemetry.LockPrimitive].AsString() != "rwmutex" || a[telemetry.LockMode].AsString() != "write" {
			t.Errorf("%s: attributes %v", s.Name(), s.Attributes())
		}
	}
	wa := attrs(wait)
	if wa[telemetry.LockOutcome].AsString() != "acquired" || wa[telemetry.LockQueuePosition].AsInt64() != 2 ||
		wa[telemetry.FencingToken].AsInt64() != 42 || wa[telemetry.LeaseID].AsString() != "1f" {
		t.Errorf("wait attributes %v", wait.Attributes())
	}
	ha := attrs(hold)
	if ha[telemetry.HoldOutcome].AsString() != "released" || ha[telemetry.FencingToken].AsInt64() != 42 ||
		ha[telemetry.LockKey].AsString() != "/team/v1/lock/nightly/1f" || ha[telemetry.LeaseTTL].AsInt64() != 15 {
		t.Errorf("hold attributes %v", hold.Attributes())
	}
	if l := hold.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != wait.SpanContext().SpanID() {
		t.Errorf("hold links %v, want the wait", l)
	}
	if l := rel.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != hold.SpanContext().SpanID() {
		t.Errorf("release links %v, want the hold", l)
	}
	var names []string
	for _, e := range hold.Events() {
		names = append(names, e.Name)
	}
	if len(names) != 2 || names[0] != telemetry.EventRenewalFailed || names[1] != telemetry.EventReleaseRequested {
		t.Errorf("hold events %v", names)
	}
	if hold.Status().Code == codes.Error || wait.StartTime().After(hold.StartTime()) || wait.EndTime().After(hold.StartTime()) {
		t.Errorf("hold status %v, wait [%v %v] hold from %v", hold.Status(), wait.StartTime(), wait.EndTime(), hold.StartTime())
	}
}

func TestLostHoldHasTheReasonAndAnErrorStatus(t *testing.T) {
	rec, tp := recorder(t)
	tg := telemetry.NewTarget(tp, telemetry.Election, "ns", "scheduler")
	_, w := tg.StartWait(context.Background())
	_, h := w.Acquired(context.Background(), 7, 1, "k", 10)
	h.Preempted("host-b")
	h.Lost("key_deleted", errors.New("baton: ownership lost: key deleted"))
	h.Released() // a release racing the loss: ignored
	hold := byName(t, rec.Ended(), "election hold")
	if hold.Status().Code != codes.Error || hold.Status().Description != "lost: key_deleted" {
		t.Fatalf("status %v", hold.Status())
	}
	if attrs(hold)[telemetry.HoldOutcome].AsString() != "lost" {
		t.Fatalf("attributes %v", hold.Attributes())
	}
	ev := hold.Events()
	if len(ev) != 2 || ev[0].Name != telemetry.EventPreempted || ev[1].Name != telemetry.EventLost {
		t.Fatalf("events %v", ev)
	}
	lost := map[attribute.Key]string{}
	for _, kv := range ev[1].Attributes {
		lost[kv.Key] = kv.Value.AsString()
	}
	if lost[telemetry.LossReason] != "key_deleted" || lost[telemetry.LossCause] != "baton: ownership lost: key deleted" {
		t.Fatalf("loss event %v", ev[1].Attributes)
	}
}

func TestWaitOutcomes(t *testing.T) {
	for _, tc := range []struct {
		outcome string
		failed  bool
	}{
		{telemetry.Busy, false},
		{telemetry.Cancelled, false},
		{telemetry.Refused, true},
		{telemetry.Lost, true},
		{telemetry.Failed, true},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			rec, tp := recorder(t)
			tg := telemetry.NewTarget(tp, telemetry.Semaphore, "ns", "pool").Limit(3)
			_, w := (&tg).StartWait(context.Background())
			w.End(tc.outcome, errors.New("why"))
			s := byName(t, rec.Ended(), "semaphore wait")
			if got := attrs(s)[telemetry.LockOutcome].AsString(); got != tc.outcome {
				t.Fatalf("outcome %q", got)
			}
			if (s.Status().Code == codes.Error) != tc.failed {
				t.Fatalf("status %v, want failed %v", s.Status(), tc.failed)
			}
		})
	}
}

func TestFenceSpansOnlyInsideATrace(t *testing.T) {
	rec, tp := recorder(t)
	tr := telemetry.Tracer(tp)
	_, f := telemetry.StartFence(context.Background(), tr, telemetry.SpanAdmit, "memory", "ledger", 3)
	f.End(telemetry.Stale, 5, errors.New("stale"))
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans without a trace, want none", n)
	}
	ctx, parent := tr.Start(context.Background(), "write")
	_, f = telemetry.StartFence(ctx, tr, telemetry.SpanAdmit, "memory", "ledger", 3)
	f.End(telemetry.Stale, 5, errors.New("stale"))
	parent.End()
	s := byName(t, rec.Ended(), telemetry.SpanAdmit)
	a := attrs(s)
	if a[telemetry.FencingOutcome].AsString() != "stale" || a[telemetry.FencingHighWater].AsInt64() != 5 ||
		a[telemetry.FencingToken].AsInt64() != 3 || a[telemetry.FencingResource].AsString() != "ledger" ||
		a[telemetry.FencingGuard].AsString() != "memory" || s.Status().Code != codes.Error {
		t.Fatalf("attributes %v status %v", s.Attributes(), s.Status())
	}
	if s.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatal("the check is not a child of the write")
	}
}

func TestZeroValuesDoNothing(t *testing.T) {
	var w telemetry.Wait
	w.Enqueued(1)
	w.End(telemetry.Busy, nil)
	var h telemetry.Hold
	h.RenewalFailed(nil)
	h.ReleaseRequested("")
	h.Preempted("")
	h.Lost("x", nil)
	h.Released()
	h.TransferredTo("")
	if ctx, h2 := w.Acquired(context.Background(), 1, 1, "k", 1); ctx != context.Background() || h2 != (telemetry.Hold{}) || h.SpanContext().IsValid() {
		t.Fatal("the zero Wait or Hold carries a span")
	}
	if _, o := h.StartRelease(context.Background()); o != (telemetry.Op{}) {
		t.Fatal("the zero Hold's release is traced")
	}
	if w.Recording() || h.Recording() {
		t.Fatal("zero values recording")
	}
	var o telemetry.Op
	o.End(errors.New("x"))
	var f telemetry.Fence
	f.End(telemetry.Admitted, 1, nil)
}

// cycle is every call of one lock cycle with events, as a primitive makes
// them.
func cycle(tg *telemetry.Target, ctx context.Context, err error) {
	_, w := tg.StartWait(ctx)
	w.Enqueued(1)
	_, h := w.Acquired(ctx, 42, 0x1f, "/k", 15)
	h.RenewalFailed(err)
	_, op := h.StartRelease(ctx)
	h.Released()
	op.End(nil)
}

// An untraced process pays the span starts only: no attribute, link or
// event is built for a span that is not recorded.
func TestUnrecordedSpansAllocateOnlyTheirStart(t *testing.T) {
	err := errors.New("x")
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
		max  float64
	}{
		// One span starts: the wait, whose no-op span under no trace is
		// dropped with its hold; a hold not recorded has no release span.
		{"explicit no-op", noop.NewTracerProvider(), 1}, // the start's context
		{"global default", nil, 3},                      // and the span, boxed twice
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := telemetry.NewTarget(tc.tp, telemetry.Mutex, "ns", "name")
			allocs := testing.AllocsPerRun(100, func() { cycle(&tg, ctx, err) })
			if allocs > tc.max {
				t.Fatalf("%v allocations per cycle, want at most %v", allocs, tc.max)
			}
			t.Logf("%v allocations per lock cycle", allocs)
		})
	}
	// A held lock keeps no span that is not recorded.
	tg := telemetry.NewTarget(nil, telemetry.Mutex, "ns", "name")
	_, w := tg.StartWait(ctx)
	if hctx, h := w.Acquired(ctx, 1, 1, "k", 1); h != (telemetry.Hold{}) || hctx != ctx {
		t.Fatal("an unrecorded hold keeps its span")
	}
	tr := telemetry.Tracer(nil)
	if a := testing.AllocsPerRun(100, func() {
		_, f := telemetry.StartFence(ctx, tr, telemetry.SpanAdmit, "memory", "r", 1)
		f.End(telemetry.Admitted, 1, nil)
	}); a != 0 {
		t.Fatalf("an untraced fencing check allocates %v times, want 0", a)
	}
}

// A no-op provider's wait under no trace is dropped, with its hold (the
// cheap path); under a trace (a remote parent) the no-op spans still carry
// it to the hold's context, and an SDK provider records both.
func TestNoopSpansAreDroppedOnlyOutsideATrace(t *testing.T) {
	ctx := context.Background()
	tg := telemetry.NewTarget(noop.NewTracerProvider(), telemetry.Mutex, "ns", "name")
	wctx, w := tg.StartWait(ctx)
	if wctx != ctx || w != (telemetry.Wait{}) {
		t.Fatal("a no-op wait under no trace is kept")
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	parent := trace.ContextWithRemoteSpanContext(ctx, sc)
	wctx, w = tg.StartWait(parent)
	if got := trace.SpanContextFromContext(wctx); got.TraceID() != sc.TraceID() || w.SpanContext().TraceID() != sc.TraceID() {
		t.Fatalf("a no-op wait under a trace lost it: %v", got)
	}
	if hctx, _ := w.Acquired(ctx, 1, 1, "k", 1); trace.SpanContextFromContext(hctx).TraceID() != sc.TraceID() {
		t.Fatal("the hold of a no-op wait under a trace does not carry it")
	}

	rec, tp := recorder(t)
	sdk := telemetry.NewTarget(tp, telemetry.Mutex, "ns", "name")
	_, w = sdk.StartWait(ctx)
	hctx, h := w.Acquired(ctx, 7, 1, "k", 1)
	if !h.Recording() || !trace.SpanContextFromContext(hctx).IsValid() {
		t.Fatal("an SDK hold outside a trace not recorded")
	}
	h.Released()
	if n := len(rec.Ended()); n != 2 {
		t.Fatalf("%d spans recorded, want the wait and the hold", n)
	}
}

func TestNilTargetTracesNothingAndAllocatesNothing(t *testing.T) {
	var tg *telemetry.Target
	if a := testing.AllocsPerRun(100, func() { cycle(tg, context.Background(), nil) }); a != 0 {
		t.Fatalf("%v allocations, want 0", a)
	}
}

// BenchmarkSpanCycle is the tracing cost of one lock cycle (a wait, a hold
// with an event, a release) alone: add it to a lock+unlock round trip.
func BenchmarkSpanCycle(b *testing.B) {
	rec := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	global, recorded := telemetry.NewTarget(nil, telemetry.Mutex, "ns", "name"), telemetry.NewTarget(sdk, telemetry.Mutex, "ns", "name")
	for _, bc := range []struct {
		name string
		tg   *telemetry.Target
	}{
		{"untraced", nil},
		{"global-noop", &global},
		{"sdk-recorder", &recorded},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			err := errors.New("x")
			n := 0
			for b.Loop() {
				cycle(bc.tg, context.Background(), err)
				if n++; n%1000 == 0 {
					rec.Reset() // the recorder keeps every span
				}
			}
		})
	}
}

func TestTransferSpanCarriesTokensAndOutcome(t *testing.T) {
	rec, tp := recorder(t)
	tg := telemetry.NewTarget(tp, telemetry.Election, "team", "sched")
	_, w := tg.StartWait(context.Background())
	_, h := w.Acquired(context.Background(), 42, 0x1f, "/team/v1/election/sched/1f", 15)
	_, bad := h.StartTransfer(context.Background(), 42, "/team/v1/election/sched/99")
	bad.EndTransfer(telemetry.TransferNoCandidate, 0, errors.New("not a live candidate"))
	_, op := h.StartTransfer(context.Background(), 42, "/team/v1/election/sched/2a")
	h.TransferredTo("/team/v1/election/sched/2a")
	op.EndTransfer(telemetry.TransferDone, 57, nil)
	var transfers []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "election transfer" {
			transfers = append(transfers, s)
		}
	}
	if len(transfers) != 2 {
		t.Fatalf("%d transfer spans, want 2", len(transfers))
	}
	b, g := attrs(transfers[0]), attrs(transfers[1])
	if b[telemetry.TransferOutcome].AsString() != "no_candidate" || transfers[0].Status().Code != codes.Error || b[telemetry.SuccessorToken].Type() != attribute.INVALID {
		t.Errorf("failed transfer: %v, status %v", transfers[0].Attributes(), transfers[0].Status())
	}
	if g[telemetry.TransferOutcome].AsString() != "transferred" || g[telemetry.FencingToken].AsInt64() != 42 ||
		g[telemetry.SuccessorToken].AsInt64() != 57 || g[telemetry.ElectionCandidate].AsString() != "/team/v1/election/sched/2a" ||
		transfers[1].Status().Code == codes.Error || g[telemetry.LockPrimitive].AsString() != "election" {
		t.Errorf("transfer: %v, status %v", transfers[1].Attributes(), transfers[1].Status())
	}
	// Untraced: no span, no panic.
	_, none := telemetry.Hold{}.StartTransfer(context.Background(), 1, "x")
	none.EndTransfer(telemetry.TransferDone, 2, nil)
}
