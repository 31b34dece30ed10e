package election_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

func spanAttr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func tracedRecorder(t *testing.T) (*tracetest.SpanRecorder, election.Option) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, election.WithTracerProvider(tp)
}

// spansNamed returns the spans named name; for holds, only the term's (a
// candidate's record is a hold too).
func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name && !strings.Contains(spanAttr(s, "baton.lock.key").AsString(), "/candidate/") {
			out = append(out, s)
		}
	}
	return out
}

// Term.Transfer is an "election transfer" span linked to the term's hold,
// with the leader's and the successor's tokens and its outcome; the hold
// ends transferred to the successor. A transfer to a candidate that is not
// there is a failed span with its outcome, and the term goes on.
func TestTracedTransfer(t *testing.T) {
	rec, traced := tracedRecorder(t)
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "traced-transfer"
	a := preferred(t, cli, name, traced)
	b, c := preferred(t, client(t), name), preferred(t, client(t), name)
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	bctx, bcancel := context.WithCancel(ctx)
	bres := campaignAsync(bctx, b, "B")
	defer func() { bcancel(); <-bres }() // B never leads
	waitCandidates(t, a, 2)
	cres := campaignAsync(ctx, c, "C")
	cands := waitCandidates(t, a, 3)
	to := cands[2].Key // C, the younger: B never leads

	if err := ta.Transfer(ctx, "/baton/v1/election/traced-transfer/1"); err == nil {
		t.Fatal("a transfer to nobody succeeded")
	}
	if err := ta.Transfer(ctx, to); err != nil {
		t.Fatal(err)
	}
	tc := await(t, cres, 5*time.Second, "C")
	if tc.Key() != to {
		t.Fatalf("C leads with %s; transferred to %s", tc.Key(), to)
	}

	transfers, holds := spansNamed(rec, "election transfer"), spansNamed(rec, "election hold")
	if len(transfers) != 2 || len(holds) != 1 {
		t.Fatalf("%d transfer and %d hold spans; want 2 and 1", len(transfers), len(holds))
	}
	bad, good, hold := transfers[0], transfers[1], holds[0]
	if got := spanAttr(bad, "baton.transfer.outcome").AsString(); got != "no_candidate" || bad.Status().Code != codes.Error {
		t.Errorf("the transfer to nobody ended %q, status %v; want no_candidate, an error", got, bad.Status())
	}
	if got := spanAttr(good, "baton.transfer.outcome").AsString(); got != "transferred" || good.Status().Code == codes.Error {
		t.Errorf("the transfer ended %q, status %v; want transferred", got, good.Status())
	}
	if got := spanAttr(good, "baton.fencing.token").AsInt64(); got != int64(ta.Token()) {
		t.Errorf("transfer span's token %d; want the leader's %d", got, ta.Token())
	}
	if got := spanAttr(good, "baton.election.successor_token").AsInt64(); got != int64(tc.Token()) || got <= int64(ta.Token()) {
		t.Errorf("transfer span's successor token %d; want C's %d, above %d", got, tc.Token(), ta.Token())
	}
	if got := spanAttr(good, "baton.election.candidate").AsString(); got != to {
		t.Errorf("transfer span's candidate %q; want %q", got, to)
	}
	if l := good.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != hold.SpanContext().SpanID() {
		t.Errorf("the transfer links %v; want the term's hold", l)
	}
	if spanAttr(hold, "baton.hold.outcome").AsString() != "transferred" || spanAttr(hold, "baton.election.candidate").AsString() != to {
		t.Errorf("the hold ended with %v; want transferred to %s", hold.Attributes(), to)
	}
}

// A leader asked to end its term records it on its hold: a
// baton.hold.preempted event naming who asked.
func TestTracedEndRequestIsAnEventOnTheHold(t *testing.T) {
	rec, traced := tracedRecorder(t)
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "traced-preempt"
	a := preferred(t, cli, name, traced, election.WithPriority(1))
	b := preferred(t, client(t), name, election.WithPriority(5))
	ta := await(t, campaignAsync(ctx, a, "A"), 5*time.Second, "A")
	bres := campaignAsync(ctx, b, "B")
	select {
	case <-ta.EndRequested():
	case <-time.After(10 * time.Second):
		t.Fatal("the leader was never asked to end its term")
	}
	req, _ := ta.EndRequest()
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, bres, 5*time.Second, "B")
	holds := spansNamed(rec, "election hold")
	if len(holds) != 1 {
		t.Fatalf("%d hold spans; want 1", len(holds))
	}
	var found bool
	for _, ev := range holds[0].Events() {
		if ev.Name != "baton.hold.preempted" {
			continue
		}
		found = true
		for _, kv := range ev.Attributes {
			if kv.Key == "baton.election.candidate" && kv.Value.AsString() != req.By {
				t.Errorf("the event names %q; want the requester %q", kv.Value.AsString(), req.By)
			}
		}
		if len(ev.Attributes) != 1 || req.By == "" {
			t.Errorf("the event's attributes %v; want the requester %q", ev.Attributes, req.By)
		}
	}
	if !found {
		t.Errorf("no baton.hold.preempted event on the hold: %v", holds[0].Events())
	}
}

// A release request to a leader that watches for them is a
// baton.release.requested event on its hold, naming who asked.
func TestTracedReleaseRequestIsAnEventOnTheHold(t *testing.T) {
	rec, traced := tracedRecorder(t)
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	const name = "traced-release-request"
	a := newElection(t, cli, name, traced)
	ta, err := a.Campaign(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	reqs := ta.ReleaseRequested()
	if err := election.RequestRelease(ctx, client(t), name, "deploy", mutex.WithIdentity("ops-1")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reqs:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never arrived")
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	holds := spansNamed(rec, "election hold")
	if len(holds) != 1 {
		t.Fatalf("%d hold spans; want 1", len(holds))
	}
	for _, ev := range holds[0].Events() {
		if ev.Name == "baton.release.requested" {
			if len(ev.Attributes) != 1 || ev.Attributes[0].Key != "baton.release.requester" || !strings.Contains(ev.Attributes[0].Value.AsString(), "ops-1") {
				t.Errorf("the event's attributes %v; want the requester ops-1", ev.Attributes)
			}
			return
		}
	}
	t.Errorf("no baton.release.requested event on the hold: %v", holds[0].Events())
}
