package mutex_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
)

func TestLossCauses(t *testing.T) {
	tests := []struct {
		name   string
		ttl    time.Duration
		margin time.Duration
		cut    func(t *testing.T, l *mutex.Lock, admin *clientv3.Client, blackhole func())
		// reason is the Context's cause; refined, when set, is the reason
		// Unlock tells apart afterwards.
		reason, refined error
	}{
		{"lease revoked by an admin", 5 * time.Second, 0, func(t *testing.T, l *mutex.Lock, admin *clientv3.Client, _ func()) {
			if _, err := admin.Revoke(etcdtest.Context(t, 5*time.Second), l.Lease()); err != nil {
				t.Fatal(err)
			}
		}, mutex.ErrKeyGone, mutex.ErrLeaseExpired},
		{"key deleted while the lease lives", 5 * time.Second, 0, func(t *testing.T, l *mutex.Lock, admin *clientv3.Client, _ func()) {
			if _, err := admin.Delete(etcdtest.Context(t, 5*time.Second), l.Key()); err != nil {
				t.Fatal(err)
			}
		}, mutex.ErrKeyGone, mutex.ErrKeyDeleted},
		// TTL 2s: renewals every 667ms, each given 333ms; the second failure
		// (~1.33s after the last acknowledged send) comes before the
		// validity deadline (2s − 0.4s).
		{"two renewals fail", 2 * time.Second, 0, func(t *testing.T, _ *mutex.Lock, _ *clientv3.Client, blackhole func()) {
			blackhole()
		}, mutex.ErrRenewalFailed, nil},
		// TTL 3s, margin 1.5s: the deadline (1.5s) comes before the second
		// failed renewal (2s).
		{"validity deadline passes", 3 * time.Second, 1500 * time.Millisecond, func(t *testing.T, _ *mutex.Lock, _ *clientv3.Client, blackhole func()) {
			blackhole()
		}, mutex.ErrValidityExpired, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pcli, proxy := proxied(t)
			opts := []mutex.Option{mutex.WithTTL(tt.ttl)}
			if tt.margin > 0 {
				opts = append(opts, mutex.WithSafetyMargin(tt.margin))
			}
			m := newMutex(t, pcli, "loss-"+tt.name, opts...)
			l, err := m.Lock(etcdtest.Context(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			tt.cut(t, l, client(t), proxy.Blackhole)
			etcdtest.Within(t, l.Done(), 2*tt.ttl, "loss")
			cause := context.Cause(l.Context())
			if !errors.Is(cause, mutex.ErrLost) || !errors.Is(cause, tt.reason) {
				t.Fatalf("cause = %v, want ErrLost and %v", cause, tt.reason)
			}
			proxy.Restore()
			err = l.Unlock(etcdtest.Context(t, 10*time.Second))
			if !errors.Is(err, mutex.ErrNotHeld) {
				t.Fatalf("Unlock after loss = %v, want ErrNotHeld", err)
			}
			if tt.refined != nil && !errors.Is(err, tt.refined) {
				t.Fatalf("Unlock after loss = %v, want the reason told apart: %v", err, tt.refined)
			}
			// The Mutex takes a new lease by itself.
			l2, err := m.Lock(etcdtest.Context(t, 10*time.Second))
			if err != nil {
				t.Fatalf("Lock after loss: %v", err)
			}
			if leaseLost := tt.refined != mutex.ErrKeyDeleted; leaseLost && l2.Lease() == l.Lease() {
				t.Fatal("lost lease reused")
			}
			_ = l2.Unlock(etcdtest.Context(t, 5*time.Second))
		})
	}
}

// TestContextEndsBeforeAnotherClientAcquires blackholes a holder's traffic
// while another client waits for the same lock: the holder must learn of
// the loss before the other client's Lock returns, every time.
func TestContextEndsBeforeAnotherClientAcquires(t *testing.T) {
	trials := 20
	if testing.Short() {
		trials = 3
	}
	cli := client(t)
	var leads []time.Duration
	for i := range trials {
		pcli, proxy := proxied(t)
		holder, err := mutex.New(pcli, "lead", mutex.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l, err := holder.Lock(etcdtest.Context(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		waiter, err := mutex.New(cli, "lead", mutex.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		type acquired struct {
			at   time.Time
			lock *mutex.Lock
			err  error
		}
		got := make(chan acquired, 1)
		go func() {
			l, err := waiter.Lock(etcdtest.Context(t, 20*time.Second))
			got <- acquired{time.Now(), l, err}
		}()
		waitKeys(t, cli, holder.Prefix(), 2)
		// Vary the phase of the cut against the renewal schedule.
		time.Sleep(time.Duration(i*97%667) * time.Millisecond)
		proxy.Blackhole()
		var ended time.Time
		select {
		case <-l.Done():
			ended = time.Now()
		case a := <-got:
			t.Fatalf("trial %d: another client acquired (%v) before the holder's context ended", i, a.err)
		case <-time.After(10 * time.Second):
			t.Fatalf("trial %d: holder's context never ended", i)
		}
		a := <-got
		if a.err != nil {
			t.Fatalf("trial %d: waiter: %v", i, a.err)
		}
		if !ended.Before(a.at) {
			t.Fatalf("trial %d: holder's context ended %v after the next holder acquired", i, ended.Sub(a.at))
		}
		leads = append(leads, a.at.Sub(ended))
		_ = a.lock.Unlock(etcdtest.Context(t, 5*time.Second))
		_ = waiter.Close()
		proxy.Restore()
		_ = holder.Close()
	}
	slices.Sort(leads)
	t.Logf("lead of the holder's context end over the next acquisition, %d trials: min %v, median %v, max %v",
		len(leads), leads[0].Round(time.Millisecond), leads[len(leads)/2].Round(time.Millisecond), leads[len(leads)-1].Round(time.Millisecond))
}
