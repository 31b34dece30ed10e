package session_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
	"github.com/batonhq/baton/session"
	"github.com/batonhq/baton/shard"
)

// nameValues returns the values of the name label in reg, and the
// collapsed counter's value for primitives.
func nameValues(t *testing.T, reg *prometheus.Registry) (map[string]bool, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values, collapsed := map[string]bool{}, 0.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				switch {
				case lp.GetName() == "name":
					values[lp.GetValue()] = true
				case mf.GetName() == "baton_metric_labels_collapsed_total" && lp.GetValue() == "name":
					collapsed = m.GetCounter().GetValue()
				}
			}
		}
	}
	return values, collapsed
}

// A service that locks a name per entity, with the default options but a
// Registerer: the names past DefaultMetricLabelLimit record under
// "(other)", and each is counted.
func TestDefaultLabelsPastTheLimitShareOther(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	reg := prometheus.NewRegistry()
	s, err := session.New(cli, session.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const past = 3
	for i := range session.DefaultMetricLabelLimit + past {
		m, err := mutex.New(cli, fmt.Sprintf("order-%d", i), mutex.WithNamespace("labels"), mutex.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if i < session.DefaultMetricLabelLimit {
			continue // its renewal failures' series is its own from New
		}
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	values, collapsed := nameValues(t, reg)
	last, next := fmt.Sprintf("order-%d", session.DefaultMetricLabelLimit-1), fmt.Sprintf("order-%d", session.DefaultMetricLabelLimit)
	if len(values) != session.DefaultMetricLabelLimit+1 || !values[last] || values[next] || !values[session.OtherMetricLabel] || collapsed != past {
		t.Fatalf("%d name values (%s: %v, %s: %v, %q: %v), collapsed %v: want the first %d names and %q, and %d collapsed",
			len(values), last, values[last], next, values[next], session.OtherMetricLabel, values[session.OtherMetricLabel], collapsed,
			session.DefaultMetricLabelLimit, session.OtherMetricLabel, past)
	}
	other := prometheus.Labels{"namespace": "labels", "name": session.OtherMetricLabel, "result": "acquired"}
	if v := counterValue(t, reg, "baton_lock_acquire_total", other); v != past {
		t.Fatalf("acquisitions under %q: %v, want %d", session.OtherMetricLabel, v, past)
	}
}

// counterValue sums the counters of family name whose labels include
// labels.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels prometheus.Labels) float64 {
	t.Helper()
	sum := 0.0
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// The limit is one definition for every primitive that labels by name:
// each New past it collapses, whatever the kind; an explicit
// WithMetricLabel is kept and not counted; the first collapse is logged
// once.
func TestMetricLabelLimitAppliesToEveryPrimitive(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.WarnLevel)
	s, err := session.New(cli, session.WithRegisterer(reg), session.WithMetricLabelLimit(1), session.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Settings().MetricLabelLimit; got != 1 {
		t.Fatalf("Settings().MetricLabelLimit = %d", got)
	}
	ns := mutex.WithNamespace("labels-kinds")
	labelled, err := mutex.New(cli, "order-1", ns, mutex.WithSession(s), mutex.WithMetricLabel("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer labelled.Close()
	first, err := mutex.New(cli, "first", ns, mutex.WithSession(s)) // the labelled one took no place
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	sem, err := semaphore.New(cli, "sem", 2, ns, semaphore.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	opened := []interface{ Close() error }{sem}
	for _, open := range []func() (interface{ Close() error }, error){
		func() (interface{ Close() error }, error) { return mutex.New(cli, "m", ns, mutex.WithSession(s)) },
		func() (interface{ Close() error }, error) { return election.New(cli, "e", ns, election.WithSession(s)) },
		func() (interface{ Close() error }, error) { return rwmutex.New(cli, "rw", ns, rwmutex.WithSession(s)) },
		func() (interface{ Close() error }, error) { return shard.New(cli, "g", 4, ns, shard.WithSession(s)) },
	} {
		o, err := open()
		if err != nil {
			t.Fatal(err)
		}
		opened = append(opened, o)
	}
	defer func() {
		for _, o := range opened[1:] {
			_ = o.Close()
		}
	}()
	for _, m := range []*mutex.Mutex{first, labelled} {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(ctx)
	}
	p, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Release(ctx)
	values, collapsed := nameValues(t, reg)
	want := []string{"first", "orders", session.OtherMetricLabel}
	if len(values) != len(want) || !values[want[0]] || !values[want[1]] || !values[want[2]] {
		t.Errorf("name values %v, want %v", values, want)
	}
	if collapsed != 5 {
		t.Errorf("collapsed %v, want 5: a semaphore, mutex, election, rwmutex and shard group past the limit (the labelled mutex is not counted)", collapsed)
	}
	if n := logs.FilterMessageSnippet("metric label limit reached").Len(); n != 1 {
		t.Errorf("%d Warn lines for the collapse, want 1 (the Registerer's first)", n)
	}
}

func TestWithMetricLabelLimitIsValidated(t *testing.T) {
	cli := client(t)
	shared, err := session.New(cli, session.WithMetricLabelLimit(5))
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	for _, tc := range []struct {
		name string
		new  func() error
		want string // a fragment naming the option and bound; empty: accepted
	}{
		{"session 1", func() error { return newSession(cli, session.WithMetricLabelLimit(1)) }, ""},
		{"session max", func() error { return newSession(cli, session.WithMetricLabelLimit(session.MaxMetricLabelLimit)) }, ""},
		{"session 0", func() error { return newSession(cli, session.WithMetricLabelLimit(0)) },
			"WithMetricLabelLimit(0): must be at least 1 and at most 10000"},
		{"session negative", func() error { return newSession(cli, session.WithMetricLabelLimit(-3)) },
			"WithMetricLabelLimit(-3): must be at least 1 and at most 10000"},
		{"session past max", func() error { return newSession(cli, session.WithMetricLabelLimit(session.MaxMetricLabelLimit+1)) },
			"WithMetricLabelLimit(10001): must be at least 1 and at most 10000"},
		{"mutex 0", func() error { return closeNew(mutex.New(cli, "v", mutex.WithMetricLabelLimit(0))) },
			"WithMetricLabelLimit(0): must be at least 1"},
		{"election past max", func() error { return closeNew(election.New(cli, "v", election.WithMetricLabelLimit(10001))) },
			"at most 10000"},
		{"semaphore 0", func() error { return closeNew(semaphore.New(cli, "v", 1, semaphore.WithMetricLabelLimit(0))) },
			"WithMetricLabelLimit(0)"},
		{"rwmutex 0", func() error { return closeNew(rwmutex.New(cli, "v", rwmutex.WithMetricLabelLimit(0))) },
			"WithMetricLabelLimit(0)"},
		{"shard 0", func() error { return closeNew(shard.New(cli, "v", 1, shard.WithMetricLabelLimit(0))) },
			"WithMetricLabelLimit(0)"},
		{"shared session, same limit", func() error {
			return closeNew(mutex.New(cli, "v", mutex.WithSession(shared), mutex.WithMetricLabelLimit(5)))
		}, ""},
		{"shared session, another limit", func() error {
			return closeNew(mutex.New(cli, "v", mutex.WithSession(shared), mutex.WithMetricLabelLimit(6)))
		}, "WithMetricLabelLimit(6) conflicts with the session's 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, session.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
}

func newSession(cli *clientv3.Client, opts ...session.Option) error {
	s, err := session.New(cli, opts...)
	if err == nil {
		_ = s.Close()
	}
	return err
}

func closeNew[T interface{ Close() error }](o T, err error) error {
	if err == nil {
		_ = o.Close()
	}
	return err
}
