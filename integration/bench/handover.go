package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/integration/harness"
)

// transferer is baton's Term: a hand-over to a named candidate.
type transferer interface {
	Transfer(ctx context.Context, to string) error
}

// handover hands leadership around three candidates, each with its own
// client and session, cfg.Trials times. In each trial two candidates wait
// (each settled for cfg.Settle) and the leader hands over: baton's with
// Transfer to the one queued second, past the next in line; raw's (etcd's
// concurrency has no hand-over but to the next) resigns, so the next one
// leads: the graceful failover it is compared with. It measures the gap,
// from the call until the successor's Campaign returns, and as graceful
// measures its failover, from the call's return (negative: the successor
// led first); then the old leader campaigns again, at the queue's end.
func handover(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	const n = 3
	els, sessions, closeAll, err := ownElections(env, impl, name, n)
	defer closeAll()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	type won struct {
		t   harness.Term
		at  time.Time
		err error
	}
	wins := make([]chan won, n)
	campaign := func(i int) {
		ch := make(chan won, 1)
		wins[i] = ch
		go func() {
			t, err := els[i].Campaign(cctx, fmt.Sprintf("c%d", i))
			ch <- won{t, time.Now(), err}
		}()
	}
	defer func() { // the candidates still waiting give up
		cancel()
		for _, ch := range wins {
			if w := <-ch; w.err == nil {
				_ = w.t.Resign(context.WithoutCancel(ctx))
			}
		}
	}()
	prefix := els[0].Prefix()
	campaign(0)
	w := <-wins[0]
	if w.err != nil {
		return nil, w.err
	}
	wins[0] <- w // for the deferred drain, until it is replaced
	term := w.t
	for i := 1; i < n; i++ {
		campaign(i)
		if err := waitCount(ctx, env.cli, prefix, int64(i+1)); err != nil {
			return nil, err
		}
	}
	_, skip := term.(transferer)
	var gaps, afters []time.Duration
	for trial := range env.cfg.Trials {
		if err := pause(ctx, env.cfg.Settle); err != nil {
			return nil, err
		}
		resp, err := env.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) != n {
			return nil, fmt.Errorf("trial %d: %d candidates, want %d", trial, len(resp.Kvs), n)
		}
		to := string(resp.Kvs[1].Key)
		if skip {
			to = string(resp.Kvs[2].Key)
		}
		next, from := -1, -1
		for i, s := range sessions {
			if strings.HasSuffix(to, fmt.Sprintf("%x", int64(s.Lease()))) {
				next = i
			}
			if strings.HasSuffix(string(resp.Kvs[0].Key), fmt.Sprintf("%x", int64(s.Lease()))) {
				from = i
			}
		}
		if next < 0 || from < 0 {
			return nil, fmt.Errorf("trial %d: no candidate's lease matches %s or %s", trial, resp.Kvs[0].Key, to)
		}
		<-wins[from] // its term, read already
		called := time.Now()
		if t, ok := term.(transferer); ok {
			err = t.Transfer(ctx, to)
		} else {
			err = term.Resign(ctx)
		}
		returned := time.Now()
		if err != nil {
			return nil, fmt.Errorf("trial %d: hand over: %w", trial, err)
		}
		w := <-wins[next]
		if w.err != nil {
			return nil, w.err
		}
		wins[next] <- w
		gaps, afters = append(gaps, w.at.Sub(called)), append(afters, w.at.Sub(returned))
		term = w.t
		campaign(from)
		if err := waitCount(ctx, env.cli, prefix, n); err != nil {
			return nil, err
		}
	}
	if len(gaps) == 0 {
		return nil, errors.New("handover: no trial")
	}
	g, a := harness.MsAll(gaps), harness.MsAll(afters)
	return []Value{
		{Metric: "gap p50 ms", V: harness.Percentile(g, 50)},
		{Metric: "gap p99 ms", V: harness.Percentile(g, 99)},
		{Metric: "after return p50 ms", V: harness.Percentile(a, 50)},
		{Metric: "after return p99 ms", V: harness.Percentile(a, 99)},
	}, nil
}
