package chaos_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/mutex"
)

// TestLockDelayAfterAFrozenHolder: a holder process with a 2s TTL and a 3s
// lock-delay is frozen with SIGSTOP; its lease expires and etcd deletes
// its key; the next holder, waiting in this process, acquires no sooner
// than 3s after this process saw the key's deletion (which etcd applied
// before). Then the other ways out, with the same holder and waiter: a
// clean release lets the waiter in within a handoff, a force-delete of
// the key delays it, and a waiter whose own delay (2s) differs waits the
// lost holder's 3s.
func TestLockDelayAfterAFrozenHolder(t *testing.T) {
	c := cluster.Start(t, 3)
	cli := c.Client(t)
	const ttl, delay = 2 * time.Second, 3 * time.Second
	n := trials(20, 3)
	run := func(name string, waiterDelay time.Duration, end func(ch *child, key string)) (time.Duration, int64) {
		t.Helper()
		ch := startChild(t, "lock", map[string]string{
			endpointsEnv: strings.Join(c.Endpoints(), ","), nameEnv: name, ttlEnv: ttl.String(), lockDelayEnv: delay.String(),
		})
		_, key := ch.held(30 * time.Second)
		ctx := ctxTimeout(t, 40*time.Second)
		m, err := mutex.New(c.Client(t), name, mutex.WithTTL(ttl), mutex.WithLockDelay(waiterDelay))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		// See the holder's key go, from the revision it was read at.
		g, err := cli.Get(ctx, key)
		if err != nil || len(g.Kvs) != 1 {
			t.Fatalf("holder key %s: %v %v", key, g, err)
		}
		deleted := make(chan time.Time, 1)
		var delRev int64
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wch := cli.Watch(wctx, key, clientv3.WithRev(g.Header.Revision+1), clientv3.WithFilterPut())
		go func() {
			for wr := range wch {
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						delRev = ev.Kv.ModRevision
						deleted <- time.Now()
						return
					}
				}
			}
		}()
		got := make(chan time.Time, 1)
		go func() {
			l, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
				close(got)
				return
			}
			got <- time.Now()
			_ = l.Unlock(context.Background())
		}()
		time.Sleep(300 * time.Millisecond) // the waiter is queued
		end(ch, key)
		var del time.Time
		select {
		case del = <-deleted:
		case <-ctx.Done():
			t.Fatal("the holder's key was never deleted")
		}
		acq, ok := <-got
		if !ok {
			t.FailNow()
		}
		return acq.Sub(del), delRev
	}
	var frozen, force, clean, mismatch []time.Duration
	for i := range n {
		d, rev := run(fmt.Sprint("ld-frozen-", i), delay, func(ch *child, _ string) { ch.signal(syscall.SIGSTOP) })
		if d < delay {
			t.Errorf("trial %d: next holder %v after the frozen holder's key was deleted (rev %d); want at least %v", i, d, rev, delay)
		}
		frozen = append(frozen, d)
	}
	for i := range n {
		clean = append(clean, first(run(fmt.Sprint("ld-clean-", i), delay, func(ch *child, _ string) { ch.send("exit") })))
	}
	for i := range min(n, 5) {
		d, _ := run(fmt.Sprint("ld-force-", i), delay, func(_ *child, key string) {
			if _, err := cli.Delete(context.Background(), key); err != nil {
				t.Error(err)
			}
		})
		if d < delay {
			t.Errorf("force-delete trial %d: next holder after %v; want at least %v", i, d, delay)
		}
		force = append(force, d)
		d, _ = run(fmt.Sprint("ld-mismatch-", i), 2*time.Second, func(ch *child, _ string) { ch.signal(syscall.SIGSTOP) })
		if d < delay {
			t.Errorf("mismatch trial %d: a waiter with a 2s delay in %v after a lost holder with 3s; want at least 3s", i, d)
		}
		mismatch = append(mismatch, d)
	}
	sort.Slice(clean, func(i, j int) bool { return clean[i] < clean[j] })
	if p99 := clean[(len(clean)*99)/100]; p99 > time.Second {
		t.Errorf("clean release: next holder p99 %v; want no delay", p99)
	}
	figure(t, "TTL %v, lock-delay %v: after SIGSTOP %s; after force-delete %s; waiter with 2s after a lost 3s holder %s; after a clean release %s (p99 %v)",
		ttl, delay, durations(frozen), durations(force), durations(mismatch), durations(clean), clean[(len(clean)*99)/100].Round(time.Millisecond))
}

func first(d time.Duration, _ int64) time.Duration { return d }
