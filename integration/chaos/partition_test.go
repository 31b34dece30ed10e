package chaos_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// TestPartitionedClientEndsFirst cuts a holder off from every member of a
// 3-member cluster while another client waits for the lock: the holder's
// Context must end before the waiter's Lock returns, in every trial. The
// lead (waiter acquired − holder's Context ended) is reported.
func TestPartitionedClientEndsFirst(t *testing.T) {
	c := cluster.Start(t, 3)
	const ttl = 2 * time.Second
	const parallel = 4 // trials at once, on distinct locks
	n := trials(20, 5)
	direct := c.Client(t)

	type trial struct {
		name   string
		holder *mutex.Lock
		ended  *endedAt
		part   *cluster.Partition
		result chan trialResult
	}
	var leads []time.Duration
	for first := 0; first < n; first += parallel {
		var batch []*trial
		for i := first; i < min(first+parallel, n); i++ {
			tr := &trial{name: fmt.Sprintf("partition-%d", i), result: make(chan trialResult, 1)}
			pcli, part := c.Proxied(t)
			tr.part = part
			m1, err := mutex.New(pcli, tr.name, mutex.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m1.Close() })
			if tr.holder, err = m1.Lock(ctxTimeout(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			tr.ended = whenEnded(tr.holder.Context())
			m2, err := mutex.New(direct, tr.name, mutex.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m2.Close() })
			ctx := ctxTimeout(t, 20*time.Second)
			go func() {
				l2, err := m2.Lock(ctx)
				at := time.Now()
				select {
				case <-tr.holder.Done():
					tr.result <- trialResult{lock: l2, err: err, at: at, first: true}
				default:
					tr.result <- trialResult{lock: l2, err: err, at: at}
				}
			}()
			etcdtest.WaitKeys(t, direct, "/baton/v1/lock/"+tr.name+"/", 2)
			batch = append(batch, tr)
		}
		for _, tr := range batch {
			tr.part.Blackhole()
		}
		for _, tr := range batch {
			var r trialResult
			select {
			case r = <-tr.result:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: waiter never acquired", tr.name)
			}
			if r.err != nil {
				t.Fatalf("%s: waiter's Lock: %v", tr.name, r.err)
			}
			if !r.first {
				t.Errorf("%s: waiter acquired (token %d) while the partitioned holder's Context was still live", tr.name, r.lock.Token())
				continue
			}
			leads = append(leads, r.at.Sub(tr.ended.Time()))
			tr.part.Restore()
			_ = r.lock.Unlock(ctxTimeout(t, 5*time.Second))
		}
	}
	figure(t, "TTL %v, %d trials: lead of the partitioned holder's Context end over the next acquisition: %s", ttl, n, durations(leads))
}

type trialResult struct {
	lock  *mutex.Lock
	err   error
	at    time.Time
	first bool // the holder's Context had ended when the Lock returned
}
