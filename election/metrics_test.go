package election_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
)

func TestMetricsAndLogs(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.InfoLevel)
	e := newElection(t, cli, "metrics", election.WithNamespace("metrics"), election.WithRegisterer(reg), election.WithLogger(zap.New(core)))
	term, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if v := gaugeValue(t, reg, "baton_election_is_leader"); v != 1 {
		t.Fatalf("is_leader while leading = %v", v)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	term, err = e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, term.Lease()); err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, term.Done(), 5*time.Second, "loss")
	if err := term.Resign(ctx); err == nil { // returns once the loss is recorded
		t.Fatal("Resign after loss succeeded")
	}
	want := `
# HELP baton_election_is_leader 1 while this process leads the election.
# TYPE baton_election_is_leader gauge
baton_election_is_leader{name="metrics",namespace="metrics"} 0
# HELP baton_election_lost_total Terms lost while leading, by reason.
# TYPE baton_election_lost_total counter
baton_election_lost_total{name="metrics",namespace="metrics",reason="lease_expired"} 1
# HELP baton_election_transitions_total Times this process became leader or stopped leading.
# TYPE baton_election_transitions_total counter
baton_election_transitions_total{name="metrics",namespace="metrics"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"baton_election_is_leader", "baton_election_lost_total", "baton_election_transitions_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "baton_election_campaign_duration_seconds"); n != 1 {
		t.Fatalf("campaign duration series = %d", n)
	}
	if logs.FilterMessage("leadership lost").Len() != 1 || logs.FilterMessage("became leader").Len() != 2 {
		t.Fatalf("logs: %v", logs.All())
	}
}

// gaugeValue reads the single series of a gauge from reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series of %s", name)
	return 0
}

func TestResignWorksWithCancelledContext(t *testing.T) {
	cli := client(t)
	e := newElection(t, cli, "resign-cancelled")
	term, err := e.Campaign(etcdtest.Context(t, 10*time.Second), "v")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := term.Resign(ctx); err != nil {
		t.Fatalf("Resign with cancelled ctx: %v", err)
	}
	if _, err := e.Leader(etcdtest.Context(t, 5*time.Second)); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader after Resign = %v", err)
	}
}
