package chaos_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/internal/lease"
	"github.com/batonhq/baton/mutex"
)

// TestSkewedClockHoldersPartitioned gives a holder a watchdog clock at
// half speed, and another a frozen one, then partitions each from etcd.
// Their Contexts end late or not at all, which no lock service can
// prevent; what is tested is that fencing still rejects every write they
// make after another holder took over: at the resource (reachable while
// etcd is not) and in etcd once the partition heals and their delayed
// transactions arrive.
func TestSkewedClockHoldersPartitioned(t *testing.T) {
	c := cluster.Start(t, 3)
	res := newResource(t)
	const ttl = 2 * time.Second
	tests := []struct {
		name  string
		clock lease.Clock
	}{
		{"half-speed", newSlowClock(0.5)},
		{"frozen", frozenClock{at: time.Now()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "skew-" + tt.name
			register := "/chaos/skew/" + tt.name
			pcli, part := c.Proxied(t)
			m, err := mutex.New(pcli, name, mutex.WithTTL(ttl), config.Clock(tt.clock))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close() })
			l, err := m.Lock(ctxTimeout(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ended := whenEnded(l.Context())
			tok1 := l.Token()

			part.Blackhole()
			cut := time.Now()

			// The skewed holder writes to the resource for as long as its
			// Context says it holds.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; l.Context().Err() == nil; i++ {
					_, _ = postWrite(context.Background(), http.DefaultClient, res.URL(name), tok1, "skewed-loop")
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}()
			defer func() { close(stop); wg.Wait() }()

			// Its etcd writes, sent now, wait in the partition.
			type outcome struct {
				what string
				err  error
			}
			late := make(chan outcome, 3)
			wctx := ctxTimeout(t, 20*time.Second)
			go func() {
				_, err := l.Txn(wctx).Then(clientv3.OpPut(register, "skewed")).Commit()
				late <- outcome{"fenced txn", err}
			}()
			go func() {
				resp, err := pcli.Txn(wctx).If(l.IsOwner()).Then(clientv3.OpPut(register, "skewed")).Commit()
				if err == nil && resp.Succeeded {
					err = nil
				} else if err == nil {
					err = errors.New("rejected by etcd")
				}
				late <- outcome{"ownership txn", err}
			}()
			go func() {
				g, err := fencing.NewEtcdGuard(pcli)
				if err == nil {
					_, err = g.Write(wctx, tokenHolder{cli: pcli, token: tok1}, register, clientv3.OpPut(register+"/value", "skewed"))
				}
				late <- outcome{"durable guard", err}
			}()

			// Another client takes over once the lease expires.
			cli := c.Client(t)
			m2, err := mutex.New(cli, name, mutex.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m2.Close() })
			l2, err := m2.Lock(ctxTimeout(t, 20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			acquired := time.Since(cut)
			endedBefore := !ended.Time().IsZero()
			ctx := ctxTimeout(t, 10*time.Second)
			if st, err := postWrite(ctx, http.DefaultClient, res.URL(name), l2.Token(), "new"); err != nil || st != http.StatusOK {
				t.Fatalf("new holder's write: %s", describe(st, err))
			}
			g, err := fencing.NewEtcdGuard(cli)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.Write(ctx, l2, register, clientv3.OpPut(register+"/value", "new"), clientv3.OpPut(register, "new")); err != nil {
				t.Fatalf("new holder's etcd write: %v", err)
			}

			// A write the skewed holder began before its Context could
			// tell it anything reaches the resource now.
			if st, err := postWrite(ctx, http.DefaultClient, res.URL(name), tok1, "skewed-late"); err != nil || st != http.StatusConflict {
				t.Errorf("skewed holder's late write: %s, want status 409", describe(st, err))
			}
			part.Restore()
			for range 3 {
				select {
				case o := <-late:
					if o.err == nil {
						t.Errorf("skewed holder's delayed %s was applied", o.what)
					} else {
						t.Logf("skewed holder's delayed %s: %v", o.what, o.err)
					}
				case <-time.After(15 * time.Second):
					t.Fatal("delayed etcd writes never completed")
				}
			}
			within(t, l.Done(), 5*time.Second, "the skewed holder's Context ending after the partition healed")
			checkNoneAfter(t, res.writes(), l2.Token())
			resp, err := cli.Get(ctx, register, clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range resp.Kvs {
				if string(kv.Value) != "new" {
					t.Errorf("%s = %q, want the new holder's", kv.Key, kv.Value)
				}
			}
			endedAfter := "never while partitioned"
			if e := ended.Time(); endedBefore {
				endedAfter = e.Sub(cut).Round(time.Millisecond).String() + " after the cut, before the new holder acquired"
			} else if e.Before(cut.Add(acquired)) {
				endedAfter = e.Sub(cut).Round(time.Millisecond).String() + " after the cut"
			} else if !e.IsZero() && e.Before(time.Now()) {
				endedAfter = "only after the new holder acquired (" + e.Sub(cut).Round(time.Millisecond).String() + " after the cut, cause: " + context.Cause(l.Context()).Error() + ")"
			}
			figure(t, "TTL %v; new holder acquired %v after the cut; skewed holder's Context ended %s",
				ttl, acquired.Round(time.Millisecond), endedAfter)
		})
	}
}
