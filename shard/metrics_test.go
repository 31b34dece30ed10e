package shard_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/shard"
)

// TestMetricsCountOwnedShardsAndMoves: each member's owned gauge follows
// its shards, and a join's moves are counted once, by the newcomer, with
// reason join; a leave's with reason leave.
func TestMetricsCountOwnedShardsAndMoves(t *testing.T) {
	cli := client(t)
	reg := prometheus.NewRegistry()
	const n = 6
	ga := newGroup(t, cli, "metrics", n, shard.WithTTL(2*time.Second), shard.WithRegisterer(reg))
	gb := newGroup(t, cli, "metrics", n, shard.WithTTL(2*time.Second), shard.WithRegisterer(reg))
	log := &eventLog{}
	a := start(t, ga, "a", log, nil)
	settled(t, ga, "a")
	waitFor(t, func() bool { return a.count() == n }, "a's work on every shard")
	owned := func(m string) float64 {
		return testutil.ToFloat64(metricVec(t, reg, "baton_shard_owned", map[string]string{"namespace": "baton", "name": "shard:metrics", "member": m}))
	}
	if got := owned("a"); got != n {
		t.Fatalf("a's owned gauge: %v, want %d", got, n)
	}
	b := start(t, gb, "b", log, nil)
	settled(t, ga, "a", "b")
	waitFor(t, func() bool { return b.count() == n/2 && a.count() == n/2 }, "the members' work to match")
	waitFor(t, func() bool { return owned("a") == n/2 && owned("b") == n/2 }, "the owned gauges to follow")
	moves := func(reason string) float64 {
		return testutil.ToFloat64(metricVec(t, reg, "baton_shard_moves_total", map[string]string{"namespace": "baton", "name": "shard:metrics", "reason": reason}))
	}
	waitFor(t, func() bool { return moves("join") == n/2 }, "the join's moves to be counted")
	a.stop(t)
	settled(t, gb, "b")
	waitFor(t, func() bool { return moves("leave") == n/2 }, "the leave's moves to be counted")
	if got := moves("join"); got != n/2 {
		t.Fatalf("join moves after the leave: %v, want %d", got, n/2)
	}
}

// metricVec returns the one series of name with labels, as a collector
// testutil can read.
func metricVec(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.Metric {
				match := len(m.Label) == len(labels)
				for _, lp := range m.Label {
					match = match && labels[lp.GetName()] == lp.GetValue()
				}
				if match {
					v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
					ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, "", nil, nil), prometheus.UntypedValue, v)
					return
				}
			}
		}
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, "", nil, nil), prometheus.UntypedValue, 0)
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }
