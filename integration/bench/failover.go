package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/netproxy"
)

// observed is a leader key an observer heard, and when.
type observed struct {
	key string
	at  time.Time
}

// graceful alternates leadership between two candidates, each with its own
// client and session, cfg.Trials times, while a third client observes. In
// each trial the follower queues, waits cfg.Settle (so that its wait is
// established, as a standby's is), and the leader resigns. It measures the
// graceful failover (Resign returns → the follower's Campaign returns) and
// the Observe latency (Resign called → the observer hears the new leader).
func graceful(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	els, _, closeAll, err := ownElections(env, impl, name, 2)
	defer closeAll()
	if err != nil {
		return nil, err
	}
	ocli, err := harness.NewClient(env.endpoint, nil)
	if err != nil {
		return nil, err
	}
	defer ocli.Close()
	osess, err := concurrency.NewSession(ocli, concurrency.WithTTL(env.cfg.sessionTTL()))
	if err != nil {
		return nil, err
	}
	defer osess.Close()
	obs, err := impl.NewElection(ocli, osess, name, 0)
	if err != nil {
		return nil, err
	}
	defer obs.Close()

	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	heard := make(chan observed, 64)
	go func() {
		for key := range obs.Observe(octx) {
			select {
			case heard <- observed{key, time.Now()}:
			case <-octx.Done():
			}
		}
	}()

	// The floor of Observe: a bare watch on the observer's client hearing
	// the resigned key's deletion.
	deleted := make(chan observed, 64)
	fch := ocli.Watch(octx, els[0].Prefix(), clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	<-fch
	go func() {
		for wr := range fch {
			for _, ev := range wr.Events {
				select {
				case deleted <- observed{string(ev.Kv.Key), time.Now()}:
				case <-octx.Done():
				}
			}
		}
	}()

	term, err := els[0].Campaign(ctx, "c0")
	if err != nil {
		return nil, err
	}
	if err := awaitLeader(ctx, heard, term.Key()); err != nil {
		return nil, fmt.Errorf("observer: %w", err)
	}

	type won struct {
		t   harness.Term
		at  time.Time
		err error
	}
	var failovers, observes, floors, resigns []time.Duration
	for trial := range env.cfg.Trials {
		next := els[(trial+1)%2]
		ch := make(chan won, 1)
		go func() {
			t, err := next.Campaign(ctx, fmt.Sprintf("c%d", (trial+1)%2))
			ch <- won{t, time.Now(), err}
		}()
		if err := waitCount(ctx, env.cli, next.Prefix(), 2); err != nil {
			return nil, err
		}
		if err := pause(ctx, env.cfg.Settle); err != nil {
			return nil, err
		}
		resigned := term.Key() // raw's is empty after Resign
		called := time.Now()
		if err := term.Resign(ctx); err != nil {
			return nil, err
		}
		returned := time.Now()
		resigns = append(resigns, returned.Sub(called))
		w := <-ch
		if w.err != nil {
			return nil, w.err
		}
		failovers = append(failovers, w.at.Sub(returned))
		at, err := heardAt(ctx, heard, w.t.Key())
		if err != nil {
			return nil, fmt.Errorf("observer: %w", err)
		}
		observes = append(observes, at.Sub(called))
		gone, err := heardAt(ctx, deleted, resigned)
		if err != nil {
			return nil, fmt.Errorf("floor watch: %w", err)
		}
		floors = append(floors, gone.Sub(called))
		term = w.t
	}
	if err := term.Resign(ctx); err != nil {
		return nil, err
	}
	f, o, r, fl := harness.MsAll(failovers), harness.MsAll(observes), harness.MsAll(resigns), harness.MsAll(floors)
	return []Value{
		{Metric: "failover p50 ms", V: harness.Percentile(f, 50)},
		{Metric: "failover p99 ms", V: harness.Percentile(f, 99)},
		{Metric: "resign p50 ms", V: harness.Percentile(r, 50)},
		{Metric: "observe p50 ms", V: harness.Percentile(o, 50)},
		{Metric: "observe p99 ms", V: harness.Percentile(o, 99)},
		{Metric: "observe floor p50 ms", V: harness.Percentile(fl, 50)},
		{Metric: "observe floor p99 ms", V: harness.Percentile(fl, 99)},
	}, nil
}

// ownElections opens n elections on name, each with its own client and
// session, as n processes would; closeAll closes what was opened, even
// after an error.
func ownElections(env *env, impl harness.Impl, name string, n int) (els []harness.Election, sessions []*concurrency.Session, closeAll func(), err error) {
	sessions, closeSessions, err := ownSessions(env, n)
	closeAll = func() {
		for _, e := range els {
			_ = e.Close()
		}
		closeSessions()
	}
	if err != nil {
		return nil, nil, closeAll, err
	}
	for _, sess := range sessions {
		e, err := impl.NewElection(sess.Client(), sess, name, 0)
		if err != nil {
			return els, sessions, closeAll, err
		}
		els = append(els, e)
	}
	return els, sessions, closeAll, nil
}

// heardAt waits until key is heard of on heard.
func heardAt(ctx context.Context, heard <-chan observed, key string) (time.Time, error) {
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case o := <-heard:
			if o.key == key {
				return o.at, nil
			}
		case <-timeout.C:
			return time.Time{}, fmt.Errorf("never heard of leader %s", key)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

func awaitLeader(ctx context.Context, heard <-chan observed, key string) error {
	_, err := heardAt(ctx, heard, key)
	return err
}

// crash makes a holder whose traffic passes through a proxy, queues a
// second contender on a direct client, and blackholes the proxy: the
// holder is alive but cut off, as in a partition. It measures the time
// from the cut to the next holder's acquisition, and the lead of the cut
// holder's notice (baton's Lock.Done, raw's Session.Done) over that
// acquisition, cfg.CrashTrials times.
func crash(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	var failovers, leads []time.Duration
	late := 0
	for trial := range env.cfg.CrashTrials {
		f, lead, err := crashTrial(ctx, env, impl, fmt.Sprintf("%s-%d", name, trial))
		if err != nil {
			return nil, err
		}
		failovers = append(failovers, f)
		leads = append(leads, lead)
		if lead <= 0 {
			late++
		}
	}
	f, l := harness.MsAll(failovers), harness.MsAll(leads)
	return []Value{
		{Metric: "failover p50 ms", V: harness.Percentile(f, 50)},
		{Metric: "failover max ms", V: harness.Percentile(f, 100)},
		{Metric: "zombie lead min ms", V: -harness.Percentile(negate(l), 100)},
		{Metric: "zombie lead p50 ms", V: harness.Percentile(l, 50)},
		{Metric: "trials zombie late", V: float64(late)},
	}, nil
}

func negate(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = -x
	}
	return out
}

func crashTrial(ctx context.Context, env *env, impl harness.Impl, name string) (failover, lead time.Duration, err error) {
	proxy, err := netproxy.New(strings.TrimPrefix(env.endpoint, "http://"))
	if err != nil {
		return 0, 0, err
	}
	defer proxy.Close()
	zcli, err := harness.NewClient(proxy.Endpoint(), nil)
	if err != nil {
		return 0, 0, err
	}
	defer zcli.Close()

	ttl := env.cfg.CrashTTL
	zombie, err := impl.NewMutex(zcli, nil, name, ttl)
	if err != nil {
		return 0, 0, err
	}
	defer zombie.Close()
	zh, err := zombie.Lock(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = zh.Unlock(uctx) // lost by design: the error says so
	}()
	defer proxy.Restore() // before the zombie's Unlock and Close

	next, err := impl.NewMutex(env.cli, nil, name, ttl)
	if err != nil {
		return 0, 0, err
	}
	defer next.Close()
	type acq struct {
		h   harness.Held
		at  time.Time
		err error
	}
	ch := make(chan acq, 1)
	lctx, lcancel := context.WithTimeout(ctx, 3*ttl+10*time.Second)
	defer lcancel()
	go func() {
		h, err := next.Lock(lctx)
		ch <- acq{h, time.Now(), err}
	}()
	if err := waitCount(ctx, env.cli, zombie.Prefix(), 2); err != nil {
		return 0, 0, err
	}
	if err := pause(ctx, env.cfg.Settle); err != nil {
		return 0, 0, err
	}

	cut := time.Now()
	proxy.Blackhole()
	var zdone time.Time
	select {
	case <-zh.Done():
		zdone = time.Now()
	case a := <-ch:
		ch <- a
	}
	a := <-ch
	if a.err != nil {
		return 0, 0, fmt.Errorf("next holder: %w", a.err)
	}
	defer func() { _ = a.h.Unlock(ctx) }()
	if zdone.IsZero() {
		// The next holder acquired first; see how late the zombie was.
		select {
		case <-zh.Done():
			zdone = time.Now()
		case <-time.After(2*ttl + 5*time.Second):
			return 0, 0, errors.New("the cut-off holder was never told")
		}
	}
	return a.at.Sub(cut), a.at.Sub(zdone), nil
}

// waitCount waits, by watching, until prefix holds at least n keys.
func waitCount(ctx context.Context, cli *clientv3.Client, prefix string, n int64) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("waiting for %d keys under %s: %w", n, prefix, err)
		}
		if resp.Count >= n {
			return nil
		}
		wctx, wcancel := context.WithCancel(ctx)
		_, ok := <-cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		wcancel()
		if !ok {
			return fmt.Errorf("waiting for %d keys under %s: %w", n, prefix, ctx.Err())
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
