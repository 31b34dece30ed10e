package semaphore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
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

// After an operator's delete or revoke of a permit holder's key, that
// holder's Done is closed before a waiter woken by the same event returns
// from Acquire, every time, with the same network delay (1 ms each way)
// between etcd and both clients: the waiter reads once before it returns.
func TestHolderKnowsBeforeTheNextPermitIsGranted(t *testing.T) {
	const trials = 20
	admin := client(t)
	delayed := func() *clientv3.Client {
		cli, p := proxied(t)
		p.SetDelay(time.Millisecond)
		return cli
	}
	for _, how := range []string{"revoke", "delete"} {
		t.Run(how, func(t *testing.T) {
			holder, waiter := delayed(), delayed()
			for i := range trials {
				ctx := etcdtest.Context(t, 20*time.Second)
				name := fmt.Sprintf("knows-%s-%d", how, i)
				a := newSem(t, holder, name, 1, semaphore.WithTTL(5*time.Second))
				b := newSem(t, waiter, name, 1, semaphore.WithTTL(5*time.Second))
				pa, err := a.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan *semaphore.Permit, 1)
				go func() {
					pb, err := b.Acquire(ctx)
					if err != nil {
						t.Error(err)
					}
					got <- pb
				}()
				for w, _ := a.Waiters(ctx); len(w) != 1; w, _ = a.Waiters(ctx) {
					time.Sleep(5 * time.Millisecond)
				}
				if how == "revoke" {
					_, err = admin.Revoke(ctx, pa.Lease())
				} else {
					_, err = admin.Delete(ctx, pa.Key())
				}
				if err != nil {
					t.Fatal(err)
				}
				pb := <-got
				select {
				case <-pa.Done():
				default:
					t.Fatalf("trial %d: the waiter was granted while the old holder's Context was live", i)
				}
				if pb != nil {
					_ = pb.Release(ctx)
				}
				_ = a.Close()
				_ = b.Close()
			}
		})
	}
}
