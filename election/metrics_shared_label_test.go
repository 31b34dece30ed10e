package election_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

// labelledValue is the value of the series of family name with exactly
// the labels namespace and name (a counter's or a gauge's), and whether
// it exists.
func labelledValue(t *testing.T, reg *prometheus.Registry, family, ns, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if len(labels) != 2 || labels["namespace"] != ns || labels["name"] != name {
				continue
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// Two Elections whose metrics share a name label (WithMetricLabel) both
// lead: baton_election_is_leader for the label says 1 while either
// leads. One term's resignation, or its Election's Close, must not set it
// to 0 or delete it while the other still leads.
func TestIsLeaderStaysWhileAnotherTermOnTheLabelLeads(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	reg := prometheus.NewRegistry()
	const ns, label = "elabel", "sched"
	opts := []election.Option{election.WithNamespace(ns), election.WithRegisterer(reg), election.WithMetricLabel(label)}
	e1 := newElection(t, cli, "sched-a", opts...)
	e2 := newElection(t, cli, "sched-b", opts...)
	isLeader := func(when string, want float64) {
		t.Helper()
		if v, ok := labelledValue(t, reg, "baton_election_is_leader", ns, label); !ok || v != want {
			t.Fatalf("%s: baton_election_is_leader{name=%q} = %v (present %v), want %v", when, label, v, ok, want)
		}
	}
	t1, err := e1.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	t2, err := e2.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	isLeader("both lead", 1)
	if err := t1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	isLeader("after one of two terms on the label resigned", 1)
	if _, err := e1.Campaign(ctx, "host-a"); err != nil {
		t.Fatal(err)
	}
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}
	isLeader("after closing one of two leading Elections on the label", 1)
	if _, ok := labelledValue(t, reg, "baton_election_transitions_total", ns, label); !ok {
		t.Fatalf("after closing one of two Elections on the label, baton_election_transitions_total{name=%q} was deleted", label)
	}
	if err := t2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	isLeader("after the last term on the label resigned", 0)
}
