package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

func recorder(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// spansNamed returns the ended spans named name, in the order they ended.
func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	s := spansNamed(rec, name)
	if len(s) != 1 {
		var names []string
		for _, e := range rec.Ended() {
			names = append(names, e.Name())
		}
		t.Fatalf("%d spans %q, want 1; ended: %v", len(s), name, names)
	}
	return s[0]
}

func uniqueName(prefix string) string { return fmt.Sprintf("%s-%x", prefix, rand.Uint32()) }

func TestTracedLockCycle(t *testing.T) {
	rec, tp := recorder(t)
	reg := prometheus.NewRegistry()
	name := uniqueName("traced-cycle")
	m, err := mutex.New(client(t), name, mutex.WithTracerProvider(tp), mutex.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, job := tp.Tracer("test").Start(context.Background(), "nightly job")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sc := trace.SpanContextFromContext(l.Context()); sc.TraceID() != job.SpanContext().TraceID() || sc.SpanID() == job.SpanContext().SpanID() {
		t.Fatalf("the lock's Context carries %v, want the hold's span in the job's trace", sc)
	}
	// A fenced write under the lock's Context is the hold's child.
	g, err := fencing.NewEtcdGuard(client(t), fencing.WithTracerProvider(tp), fencing.WithNamespace(uniqueName("traced-fence")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write(l.Context(), l, "ledger", clientv3.OpPut("/"+name+"/data", "x")); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	job.End()

	wait, hold, rel, write := one(t, rec, "mutex wait"), one(t, rec, "mutex hold"), one(t, rec, "mutex release"), one(t, rec, "fencing write")
	for _, s := range []sdktrace.ReadOnlySpan{wait, hold, rel} {
		if s.Parent().SpanID() != job.SpanContext().SpanID() {
			t.Errorf("%s: parent %v, want the caller's span", s.Name(), s.Parent().SpanID())
		}
		a := attrsOf(s)
		if a["baton.lock.name"].AsString() != name || a["baton.lock.namespace"].AsString() != "baton" || a["baton.lock.primitive"].AsString() != "mutex" {
			t.Errorf("%s: attributes %v", s.Name(), s.Attributes())
		}
	}
	if write.Parent().SpanID() != hold.SpanContext().SpanID() {
		t.Errorf("the fenced write's parent is not the hold")
	}
	wa, ha := attrsOf(wait), attrsOf(hold)
	tok := int64(l.Token())
	if wa["baton.lock.outcome"].AsString() != "acquired" || wa["baton.lock.queue_position"].AsInt64() != 0 ||
		wa["baton.fencing.token"].AsInt64() != tok || wa["baton.lease.id"].AsString() != fmt.Sprintf("%x", int64(l.Lease())) {
		t.Errorf("wait attributes %v", wait.Attributes())
	}
	if ha["baton.hold.outcome"].AsString() != "released" || ha["baton.fencing.token"].AsInt64() != tok ||
		ha["baton.lock.key"].AsString() != l.Key() || ha["baton.lease.ttl"].AsInt64() != int64(l.TTL()/time.Second) {
		t.Errorf("hold attributes %v", hold.Attributes())
	}
	if ls := hold.Links(); len(ls) != 1 || ls[0].SpanContext.SpanID() != wait.SpanContext().SpanID() {
		t.Errorf("hold links %v, want the wait", ls)
	}
	if ls := rel.Links(); len(ls) != 1 || ls[0].SpanContext.SpanID() != hold.SpanContext().SpanID() {
		t.Errorf("release links %v, want the hold", ls)
	}
	if hold.Status().Code == codes.Error || rel.Status().Code == codes.Error {
		t.Errorf("statuses %v %v", hold.Status(), rel.Status())
	}
	// The histograms' exemplars are the wait's and the hold's.
	want := map[string]string{
		"baton_lock_acquire_duration_seconds": wait.SpanContext().SpanID().String(),
		"baton_lock_hold_duration_seconds":    hold.SpanContext().SpanID().String(),
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		wantSpan, ok := want[mf.GetName()]
		if !ok {
			continue
		}
		delete(want, mf.GetName())
		found := false
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			for _, lp := range b.GetExemplar().GetLabel() {
				found = found || lp.GetName() == "span_id" && lp.GetValue() == wantSpan
			}
		}
		if !found {
			t.Errorf("%s: no exemplar of span %s", mf.GetName(), wantSpan)
		}
	}
	if len(want) > 0 {
		t.Errorf("histograms missing: %v", want)
	}
}

// A waiter's span covers the holder's release: it began while the lock was
// held, with one contender ahead, and ended once the lock was its own.
func TestTracedContendedWait(t *testing.T) {
	rec, tp := recorder(t)
	name := uniqueName("traced-contended")
	newM := func() *mutex.Mutex {
		m, err := mutex.New(client(t), name, mutex.WithTracerProvider(tp))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	a, b := newM(), newM()
	ctx := etcdtest.Context(t, 20*time.Second)
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var lb *mutex.Lock
	go func() {
		var err error
		lb, err = b.Lock(ctx)
		got <- err
	}()
	for i := 0; ; i++ { // until b's key is queued behind a's
		ws, err := a.Waiters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 1 {
			break
		}
		if i == 500 {
			t.Fatal("the second Lock never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waits, holds := spansNamed(rec, "mutex wait"), spansNamed(rec, "mutex hold")
	if len(waits) != 2 || len(holds) != 2 {
		t.Fatalf("%d waits and %d holds, want 2 each", len(waits), len(holds))
	}
	first, second := holds[0], waits[1] // a's hold ended first; b's wait ended second
	if attrsOf(second)["baton.lock.queue_position"].AsInt64() != 1 || attrsOf(second)["baton.lock.outcome"].AsString() != "acquired" {
		t.Errorf("waiter's attributes %v", second.Attributes())
	}
	if !second.StartTime().Before(first.EndTime()) || second.EndTime().Before(first.EndTime()) {
		t.Errorf("the wait [%v, %v] does not cover the holder's release at %v", second.StartTime(), second.EndTime(), first.EndTime())
	}
	if attrsOf(holds[1])["baton.fencing.token"].AsInt64() <= attrsOf(first)["baton.fencing.token"].AsInt64() {
		t.Error("the waiter's token is not above the holder's")
	}
}

// An operator deletes the holder's key: the hold ends lost, with the
// reason, before Unlock returns.
func TestTracedLossByAdminDelete(t *testing.T) {
	rec, tp := recorder(t)
	name := uniqueName("traced-loss")
	m, err := mutex.New(client(t), name, mutex.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := etcdtest.Context(t, 20*time.Second)
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client(t).Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the lock's Context did not end")
	}
	if err := l.Unlock(ctx); !errors.Is(err, mutex.ErrNotHeld) {
		t.Fatalf("Unlock = %v, want ErrNotHeld", err)
	}
	hold := one(t, rec, "mutex hold")
	if attrsOf(hold)["baton.hold.outcome"].AsString() != "lost" || hold.Status().Code != codes.Error ||
		!strings.Contains(hold.Status().Description, "key_deleted") {
		t.Fatalf("hold %v status %v", hold.Attributes(), hold.Status())
	}
	var reason string
	for _, e := range hold.Events() {
		if e.Name == "baton.hold.lost" {
			for _, kv := range e.Attributes {
				if kv.Key == "baton.loss.reason" {
					reason = kv.Value.AsString()
				}
			}
		}
	}
	if reason != "key_deleted" {
		t.Fatalf("loss reason %q, want key_deleted; events %v", reason, hold.Events())
	}
	if rel := one(t, rec, "mutex release"); rel.Status().Code != codes.Error {
		t.Errorf("the release of a lost lock: status %v", rel.Status())
	}
}

func TestTracedTryLockBusyAndCancelled(t *testing.T) {
	rec, tp := recorder(t)
	name := uniqueName("traced-busy")
	a, err := mutex.New(client(t), name)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := mutex.New(client(t), name, mutex.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := etcdtest.Context(t, 20*time.Second)
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(ctx)
	if _, err := b.TryLock(ctx); !errors.Is(err, mutex.ErrLocked) {
		t.Fatalf("TryLock = %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.Lock(cctx); err == nil {
		t.Fatal("Lock acquired a held lock")
	}
	waits := spansNamed(rec, "mutex wait")
	if len(waits) != 2 {
		t.Fatalf("%d waits", len(waits))
	}
	for i, want := range []string{"busy", "cancelled"} {
		if got := attrsOf(waits[i])["baton.lock.outcome"].AsString(); got != want || waits[i].Status().Code == codes.Error {
			t.Errorf("wait %d: outcome %q status %v, want %q without error", i, got, waits[i].Status(), want)
		}
	}
	if len(spansNamed(rec, "mutex hold")) != 0 {
		t.Error("a hold span without a hold")
	}
}

func TestWithTracerProviderNilIsInvalid(t *testing.T) {
	if _, err := mutex.New(client(t), "x", mutex.WithTracerProvider(nil)); !errors.Is(err, mutex.ErrInvalid) || !strings.Contains(err.Error(), "WithTracerProvider") {
		t.Fatalf("New(WithTracerProvider(nil)) = %v, want ErrInvalid naming the option", err)
	}
}

// Renewals that fail show on the hold as events, then the loss with its
// reason, as in TestLossCauses' "two renewals fail".
func TestTracedRenewalFailuresThenLoss(t *testing.T) {
	rec, tp := recorder(t)
	pcli, proxy := proxied(t)
	m, err := mutex.New(pcli, uniqueName("traced-renewal"), mutex.WithTTL(2*time.Second), mutex.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.Lock(etcdtest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	etcdtest.Within(t, l.Done(), 4*time.Second, "loss")
	proxy.Restore()
	if err := l.Unlock(etcdtest.Context(t, 10*time.Second)); !errors.Is(err, mutex.ErrNotHeld) {
		t.Fatalf("Unlock after loss = %v", err)
	}
	hold := one(t, rec, "mutex hold")
	var failed int
	var reason string
	for _, e := range hold.Events() {
		switch e.Name {
		case "baton.renewal.failed":
			failed++
		case "baton.hold.lost":
			for _, kv := range e.Attributes {
				if kv.Key == "baton.loss.reason" {
					reason = kv.Value.AsString()
				}
			}
		}
	}
	if failed != 2 || reason != "renewal_failed" {
		t.Fatalf("%d failed renewals and loss reason %q, want 2 and renewal_failed; events %v", failed, reason, hold.Events())
	}
}

// The provider is session-wide, like the Registerer: primitives on a
// session record through the session's, and a different one is refused.
func TestTracerProviderIsTheSessions(t *testing.T) {
	rec, tp := recorder(t)
	cli := client(t)
	s, err := bsession.New(cli, bsession.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, other := recorder(t)
	if _, err := mutex.New(cli, "x", mutex.WithSession(s), mutex.WithTracerProvider(other)); !errors.Is(err, mutex.ErrInvalid) ||
		!strings.Contains(err.Error(), "WithTracerProvider") {
		t.Fatalf("New with another provider on the session = %v, want ErrInvalid naming WithTracerProvider", err)
	}
	m, err := mutex.New(cli, uniqueName("traced-session"), mutex.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := etcdtest.Context(t, 10*time.Second)
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	one(t, rec, "mutex hold")
}
