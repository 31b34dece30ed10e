package fencing_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/fencing"
)

func TestMemoryGuardAdmitsEqualOrHigherAndRejectsLower(t *testing.T) {
	reg := prometheus.NewRegistry()
	g, err := fencing.NewMemoryGuardWith(fencing.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	steps := []struct {
		resource string
		token    fencing.Token
		stale    bool
	}{
		{"ledger", 10, false},
		{"ledger", 10, false}, // the same holder writes again
		{"ledger", 12, false},
		{"ledger", 11, true},
		{"ledger", 10, true},
		{"reports", 5, false}, // resources are independent
		{"ledger", 12, false},
	}
	for i, s := range steps {
		err := g.Admit(ctx, s.resource, s.token)
		if !s.stale {
			if err != nil {
				t.Fatalf("step %d: Admit(%s, %d) = %v", i, s.resource, s.token, err)
			}
			continue
		}
		var se *fencing.StaleError
		if !errors.Is(err, fencing.ErrStale) || !errors.As(err, &se) {
			t.Fatalf("step %d: Admit(%s, %d) = %v, want *StaleError", i, s.resource, s.token, err)
		}
		if se.Resource != s.resource || se.Token != s.token || se.Highest != 12 {
			t.Fatalf("step %d: %+v", i, se)
		}
	}
	if h := g.Highest("ledger"); h != 12 {
		t.Fatalf("Highest = %d", h)
	}
	if err := g.Admit(ctx, "ledger", 0); !errors.Is(err, fencing.ErrMalformed) {
		t.Fatalf("Admit(0) = %v, want ErrMalformed", err)
	}
	want := `
# HELP baton_fencing_rejections_total Writes rejected for carrying a stale fencing token.
# TYPE baton_fencing_rejections_total counter
baton_fencing_rejections_total{resource="ledger"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_fencing_rejections_total"); err != nil {
		t.Fatal(err)
	}
}

// Rejections for resources past the Registerer's limit share
// resource="(other)", and each is counted as collapsed; a resource keeps
// its place, and guards on one Registerer share the limit.
func TestRejectionsPastTheLabelLimitShareOther(t *testing.T) {
	reg := prometheus.NewRegistry()
	ctx := context.Background()
	var guards []*fencing.MemoryGuard
	for range 2 {
		g, err := fencing.NewMemoryGuardWith(fencing.WithRegisterer(reg), fencing.WithMetricLabelLimit(2))
		if err != nil {
			t.Fatal(err)
		}
		guards = append(guards, g)
	}
	for i, r := range []string{"order-1", "order-2", "order-3", "order-1", "order-4"} {
		g := guards[i%2]
		if err := g.Admit(ctx, r, 5); err != nil {
			t.Fatal(err)
		}
		if err := g.Admit(ctx, r, 4); !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("Admit(%s, 4) = %v, want ErrStale", r, err)
		}
	}
	want := `
# HELP baton_fencing_rejections_total Writes rejected for carrying a stale fencing token.
# TYPE baton_fencing_rejections_total counter
baton_fencing_rejections_total{resource="(other)"} 2
baton_fencing_rejections_total{resource="order-1"} 2
baton_fencing_rejections_total{resource="order-2"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_fencing_rejections_total"); err != nil {
		t.Fatal(err)
	}
	if v := collapsed(t, reg, "resource"); v != 2 {
		t.Fatalf("baton_metric_labels_collapsed_total{label=\"resource\"} = %v, want 2", v)
	}
}

// collapsed returns the collapsed counter's value for label.
func collapsed(t *testing.T, reg *prometheus.Registry, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "baton_metric_labels_collapsed_total" && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestNewMemoryGuardWithRejectsOptionsThatDoNotApply(t *testing.T) {
	for _, opt := range []fencing.Option{fencing.WithNamespace("team"), fencing.WithTable("fences"), fencing.WithLogger(nil), nil} {
		if _, err := fencing.NewMemoryGuardWith(opt); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("NewMemoryGuardWith(%v) = %v, want ErrInvalid", opt, err)
		}
	}
}

func TestMemoryGuardConcurrentAdmits(t *testing.T) {
	g := fencing.NewMemoryGuard()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				tok := fencing.Token(1 + (i*8+w)%400)
				err := g.Admit(context.Background(), "r", tok)
				var se *fencing.StaleError
				if errors.As(err, &se) && se.Highest <= tok {
					t.Errorf("token %d rejected with highest %d", tok, se.Highest)
				} else if err != nil && se == nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if h := g.Highest("r"); h != 400 {
		t.Fatalf("Highest = %d, want 400, the largest token offered", h)
	}
}
