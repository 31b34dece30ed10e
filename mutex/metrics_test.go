package mutex_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

func TestMetricsAndLogs(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.DebugLevel)
	opts := []mutex.Option{mutex.WithNamespace("metrics"), mutex.WithRegisterer(reg), mutex.WithLogger(zap.New(core))}
	a := newMutex(t, cli, "m", opts...)
	b := newMutex(t, client(t), "m", opts...) // shares the Registerer
	l, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx); err == nil {
		t.Fatal("TryLock succeeded on a held lock")
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, _ = b.Lock(cctx)
	cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, l2.Key()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, l2.Done(), 5*time.Second, "loss")
	if err := l2.Unlock(ctx); err == nil { // returns once the loss is recorded
		t.Fatal("Unlock after loss succeeded")
	}

	want := `
# HELP baton_lock_acquire_total Lock and TryLock calls by result: acquired, locked, canceled, error.
# TYPE baton_lock_acquire_total counter
baton_lock_acquire_total{name="m",namespace="metrics",result="acquired"} 2
baton_lock_acquire_total{name="m",namespace="metrics",result="canceled"} 1
baton_lock_acquire_total{name="m",namespace="metrics",result="locked"} 1
# HELP baton_lock_lost_total Locks lost while held, by reason.
# TYPE baton_lock_lost_total counter
baton_lock_lost_total{name="m",namespace="metrics",reason="key_deleted"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_lock_acquire_total", "baton_lock_lost_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "baton_lock_hold_duration_seconds"); n != 1 {
		t.Fatalf("hold duration series = %d, want 1", n)
	}
	if n := testutil.CollectAndCount(reg, "baton_lock_acquire_duration_seconds"); n != 3 {
		t.Fatalf("acquire duration series = %d, want 3 (one per result)", n)
	}
	lost := logs.FilterMessage("lock lost").All()
	if len(lost) != 1 {
		t.Fatalf("lost log entries = %d, want 1", len(lost))
	}
	fields := lost[0].ContextMap()
	for _, f := range []string{"name", "key", "token", "lease"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("lost log lacks field %q: %v", f, fields)
		}
	}
	if fields["key"] != l2.Key() || fields["token"] != int64(l2.Token()) {
		t.Errorf("lost log fields = %v", fields)
	}
	if logs.FilterMessage("lock acquired").Len() != 2 {
		t.Errorf("acquired log entries = %d, want 2", logs.FilterMessage("lock acquired").Len())
	}
}

func TestNothingIsRegisteredGlobally(t *testing.T) {
	before, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	m := newMutex(t, client(t), "no-global")
	l, err := m.Lock(etcdtest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(context.Background())
	after, _ := prometheus.DefaultGatherer.Gather()
	for _, mf := range after {
		if strings.HasPrefix(mf.GetName(), "baton_") {
			t.Fatalf("metric %s on the global registry", mf.GetName())
		}
	}
	_ = before
}
