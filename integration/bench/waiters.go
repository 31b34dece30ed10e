package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/integration/harness"
)

// waitersResult is one drain of a queue.
type waitersResult struct {
	drain      time.Duration
	perHandoff float64 // requests other than lease renewals, per handoff
	outOfOrder int     // waiters that acquired before one queued earlier
	handoffs   int
}

// waiters queues cfg.Waiters contenders behind a holder, one after the
// other, each with its own lease, then releases the holder and lets the
// queue drain (each waiter unlocks as soon as it acquires). It measures the
// time to drain, the requests sent per handoff, and whether the queue
// drained in the order it formed; it does the same with a tenth as many
// waiters, so that the requests per handoff of both sizes can be compared.
func waiters(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	big, err := drain(ctx, env, impl, name+"-big", env.cfg.Waiters)
	if err != nil {
		return nil, err
	}
	small, err := drain(ctx, env, impl, name+"-small", max(env.cfg.Waiters/10, 2))
	if err != nil {
		return nil, err
	}
	return []Value{
		{Metric: "drain s", V: big.drain.Seconds()},
		{Metric: "handoff mean ms", V: harness.Ms(big.drain) / float64(big.handoffs)},
		{Metric: "requests/handoff", V: big.perHandoff},
		{Metric: "requests/handoff, 1/10 the waiters", V: small.perHandoff},
		{Metric: "out of order", V: float64(big.outOfOrder + small.outOfOrder)},
	}, nil
}

func drain(ctx context.Context, env *env, impl harness.Impl, name string, n int) (waitersResult, error) {
	counter := harness.NewCounter()
	cli, err := harness.NewClient(env.endpoint, counter)
	if err != nil {
		return waitersResult{}, err
	}
	defer cli.Close()
	ttl := env.cfg.waiterTTL()

	holder, err := impl.NewMutex(cli, nil, name, ttl)
	if err != nil {
		return waitersResult{}, err
	}
	defer holder.Close()
	hh, err := holder.Lock(ctx)
	if err != nil {
		return waitersResult{}, err
	}
	head, err := cli.Get(ctx, holder.Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return waitersResult{}, err
	}

	// Queue the waiters one at a time: the next starts once etcd shows the
	// key of the previous one.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	puts := cli.Watch(wctx, holder.Prefix(), clientv3.WithPrefix(), clientv3.WithRev(head.Header.Revision+1), clientv3.WithFilterDelete())
	pending := 0
	nextPut := func() error {
		for pending == 0 {
			wr, ok := <-puts
			if !ok || wr.Err() != nil {
				return fmt.Errorf("watching the queue: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.PUT && ev.IsCreate() {
					pending++
				}
			}
		}
		pending--
		return nil
	}

	mus := make([]harness.Mutex, n)
	defer func() { harness.CloseAll(mus) }()
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	errs := make(chan error, n)
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer func() { lcancel(); wg.Wait() }()
	for i := range n {
		m, err := impl.NewMutex(cli, nil, name, ttl)
		if err != nil {
			return waitersResult{}, err
		}
		mus[i] = m
		harness.WaitTurn(lctx, &wg, m, errs, func() {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
		if err := nextPut(); err != nil {
			return waitersResult{}, err
		}
	}
	wcancel()

	counter.Reset()
	start := time.Now()
	if err := hh.Unlock(ctx); err != nil {
		return waitersResult{}, err
	}
	wg.Wait()
	elapsed := time.Since(start)
	counts := counter.Snapshot()
	if err := harness.JoinErrors(errs); err != nil {
		return waitersResult{}, err
	}
	out := 0
	for i, w := range order {
		if w != i {
			out++
		}
	}
	return waitersResult{
		drain:      elapsed,
		perHandoff: float64(harness.RequestsExcept(counts, harness.MethodKeepAlive)) / float64(n),
		outOfOrder: out,
		handoffs:   n,
	}, nil
}
