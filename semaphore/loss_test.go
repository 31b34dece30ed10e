package semaphore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/etcdtest"
	"github.com/batonhq/baton/semaphore"
)

// TestCutOffHolderKnowsBeforeAnOverLimitGrant: of two permit holders, the
// one whose traffic is blackholed sees its Context end before a waiter is
// granted the permit beyond the limit, every time.
func TestCutOffHolderKnowsBeforeAnOverLimitGrant(t *testing.T) {
	trials := 20
	if testing.Short() {
		trials = 3
	}
	cli := client(t)
	var leads []time.Duration
	for i := range trials {
		ctx := etcdtest.Context(t, 30*time.Second)
		pcli, proxy := proxied(t)
		cut, err := semaphore.New(pcli, "lead", 2, semaphore.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		other := newSem(t, cli, "lead", 2, semaphore.WithTTL(2*time.Second))
		p, err := cut.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		q, err := other.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		type acquired struct {
			at     time.Time
			permit *semaphore.Permit
			err    error
		}
		got := make(chan acquired, 1)
		go func() {
			p, err := other.Acquire(ctx)
			got <- acquired{time.Now(), p, err}
		}()
		etcdtest.WaitKeys(t, cli, cut.Prefix(), 3)
		time.Sleep(time.Duration(i*97%667) * time.Millisecond) // vary the phase against renewals
		proxy.Blackhole()
		var ended time.Time
		select {
		case <-p.Done():
			ended = time.Now()
		case a := <-got:
			t.Fatalf("trial %d: a third permit was granted (%v) while the cut-off holder's Context was live", i, a.err)
		case <-time.After(10 * time.Second):
			t.Fatalf("trial %d: the cut-off holder's Context never ended", i)
		}
		a := <-got
		if a.err != nil {
			t.Fatalf("trial %d: waiter: %v", i, a.err)
		}
		if !ended.Before(a.at) {
			t.Fatalf("trial %d: the holder's Context ended %v after the over-limit grant", i, ended.Sub(a.at))
		}
		if q.Context().Err() != nil {
			t.Fatalf("trial %d: the healthy holder lost its permit: %v", i, context.Cause(q.Context()))
		}
		leads = append(leads, a.at.Sub(ended))
		_ = a.permit.Release(ctx)
		_ = q.Release(ctx)
		proxy.Restore()
		_ = cut.Close()
		_ = other.Close()
	}
	slices.Sort(leads)
	t.Logf("lead of the cut-off holder's end over the next grant, %d trials: min %v, median %v, max %v",
		len(leads), leads[0].Round(time.Millisecond), leads[len(leads)/2].Round(time.Millisecond), leads[len(leads)-1].Round(time.Millisecond))
}
