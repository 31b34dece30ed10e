package election_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

// A hand-over in one trace: the leader resigns while a candidate waits;
// the leader's term ends released, the candidate's wait, which began
// during the term, ends acquired after it, and its term has a higher token.
func TestTracedElectionHandOver(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	name := fmt.Sprintf("traced-handover-%x", rand.Uint32())
	newE := func() *election.Election {
		e, err := election.New(client(t), name, election.WithTracerProvider(tp))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	a, b := newE(), newE()
	ctx := etcdtest.Context(t, 20*time.Second)
	ctx, root := tp.Tracer("test").Start(ctx, "rollout")
	ta, err := a.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *election.Term, 1)
	go func() {
		tb, err := b.Campaign(ctx, "host-b")
		if err != nil {
			t.Error(err)
		}
		got <- tb
	}()
	for i := 0; ; i++ { // until host-b is queued
		cands, err := a.Candidates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(cands) == 2 {
			break
		}
		if i == 500 {
			t.Fatal("host-b never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := <-got
	if tb == nil {
		t.FailNow()
	}
	if sc := trace.SpanContextFromContext(tb.Context()); sc.TraceID() != root.SpanContext().TraceID() {
		t.Fatal("the new term's Context is not in the trace")
	}
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	root.End()

	var waits, holds, resigns []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "election wait":
			waits = append(waits, s)
		case "election hold":
			holds = append(holds, s)
		case "election resign":
			resigns = append(resigns, s)
		}
	}
	if len(waits) != 2 || len(holds) != 2 || len(resigns) != 2 {
		t.Fatalf("%d waits, %d holds, %d resignations; want 2 each", len(waits), len(holds), len(resigns))
	}
	attr := func(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
		for _, kv := range s.Attributes() {
			if kv.Key == k {
				return kv.Value
			}
		}
		return attribute.Value{}
	}
	aHold, bWait, bHold := holds[0], waits[1], holds[1]
	if attr(aHold, "baton.hold.outcome").AsString() != "released" || attr(bHold, "baton.hold.outcome").AsString() != "released" {
		t.Errorf("holds ended %v and %v", aHold.Attributes(), bHold.Attributes())
	}
	if attr(bWait, "baton.lock.queue_position").AsInt64() != 1 || attr(bWait, "baton.lock.primitive").AsString() != "election" {
		t.Errorf("host-b's wait %v", bWait.Attributes())
	}
	if !bWait.StartTime().Before(aHold.EndTime()) || bWait.EndTime().Before(aHold.EndTime()) {
		t.Errorf("host-b's wait [%v, %v] does not cover host-a's term end %v", bWait.StartTime(), bWait.EndTime(), aHold.EndTime())
	}
	if attr(bHold, "baton.fencing.token").AsInt64() <= attr(aHold, "baton.fencing.token").AsInt64() {
		t.Error("the new leader's token is not above the old one's")
	}
	if l := resigns[0].Links(); len(l) != 1 || l[0].SpanContext.SpanID() != aHold.SpanContext().SpanID() {
		t.Errorf("host-a's resignation links %v, want its term", l)
	}
}
