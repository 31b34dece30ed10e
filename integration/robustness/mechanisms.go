package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/internal/queue"
	"github.com/batonhq/baton/internal/watch"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
	"github.com/batonhq/baton/session"
	"github.com/batonhq/baton/shard"
)

// The traffic kinds beside the workers' lanes: each reaches one mechanism
// the lanes' random steps do not (or too rarely for a short run), and
// every one must run in every run (the coverage check).
const (
	TrafficBurst    = "burst"      // 8 to 12 acquisitions at once on one fresh session: enqueue groups, its watch stream starting, a released key's watch taken up again
	TrafficCrowd    = "crowd"      // 64 to 72 waiters on one name: a queue longer than one read
	TrafficSet      = "set"        // mutex.Set over overlapping names, beside Mutexes of the same names
	TrafficDelay    = "lock-delay" // a lock-delay name whose holders are sometimes lost without releasing
	TrafficRequest  = "request"    // RequestRelease to a holder that lets go when asked
	TrafficTransfer = "transfer"   // Oldest Transfer past waiting candidates (skips, moved marks)
	TrafficPrefer   = "preferred"  // Preferred: priorities, versions, RequestEnd, Transfer, preemption
	TrafficEtcd     = "etcd"       // etcd concurrency.Mutex and concurrency.Election contenders in baton's prefixes
	TrafficCLIForce = "cli-force"  // an operator's baton unlock --force and baton resign --to --force
	TrafficShard    = "shard"      // members of a shard group joining, leaving and crashing
	TrafficGiveUp   = "give-up"    // a waiter past one read of its queue while the waiters ahead give up (a deletion without a release mark)
	TrafficTwins    = "twins"      // 6 to 10 write locks of one name at once through one session: enqueues past the session's in-flight ones
	TrafficStream   = "stream"     // a waiter whose key ahead goes before its watch begins, or whose client's connections drop while it waits
	TrafficUnheard  = "unheard"    // on its own connection, a request that applies after its caller gave up: a late enqueue, a release, a Set's release and a hand-over whose replies are lost
)

// TrafficKinds lists the kinds a run drives; cli-force and serve need the
// baton CLI.
func TrafficKinds(baton bool) []string {
	k := []string{TrafficBurst, TrafficCrowd, TrafficSet, TrafficDelay, TrafficRequest, TrafficTransfer, TrafficPrefer, TrafficEtcd, TrafficShard, TrafficGiveUp, TrafficTwins, TrafficStream, TrafficUnheard}
	if baton {
		k = append(k, TrafficCLIForce, TrafficServe)
	}
	return k
}

// mech runs the traffic kinds, one after another, on its own client.
type mech struct {
	r    *runner
	id   int
	cli  *clientv3.Client
	part *cluster.Partition
	kind string
	runs int // of its kind so far
	// srv is the serve kind's baton serve process, started on its first
	// run and stopped when the traffic ends.
	srv *serveProc
}

func (r *runner) newMech(i int, kind string) (*mech, error) {
	cli, part, err := r.proxiedClient(kind)
	if err != nil {
		return nil, err
	}
	return &mech{r: r, id: i, cli: cli, part: part, kind: kind}, nil
}

// client names the mech by its kind: its calls' clients start with it.
func (m *mech) client() string { return m.kind }

// run repeats its kind until the traffic ends.
func (m *mech) run(ctx context.Context, rng *rand.Rand) {
	defer m.cli.Close()
	defer m.stopServe()
	for ctx.Err() == nil {
		kind := m.kind
		step := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		start := now()
		m.do(ctx, step, kind)
		m.r.h.traffic(kind, start, now())
		m.runs++
		pause(ctx, time.Duration(rng.IntN(200))*time.Millisecond)
	}
}

func (m *mech) do(ctx context.Context, rng *rand.Rand, kind string) {
	switch kind {
	case TrafficBurst:
		m.burst(ctx, rng)
	case TrafficCrowd:
		m.crowd(ctx, rng)
	case TrafficSet:
		m.set(ctx, rng)
	case TrafficDelay:
		m.lockDelay(ctx, rng)
	case TrafficRequest:
		m.request(ctx, rng)
	case TrafficTransfer:
		m.transfer(ctx, rng)
	case TrafficPrefer:
		m.preferred(ctx, rng)
	case TrafficEtcd:
		m.etcd(ctx, rng)
	case TrafficEtcdctl:
		m.etcdctl(ctx, rng)
	case TrafficCLIForce:
		m.cliForce(ctx, rng)
	case TrafficShard:
		m.shards(ctx, rng)
	case TrafficGiveUp:
		m.giveUp(ctx, rng)
	case TrafficTwins:
		m.twins(ctx, rng)
	case TrafficStream:
		m.stream(ctx, rng)
	case TrafficUnheard:
		m.unheard(ctx, rng)
	case TrafficServe:
		m.serve(ctx, rng)
	}
}

func (r *runner) name(prim, name string) NameInfo {
	for _, n := range r.cfg.names {
		if n.Prim == prim && n.Name == name {
			return n
		}
	}
	panic("robustness: no name " + prim + "/" + name)
}

// opts are the options every contender of n uses, with the session s
// (nil: its own lease) and an identity naming the caller.
func (r *runner) opts(n NameInfo, s *session.Session, who string) []mutex.Option {
	o := []mutex.Option{mutex.WithNamespace(r.cfg.Namespace), mutex.WithIdentity(who)}
	if s != nil {
		o = append(o, mutex.WithSession(s)) // its Registerer and limit are the session's
	} else {
		o = append(append(o, mutex.WithTTL(r.cfg.TTL)), r.kindMetrics()...)
	}
	return append(o, nameOpts(n)...)
}

// kindMetrics put a traffic kind's primitive's metrics on the kinds'
// Registerer, laneMetrics a worker's or an observer's on the lanes'
// (labels.go).
func (r *runner) kindMetrics() []mutex.Option { return metricOpts(r.kindsReg, r.cfg.MetricLabelLimit) }
func (r *runner) laneMetrics() []mutex.Option { return metricOpts(r.reg, r.cfg.MetricLabelLimit) }

// sessionOpts are the options of every session a traffic kind makes: its
// TTL and the kinds' Registerer, and extra.
func (r *runner) sessionOpts(extra ...session.Option) []session.Option {
	return append(append([]session.Option{session.WithTTL(r.cfg.TTL)}, r.kindMetrics()...), extra...)
}

// nameOpts are the options a name's contenders must agree on.
func nameOpts(n NameInfo) []mutex.Option {
	var o []mutex.Option
	if n.Delay > 0 {
		o = append(o, mutex.WithLockDelay(n.Delay))
	}
	if n.Preferred {
		o = append(o, election.WithStrategy(election.Preferred))
	}
	return o
}

// took records an acquisition's call and, when it succeeded, its hold,
// watched until its Context ends; it returns the hold.
func (r *runner) took(client, kind string, n NameInfo, start int64, h handle, err error, foreign bool) *Hold {
	ret := now()
	op := Op{Client: client, Kind: kind, Name: n.Name, Call: start, Return: ret, Err: errString(err)}
	if err != nil || h == nil {
		r.h.op(op)
		return nil
	}
	op.Key, op.Token = h.Key(), int64(h.Token())
	r.h.op(op)
	x := &Hold{Prim: n.Prim, Name: n.Name, Client: client, Key: h.Key(), Token: int64(h.Token()), Acquired: ret, Foreign: foreign}
	r.h.acquired(x, n, h.Context().Done())
	if !foreign {
		context.AfterFunc(h.Context(), func() { r.h.ended(x, now(), errString(context.Cause(h.Context()))) })
	}
	return x
}

// released records a release call.
func (r *runner) released(client string, n NameInfo, h handle, start int64, err error) {
	r.h.op(r.leaseAfter(Op{Client: client, Kind: n.Prim + ".Release", Name: n.Name, Call: start, Return: now(), Err: errString(err), Key: h.Key(), Token: int64(h.Token())}))
}

// holdBriefly writes the evidence of holding a few times, up to d.
func (r *runner) holdBriefly(ctx context.Context, rng *rand.Rand, client string, n NameInfo, h handle, d time.Duration) {
	for i := 0; i < 1+rng.IntN(2); i++ {
		r.evidence(client, n, h)
		pause(ctx, time.Duration(rng.Int64N(int64(d)+1)))
	}
}

// lockAndRelease is one Mutex acquisition with a brief hold.
func (r *runner) lockAndRelease(ctx context.Context, rng *rand.Rand, cli *clientv3.Client, s *session.Session, n NameInfo, who string, wait, hold time.Duration) {
	mu, err := mutex.New(cli, n.Name, r.opts(n, s, who)...)
	if err != nil {
		r.h.op(Op{Client: who, Kind: "mutex.New", Name: n.Name, Call: now(), Return: now(), Err: err.Error()})
		return
	}
	defer mu.Close()
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := now()
	l, err := mu.Lock(actx)
	var h handle
	if err == nil {
		h = l
	}
	if r.took(who, "mutex.Lock", n, start, h, err, false) == nil {
		return
	}
	r.holdBriefly(ctx, rng, who, n, l, hold)
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	start = now()
	r.released(who, n, l, start, l.Unlock(rctx))
}

// burst: 8 to 12 acquisitions at once through one fresh session, on
// names others contend on, after its first hold: that one's release
// leaves its key's watch idle on the session's stream, for the burst's
// holds of the same name to take up again, and the burst's waiters
// watch the keys ahead while a holder of another session releases the
// name they wait for (before or after their watch began: the read of the
// gap). The session pauses at random at the core's pause points (hooks),
// as a loaded machine's scheduler would.
func (m *mech) burst(ctx context.Context, rng *rand.Rand) {
	hooks := newJitter(rng.Uint64())
	s, err := session.New(m.cli, m.r.sessionOpts(config.Hooks(hooks.hooks()))...)
	if err != nil {
		m.r.h.op(Op{Client: m.client(), Kind: "session.New", Call: now(), Return: now(), Err: err.Error()})
		return
	}
	defer func() {
		start := now()
		err := s.Close()
		m.r.h.op(Op{Client: m.client(), Kind: "session.Close", Call: start, Return: now(), Err: errString(err)})
	}()
	w0, w1, w2 := m.r.name("mutex", "w0"), m.r.name("mutex", "w1"), m.r.name("mutex", "w2")
	// A holder of w0 on a lease of its own, released a moment into the
	// burst.
	partner, err := mutex.New(m.cli, w0.Name, m.r.opts(w0, nil, m.client()+".partner")...)
	if err != nil {
		return
	}
	defer partner.Close()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	start := now()
	pl, err := partner.Lock(pctx)
	pcancel()
	var ph handle
	if err == nil {
		ph = pl
	}
	if m.r.took(m.client()+".partner", "mutex.Lock", w0, start, ph, err, false) == nil {
		return
	}
	// The session's first hold, alone.
	m.r.lockAndRelease(ctx, rng, m.cli, s, w1, m.client()+".first", 5*time.Second, time.Duration(rng.IntN(30))*time.Millisecond)
	k := 8 + rng.IntN(5)
	var wg sync.WaitGroup
	wg.Add(1)
	release := time.Duration(5+rng.IntN(80)) * time.Millisecond
	go func() {
		defer wg.Done()
		pause(ctx, release)
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		start := now()
		m.r.released(m.client()+".partner", w0, pl, start, pl.Unlock(rctx))
	}()
	others := []NameInfo{m.r.name("mutex", "m0"), m.r.name("mutex", "m1"), m.r.name("election", "e0"), m.r.name("rwmutex", "rw0"), m.r.name("semaphore", "s0")}
	for i := 0; i < k; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		who := fmt.Sprintf("%s.b%d", m.client(), i)
		var n NameInfo
		var offset time.Duration
		switch i % 4 {
		case 0, 1: // waiters for the partner's name, first
			n, offset = w0, time.Duration(g.IntN(20))*time.Millisecond
		case 2: // holds of free names, a little later
			n, offset = []NameInfo{w1, w2}[g.IntN(2)], time.Duration(20+g.IntN(70))*time.Millisecond
		default: // several of one queue at once: tagged keys of one lease
			n = others[g.IntN(len(others))]
			if g.IntN(3) > 0 {
				n = others[3+g.IntN(2)]
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pause(ctx, offset)
			wait := time.Duration(4000+g.IntN(4000)) * time.Millisecond
			hold := time.Duration(g.IntN(60)) * time.Millisecond
			switch n.Prim {
			case "mutex":
				m.r.lockAndRelease(ctx, g, m.cli, s, n, who, wait, hold)
			case "election":
				m.r.campaignAndResign(ctx, g, m.cli, s, n, who, wait, hold)
			default:
				m.r.shared(ctx, g, m.cli, s, n, who, wait, hold)
			}
		}()
	}
	wg.Wait()
}

// shared is a write lock or a permit through s, held a moment: several
// of one session in one queue at once (tagged keys), which enqueue groups
// must keep apart.
func (r *runner) shared(ctx context.Context, rng *rand.Rand, cli *clientv3.Client, s *session.Session, n NameInfo, who string, wait, hold time.Duration) {
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var h handle
	var release func(context.Context) error
	var err error
	kind := "rwmutex.Lock"
	start := now()
	if n.Prim == "semaphore" {
		kind = "semaphore.Acquire"
		var sem *semaphore.Semaphore
		if sem, err = semaphore.New(cli, n.Name, n.Limit, r.opts(n, s, who)...); err == nil {
			defer sem.Close()
			var p *semaphore.Permit
			if p, err = sem.Acquire(actx); err == nil {
				h, release = p, p.Release
			}
		}
	} else {
		var rw *rwmutex.RWMutex
		if rw, err = rwmutex.New(cli, n.Name, r.opts(n, s, who)...); err == nil {
			defer rw.Close()
			var l *rwmutex.Lock
			if l, err = rw.Lock(actx); err == nil {
				h, release = l, l.Unlock
			}
		}
	}
	x := r.took(who, kind, n, start, h, err, false)
	if x == nil {
		return
	}
	x.Shared = n.Prim == "semaphore"
	r.holdBriefly(ctx, rng, who, n, h, hold)
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	start = now()
	r.released(who, n, h, start, release(rctx))
}

// jitter pauses a session at the core's pause points, at random, up to
// a few tens of milliseconds: a loaded machine's scheduling, which no
// correct interleaving may depend on.
type jitter struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func newJitter(seed uint64) *jitter { return &jitter{rng: rand.New(rand.NewPCG(seed, 7))} }

func (j *jitter) pause(maxMs int) {
	j.mu.Lock()
	d := time.Duration(0)
	if j.rng.IntN(2) == 0 {
		d = time.Duration(j.rng.IntN(maxMs)) * time.Millisecond
	}
	j.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
}

func (j *jitter) hooks() *core.Hooks {
	k := func(string) { j.pause(20) }
	return &core.Hooks{
		BeforeWait: k, ReadAhead: k, AfterConfirm: k, BeforeArm: k, BeforeCleanup: k, Moved: k,
		Stream: watch.Hooks{StreamEnded: func() { j.pause(150) }, BeforeGapRead: func() { j.pause(50) }},
	}
}

func (r *runner) campaignAndResign(ctx context.Context, rng *rand.Rand, cli *clientv3.Client, s *session.Session, n NameInfo, who string, wait, hold time.Duration) {
	e, err := election.New(cli, n.Name, r.opts(n, s, who)...)
	if err != nil {
		r.h.op(Op{Client: who, Kind: "election.New", Name: n.Name, Call: now(), Return: now(), Err: err.Error()})
		return
	}
	defer e.Close()
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := now()
	t, err := e.Campaign(actx, who)
	var h handle
	if err == nil {
		h = t
	}
	if r.took(who, "election.Campaign", n, start, h, err, false) == nil {
		return
	}
	r.holdBriefly(ctx, rng, who, n, t, hold)
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	start = now()
	r.released(who, n, t, start, t.Resign(rctx))
}

// crowd: 64 to 72 waiters, each on a lease of its own, lock m2 at once
// and hold it a moment each: a queue longer than one read of it.
func (m *mech) crowd(ctx context.Context, rng *rand.Rand) {
	n := m.r.name("mutex", "m2")
	k := 64 + rng.IntN(9)
	var wg sync.WaitGroup
	for i := 0; i < k; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		who := fmt.Sprintf("%s.q%d", m.client(), i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			pause(ctx, time.Duration(g.IntN(100))*time.Millisecond)
			m.r.lockAndRelease(ctx, g, m.cli, nil, n, who, 25*time.Second, time.Duration(g.IntN(20))*time.Millisecond)
		}()
	}
	wg.Wait()
}

// set: Sets over overlapping names (m0, m3, m4 and m1) beside plain
// Mutexes of those names, all at once.
func (m *mech) set(ctx context.Context, rng *rand.Rand) {
	groups := [][]string{{"m0", "m3"}, {"m3", "m4"}, {"m4", "m0"}, {"m0", "m1", "m3"}, {"m1", "m4"}}
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		who := fmt.Sprintf("%s.s%d", m.client(), i)
		names := groups[g.IntN(len(groups))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			pause(ctx, time.Duration(g.IntN(50))*time.Millisecond)
			if i%3 == 2 { // a plain Mutex of one of the names
				m.r.lockAndRelease(ctx, g, m.cli, nil, m.r.name("mutex", names[0]), who, 8*time.Second, time.Duration(g.IntN(100))*time.Millisecond)
				return
			}
			m.r.lockSet(ctx, g, m.cli, names, who)
		}()
	}
	wg.Wait()
}

func (r *runner) lockSet(ctx context.Context, rng *rand.Rand, cli *clientv3.Client, names []string, who string) {
	s, err := mutex.NewSet(cli, names, append(r.kindMetrics(), mutex.WithNamespace(r.cfg.Namespace), mutex.WithTTL(r.cfg.TTL), mutex.WithIdentity(who))...)
	if err != nil {
		r.h.op(Op{Client: who, Kind: "mutex.NewSet", Call: now(), Return: now(), Err: err.Error()})
		return
	}
	defer s.Close()
	actx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	start := now()
	l, err := s.Lock(actx)
	ret := now()
	op := Op{Client: who, Kind: "mutex.Set.Lock", Name: strings.Join(names, "+"), Call: start, Return: ret, Err: errString(err)}
	if err != nil {
		r.h.op(op)
		return
	}
	op.Token = int64(l.Token())
	r.h.op(op)
	ks := l.Keys()
	var members []NameInfo
	for i, name := range names {
		n := r.name("mutex", name)
		members = append(members, n)
		x := &Hold{Prim: n.Prim, Name: n.Name, Client: who, Key: ks[i], Token: int64(l.Token()), Acquired: ret}
		r.h.acquired(x, n, l.Context().Done())
		context.AfterFunc(l.Context(), func() { r.h.ended(x, now(), errString(context.Cause(l.Context()))) })
	}
	for i := 0; i < 1+rng.IntN(2); i++ {
		// One transaction, guarded by every key, writes each name's
		// evidence.
		var ops []clientv3.Op
		for j, n := range members {
			ops = append(ops, clientv3.OpPut(n.Work, ks[j]))
		}
		wctx, wcancel := context.WithTimeout(context.Background(), 3*time.Second)
		start := now()
		resp, err := l.Txn(wctx).Then(ops...).Commit()
		wcancel()
		if err == nil && !resp.Succeeded {
			err = errors.New("not held")
		}
		r.h.op(Op{Client: who, Kind: "mutex.Set.Txn", Name: op.Name, Call: start, Return: now(), Err: errString(err), Token: int64(l.Token())})
		pause(ctx, time.Duration(rng.IntN(100))*time.Millisecond)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	start = now()
	err = l.Unlock(rctx)
	r.h.op(r.leaseAfter(Op{Client: who, Kind: "mutex.Set.Release", Name: op.Name, Call: start, Return: now(), Err: errString(err), Key: ks[0], Token: int64(l.Token())}))
}

// lockDelay: contenders of ld0 (lock-delay on every one), each on a
// session of its own; a holder sometimes closes its session instead of
// unlocking, a loss without a release that the others must wait out.
func (m *mech) lockDelay(ctx context.Context, rng *rand.Rand) {
	n := m.r.name("mutex", "ld0")
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		who := fmt.Sprintf("%s.d%d", m.client(), i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			pause(ctx, time.Duration(g.IntN(300))*time.Millisecond)
			s, err := session.New(m.cli, m.r.sessionOpts()...)
			if err != nil {
				return
			}
			mu, err := mutex.New(m.cli, n.Name, m.r.opts(n, s, who)...)
			if err != nil {
				_ = s.Close()
				return
			}
			actx, cancel := context.WithTimeout(ctx, 12*time.Second)
			start := now()
			l, err := mu.Lock(actx)
			cancel()
			var h handle
			if err == nil {
				h = l
			}
			if m.r.took(who, "mutex.Lock", n, start, h, err, false) != nil {
				m.r.holdBriefly(ctx, g, who, n, l, 200*time.Millisecond)
				if g.IntN(2) == 0 {
					start = now()
					err := s.Close() // revokes the lease: lost without releasing
					m.r.h.op(Op{Client: who, Kind: "session.Close.holding", Name: n.Name, Call: start, Return: now(), Err: errString(err), Key: l.Key(), Token: int64(l.Token())})
				} else {
					rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
					start = now()
					m.r.released(who, n, l, start, l.Unlock(rctx))
					rcancel()
				}
			}
			_ = mu.Close()
			_ = s.Close()
		}()
	}
	wg.Wait()
}

// lockOnce: who's Mutex of n locks it once within wait, the acquisition
// recorded; the Lock is nil (the Mutex closed) if it did not.
func (m *mech) lockOnce(ctx context.Context, n NameInfo, who string, wait time.Duration) (*mutex.Mutex, *mutex.Lock) {
	mu, err := mutex.New(m.cli, n.Name, m.r.opts(n, nil, who)...)
	if err != nil {
		return nil, nil
	}
	actx, cancel := context.WithTimeout(ctx, wait)
	start := now()
	l, err := mu.Lock(actx)
	cancel()
	var h handle
	if err == nil {
		h = l
	}
	if m.r.took(who, "mutex.Lock", n, start, h, err, false) == nil {
		_ = mu.Close()
		return nil, nil
	}
	return mu, l
}

// request: a holder of m1 that lets go when asked; a requester asks it
// with RequestRelease.
func (m *mech) request(ctx context.Context, rng *rand.Rand) {
	n := m.r.name("mutex", "m1")
	who := m.client() + ".r"
	mu, l := m.lockOnce(ctx, n, who, 8*time.Second)
	if l == nil {
		return
	}
	defer mu.Close()
	start := now() // held: the wait for the request begins
	reqs := l.ReleaseRequested()
	m.r.evidence(who, n, l)
	go func() {
		pause(ctx, time.Duration(50+rng.IntN(200))*time.Millisecond)
		rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer rcancel()
		start := now()
		err := mutex.RequestRelease(rctx, m.cli, n.Name, "robustness: let go", mutex.WithNamespace(m.r.cfg.Namespace), mutex.WithIdentity(m.client()+".asker"))
		m.r.h.op(Op{Client: m.client() + ".asker", Kind: "mutex.RequestRelease", Name: n.Name, Call: start, Return: now(), Err: errString(err)})
	}()
	t := time.NewTimer(4 * time.Second)
	defer t.Stop()
	kind := "mutex.ReleaseRequested"
	select {
	case <-reqs:
	case <-l.Done():
		kind = "mutex.ReleaseRequested.lost"
	case <-t.C:
		kind = "mutex.ReleaseRequested.timeout"
	case <-ctx.Done():
		kind = "mutex.ReleaseRequested.stopped"
	}
	m.r.h.op(Op{Client: who, Kind: kind, Name: n.Name, Call: start, Return: now(), Key: l.Key(), Token: int64(l.Token())})
	m.r.evidence(who, n, l)
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	start = now()
	m.r.released(who, n, l, start, l.Unlock(rctx))
}

// candidate campaigns on its own lease and records its term; the term is
// sent on terms once it leads.
type candidate struct {
	who   string
	e     *election.Election
	s     *session.Session
	aside *mutex.Mutex // a lock the session holds meanwhile
	term  chan *election.Term
	done  chan struct{}
}

func (r *runner) campaign(ctx context.Context, cli *clientv3.Client, n NameInfo, who string, wait time.Duration, extra ...mutex.Option) (*candidate, error) {
	return r.campaignHooked(ctx, cli, n, who, wait, nil, extra...)
}

// campaignHooked is campaign with hooks (nil: none) on the candidate's
// session.
func (r *runner) campaignHooked(ctx context.Context, cli *clientv3.Client, n NameInfo, who string, wait time.Duration, hooks *core.Hooks, extra ...mutex.Option) (*candidate, error) {
	// A session of its own that holds a lock of its own (h0 to h7) while
	// it campaigns: its watch stream is up before the wait, whose watches
	// begin at once (the release mark decides what it takes for a
	// release).
	var sopts []session.Option
	if hooks != nil {
		sopts = append(sopts, config.Hooks(hooks))
	}
	s, err := session.New(cli, r.sessionOpts(sopts...)...)
	if err != nil {
		return nil, err
	}
	e, err := election.New(cli, n.Name, append(r.opts(n, s, who), extra...)...)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	c := &candidate{who: who, e: e, s: s, term: make(chan *election.Term, 1), done: make(chan struct{})}
	r.mu.Lock()
	r.holderSeq++
	hn := r.name("mutex", fmt.Sprintf("h%d", r.holderSeq%8))
	r.mu.Unlock()
	if c.aside, err = mutex.New(cli, hn.Name, r.opts(hn, s, who+".aside")...); err == nil {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		start := now()
		l, err := c.aside.TryLock(tctx)
		cancel()
		var h handle
		if err == nil {
			h = l
		}
		r.took(who+".aside", "mutex.TryLock", hn, start, h, err, false)
	}
	go func() {
		defer close(c.done)
		actx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		start := now()
		t, err := e.Campaign(actx, who)
		var h handle
		if err == nil {
			h = t
		}
		if r.took(who, "election.Campaign", n, start, h, err, false) != nil {
			r.evidence(who, n, t)
			c.term <- t
		}
	}()
	return c, nil
}

// lead waits for c to lead, up to d.
func (c *candidate) lead(ctx context.Context, d time.Duration) *election.Term {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case x := <-c.term:
		return x
	case <-c.done:
		select {
		case x := <-c.term:
			return x
		default:
			return nil
		}
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

func (c *candidate) close() {
	_ = c.e.Close()
	<-c.done
	if c.aside != nil {
		_ = c.aside.Close()
	}
	_ = c.s.Close()
}

// waitCandidates waits until n has k candidates or more.
func (r *runner) waitCandidates(ctx context.Context, e *election.Election, k int) []election.Candidate {
	var cs []election.Candidate
	for i := 0; i < 40 && ctx.Err() == nil; i++ {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		cs, _ = e.Candidates(rctx)
		cancel()
		if len(cs) >= k {
			return cs
		}
		pause(ctx, 50*time.Millisecond)
	}
	return cs
}

// transfer: under Oldest, a leader of e1 and three candidates behind it;
// the leader transfers to the last one, past the two between (their keys
// are moved behind it), and so on while they last.
func (m *mech) transfer(ctx context.Context, rng *rand.Rand) {
	n := m.r.name("election", "e1")
	m.handOvers(ctx, rng, n, "t", nil, nil)
}

// handOvers runs a leader and candidates on n, handing over by Transfer
// (to the last candidate, or the best with to empty under Preferred) until
// none is left.
func (m *mech) handOvers(ctx context.Context, rng *rand.Rand, n NameInfo, tag string, attrs func(i int) []mutex.Option, after0 func()) {
	var cs []*candidate
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	k := 3 + rng.IntN(2)
	for i := 0; i < k; i++ {
		var extra []mutex.Option
		if attrs != nil {
			extra = attrs(i)
		}
		c, err := m.r.campaign(ctx, m.cli, n, fmt.Sprintf("%s.%s%d", m.client(), tag, i), 15*time.Second, extra...)
		if err != nil {
			return
		}
		cs = append(cs, c)
		pause(ctx, 30*time.Millisecond)
		if i == 0 && after0 != nil {
			after0()
		}
	}
	for round := 0; round < k && ctx.Err() == nil; round++ {
		var t *election.Term
		var who *candidate
		for _, c := range cs {
			if t = c.lead(ctx, 100*time.Millisecond); t != nil {
				who = c
				break
			}
		}
		if t == nil {
			// Nobody of ours leads yet (another's term): wait a little.
			for _, c := range cs {
				if t = c.lead(ctx, 2*time.Second); t != nil {
					who = c
					break
				}
			}
			if t == nil {
				return
			}
		}
		m.r.evidence(who.who, n, t)
		list := m.r.waitCandidates(ctx, who.e, 2)
		to := ""
		for _, c := range list {
			if !c.Leader && c.Key != t.Key() {
				to = c.Key // the last one: past every other
			}
		}
		if n.Preferred && rng.IntN(2) == 0 {
			to = "" // the best
		}
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := now()
		var err error
		if to == "" && n.Preferred {
			err = t.Resign(tctx) // hands over to the best, in one transaction
		} else if to != "" {
			err = t.Transfer(tctx, to)
		} else {
			err = t.Resign(tctx)
		}
		cancel()
		kind := "election.Transfer"
		if to == "" {
			kind = "election.Resign.handover"
		}
		if errors.Is(err, election.ErrForeignCandidate) {
			kind += ".foreign"
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			_ = t.Resign(rctx)
			rcancel()
		}
		m.r.h.op(m.r.leaseAfter(Op{Client: who.who, Kind: kind, Name: n.Name, Call: start, Return: now(), Err: errString(err), Key: t.Key(), Token: int64(t.Token())}))
		// The old leader leaves: its Election closes.
		for i, c := range cs {
			if c == who {
				c.close()
				cs = append(cs[:i], cs[i+1:]...)
				break
			}
		}
	}
}

// preferred: candidates of e2 with priorities and versions; a better one
// asks the leader to end its term and preempts it when it does not
// (a leader that ignores EndRequested), a third party's RequestEnd, and
// hand-overs to the best or a named candidate.
func (m *mech) preferred(ctx context.Context, rng *rand.Rand) {
	n := m.r.name("election", "e2")
	switch rng.IntN(2) {
	case 0:
		versions := []string{"v1.9", "v1.10", "v2.0"}
		m.handOvers(ctx, rng, n, "p", func(i int) []mutex.Option {
			return []mutex.Option{election.WithPriority(rng.IntN(3)), election.WithVersion(versions[rng.IntN(len(versions))])}
		}, nil)
	default:
		// A low-priority leader that ignores requests, then a better
		// candidate that preempts it after its deadline, or a RequestEnd.
		low, err := m.r.campaign(ctx, m.cli, n, m.client()+".plow", 10*time.Second, election.WithPriority(0))
		if err != nil {
			return
		}
		defer low.close()
		t := low.lead(ctx, 10*time.Second)
		if t == nil {
			return
		}
		if rng.IntN(2) == 0 {
			other, err := m.r.campaign(ctx, m.cli, n, m.client()+".pmid", 10*time.Second, election.WithPriority(0))
			if err != nil {
				return
			}
			defer other.close()
			list := m.r.waitCandidates(ctx, low.e, 2)
			to := ""
			for _, c := range list {
				if !c.Leader {
					to = c.Key
				}
			}
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			start := now()
			_, err = low.e.RequestEnd(rctx, to, m.client()+".operator", 2*time.Second)
			cancel()
			m.r.h.op(Op{Client: m.client(), Kind: "election.RequestEnd", Name: n.Name, Call: start, Return: now(), Err: errString(err)})
			select {
			case <-t.EndRequested():
				tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
				start := now()
				err := t.Transfer(tctx, to)
				tcancel()
				m.r.h.op(m.r.leaseAfter(Op{Client: low.who, Kind: "election.Transfer.requested", Name: n.Name, Call: start, Return: now(), Err: errString(err), Key: t.Key(), Token: int64(t.Token())}))
			case <-t.Done():
			case <-time.After(3 * time.Second):
			}
			if x := other.lead(ctx, 3*time.Second); x != nil {
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := now()
				m.r.released(other.who, n, x, start, x.Resign(rctx))
				rcancel()
			}
			return
		}
		high, err := m.r.campaign(ctx, m.cli, n, m.client()+".phigh", 10*time.Second,
			election.WithPriority(5), election.WithHandoverDeadline(time.Duration(300+rng.IntN(700))*time.Millisecond))
		if err != nil {
			return
		}
		defer high.close()
		// low ignores EndRequested: high preempts it at its deadline.
		if x := high.lead(ctx, 6*time.Second); x != nil {
			m.r.evidence(high.who, n, x)
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := now()
			m.r.released(high.who, n, x, start, x.Resign(rctx))
			rcancel()
		}
	}
}

// etcd: etcd's own concurrency.Mutex and concurrency.Election contend in
// baton's prefixes (as `etcdctl lock` and `etcdctl elect` do, which use
// them), beside baton's contenders; a baton leader of e1 transfers past
// an etcd candidate (refused: ErrForeignCandidate).
func (m *mech) etcd(ctx context.Context, rng *rand.Rand) {
	var wg sync.WaitGroup
	contend := func(i int, g *rand.Rand) {
		defer wg.Done()
		who := fmt.Sprintf("%s.x%d", m.client(), i)
		s, err := concurrency.NewSession(m.cli, concurrency.WithTTL(int(m.r.cfg.TTL/time.Second)))
		if err != nil {
			return
		}
		defer s.Close()
		if i == 2 {
			m.etcdElection(ctx, g, s, m.r.name("election", "e1"), who)
			return
		}
		m.etcdMutex(ctx, g, s, m.r.name("mutex", []string{"m0", "m1"}[g.IntN(2)]), who)
	}
	for i := 0; i < 2; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		wg.Add(1)
		go func() { pause(ctx, time.Duration(g.IntN(100))*time.Millisecond); contend(i, g) }()
	}
	// Baton candidates of e1, the etcd one queued behind the first of
	// them, and a transfer past it.
	g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	m.handOvers(ctx, rng, m.r.name("election", "e1"), "y", nil, func() {
		wg.Add(1)
		go contend(2, g)
		pause(ctx, 50*time.Millisecond)
	})
	wg.Wait()
}

func (m *mech) etcdMutex(ctx context.Context, rng *rand.Rand, s *concurrency.Session, n NameInfo, who string) {
	mu := concurrency.NewMutex(s, strings.TrimSuffix(n.Prefix, "/"))
	actx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	start := now()
	err := mu.Lock(actx)
	var h handle
	if err == nil {
		h, err = etcdHandle(actx, s, mu.Key())
	}
	if m.r.took(who, "concurrency.Mutex.Lock", n, start, h, err, true) == nil {
		if err == nil {
			_ = mu.Unlock(context.Background())
		}
		return
	}
	m.r.holdBriefly(ctx, rng, who, n, h, 200*time.Millisecond)
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	start = now()
	m.r.released(who, n, h, start, mu.Unlock(rctx))
}

func (m *mech) etcdElection(ctx context.Context, rng *rand.Rand, s *concurrency.Session, n NameInfo, who string) {
	e := concurrency.NewElection(s, strings.TrimSuffix(n.Prefix, "/"))
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := now()
	err := e.Campaign(actx, who)
	var h handle
	if err == nil {
		// Its key and revision as the Campaign knows them, unread: a
		// Campaign that returned without its key must show as such.
		h = etcdHold{tokenHolder: tokenHolder{cli: s.Client(), key: e.Key(), token: fencing.Token(e.Rev())}, ctx: s.Ctx()}
	}
	if m.r.took(who, "concurrency.Election.Campaign", n, start, h, err, true) == nil {
		return
	}
	m.r.holdBriefly(ctx, rng, who, n, h, 300*time.Millisecond)
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	start = now()
	m.r.released(who, n, h, start, e.Resign(rctx))
}

// etcdHandle is an etcd contender's hold: its key and the key's
// CreateRevision, read; its Context the session's.
func etcdHandle(ctx context.Context, s *concurrency.Session, key string) (handle, error) {
	resp, err := s.Client().Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, errors.New("key gone")
	}
	return etcdHold{tokenHolder: tokenHolder{cli: s.Client(), key: key, token: fencing.Token(resp.Kvs[0].CreateRevision)}, ctx: s.Ctx()}, nil
}

type etcdHold struct {
	tokenHolder
	ctx context.Context
}

func (e etcdHold) Context() context.Context { return e.ctx }

// cliForce: an operator forces through the baton CLI: `baton unlock
// --force --even-if-alive` on a live holder of m3, and `baton resign
// --to KEY --force --even-if-alive` handing e0 to its last candidate.
// Each is a fault too (an operator's action, which a holder cannot be
// told of before): its keys are the ones it deleted.
func (m *mech) cliForce(ctx context.Context, rng *rand.Rand) {
	pause(ctx, time.Duration(2000+rng.IntN(3000))*time.Millisecond) // an operator now and then
	if m.runs%2 == 0 {
		n := m.r.name("mutex", "m3")
		who := m.client() + ".f"
		mu, l := m.lockOnce(ctx, n, who, 8*time.Second)
		if l == nil {
			return
		}
		defer mu.Close()
		m.r.evidence(who, n, l)
		m.r.operatorCLI(ctx, "unlock", []string{n.Name}, l.Key(), int64(l.Token()))
		select {
		case <-l.Done():
		case <-time.After(3 * time.Second):
		}
		m.r.evidence(who, n, l) // refused once the key is gone
		start := now()
		m.r.released(who, n, l, start, l.Unlock(context.Background()))
		return
	}
	n := m.r.name("election", "e0")
	var cs []*candidate
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	for i := 0; i < 3; i++ {
		c, err := m.r.campaign(ctx, m.cli, n, fmt.Sprintf("%s.g%d", m.client(), i), 12*time.Second)
		if err != nil {
			return
		}
		cs = append(cs, c)
		pause(ctx, 30*time.Millisecond)
	}
	var t *election.Term
	for _, c := range cs {
		if t = c.lead(ctx, 4*time.Second); t != nil {
			break
		}
	}
	if t == nil {
		return
	}
	list := m.r.waitCandidates(ctx, cs[0].e, 3)
	to := ""
	for _, c := range list {
		if !c.Leader {
			to = c.Key
		}
	}
	if to == "" {
		return
	}
	m.r.operatorCLI(ctx, "resign", []string{n.Name, "--to", to}, t.Key(), int64(t.Token()))
	for _, c := range cs {
		if x := c.lead(ctx, 2*time.Second); x != nil {
			m.r.evidence(c.who, n, x)
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := now()
			m.r.released(c.who, n, x, start, x.Resign(rctx))
			rcancel()
			break
		}
	}
}

// operatorCLI runs `baton CMD ARGS --force --even-if-alive` and records
// it as an operator's fault whose deletion of key's incarnation token is
// not announced, with etcd's revisions before and after the run: what the
// run deleted lies between them.
func (r *runner) operatorCLI(ctx context.Context, cmd string, args []string, key string, token int64) {
	a := append([]string{cmd}, args...)
	a = append(a, "--force", "--even-if-alive", "--reason", "robustness operator", "--endpoints", strings.Join(r.cfg.Target.Endpoints(), ","),
		"--namespace", r.cfg.Namespace)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	start := now()
	from := r.revision(ctx)
	out, err := exec.CommandContext(cctx, r.cfg.Baton, a...).CombinedOutput()
	end := now()
	to := r.revision(ctx) // 0 if unread: then every later deletion of the incarnation counts
	msg := errString(err)
	if err != nil {
		msg += ": " + trim(strings.TrimSpace(string(out)))
	}
	r.h.op(Op{Client: "operator", Kind: "baton." + cmd + ".force", Name: args[0], Call: start, Return: end, Err: msg, Key: key})
	r.h.fault(Fault{Kind: FaultOperatorCLI, Detail: "baton " + cmd + " " + strings.Join(args, " "), Start: start, End: end,
		Keys: []string{key}, Tokens: []int64{token}, RevFrom: from, RevTo: to})
}

// revision is etcd's current revision by a linearizable read, retried for
// a few seconds through faults; 0 if none answered.
func (r *runner) revision(ctx context.Context) int64 {
	for i := 0; i < 5 && ctx.Err() == nil; i++ {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := r.admin.Get(gctx, "/robustness/revision")
		cancel()
		if err == nil {
			return resp.Header.Revision
		}
	}
	return 0
}

// shardCount is the shards of the shard kind's group g0, shardDrain its
// drain timeout.
const (
	shardCount = 4
	shardDrain = time.Second
)

// shards: members of a group of shardCount shards join (Run), leave (its
// ctx ends) and crash (an operator revokes a member's lease, a fault),
// each owning shards as locks, writing evidence while it owns one; some
// fns outlive the drain timeout (stuck shards, given to other members).
// Half the runs play the stuck scenario instead (shardsStuck).
func (m *mech) shards(ctx context.Context, rng *rand.Rand) {
	if rng.IntN(2) == 0 {
		m.shardsStuck(ctx, rng)
		return
	}
	var wg sync.WaitGroup
	k := 3 + rng.IntN(2) // each joining member moves shards from those before
	for i := 0; i < k; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		join := time.Duration(g.IntN(1500)) * time.Millisecond
		life := time.Duration(2000+g.IntN(4000)) * time.Millisecond
		var crash time.Duration
		if i == 0 && g.IntN(2) == 0 {
			crash = time.Duration(1000+g.IntN(2000)) * time.Millisecond // its lease revoked unannounced, a moment in
		}
		wg.Go(func() {
			m.shardMember(ctx, fmt.Sprintf("%s.m%d", m.client(), i), g, m.r.cfg.TTL, join, life, crash, false, func(g *rand.Rand, _ error) time.Duration {
				// One in four ignores its Context past the drain timeout,
				// 4 to 7 s more: its member names the shard stuck, and
				// another live member must take it meanwhile (the owned
				// check's bound is 3 s).
				if g.IntN(4) == 0 {
					return shardDrain + time.Duration(4000+g.IntN(3000))*time.Millisecond
				}
				return shardDrainWithin(g)
			})
		})
	}
	wg.Wait()
}

// shardsStuck: the member whose fns outlive their drain after a loss is
// given those very shards back by the balance as it rejoins. m0 joins
// alone and owns every shard; m1 joins and takes the upper half; m1's
// lease is revoked a second after it took its first and m0 takes them
// back; m1's fns of them ignore their Context for 6 s; m1 rejoins as the
// youngest, and m0's excess is those shards. They must stay owned (by m0:
// m1 names them stuck), not wait for m1's fns (the owned check). Its
// sessions' TTL is 10 s: on a loaded machine the run's 3 s lose leases to
// late renewals, and the scenario is about the revoke.
func (m *mech) shardsStuck(ctx context.Context, rng *rand.Rand) {
	var wg sync.WaitGroup
	g0, g1 := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	const ttl = 10 * time.Second
	wg.Go(func() {
		m.shardMember(ctx, m.client()+".m0", g0, ttl, 0, 14*time.Second, 0, false, func(g *rand.Rand, _ error) time.Duration { return shardDrainWithin(g) })
	})
	wg.Go(func() {
		m.shardMember(ctx, m.client()+".m1", g1, ttl, 1500*time.Millisecond, 12*time.Second, time.Second, true, func(g *rand.Rand, cause error) time.Duration {
			if errors.Is(cause, shard.ErrLost) {
				return shardDrain + 5*time.Second
			}
			return shardDrainWithin(g)
		})
	})
	wg.Wait()
}

// shardDrainWithin is a drain well within the drain timeout: work that
// ends 200 to 700 ms after its Context, as a real fn's would; the drained
// check times the return. (With 0 to 30 ms, a drain skipped was seen by
// few of a run's moves: the next owner's acquisition seldom returned that
// fast.)
func shardDrainWithin(g *rand.Rand) time.Duration {
	return time.Duration(200+g.IntN(500)) * time.Millisecond
}

// shardMember runs member who of g0 on a session of its own (ttl): it
// joins after join, leaves life later, has its lease revoked crash after
// it joined, or after its first fn started if onOwn (0: never), and each
// fn, once its Context ended, drains for drain(its own rand, the cause)
// before it returns.
func (m *mech) shardMember(ctx context.Context, who string, g *rand.Rand, ttl, join, life, crash time.Duration, onOwn bool, drain func(*rand.Rand, error) time.Duration) {
	pause(ctx, join)
	s, err := session.New(m.cli, append([]session.Option{session.WithTTL(ttl)}, m.r.kindMetrics()...)...)
	if err != nil {
		return
	}
	defer s.Close()
	grp, err := shard.New(m.cli, "g0", shardCount, mutex.WithNamespace(m.r.cfg.Namespace), mutex.WithSession(s), shard.WithDrainTimeout(shardDrain))
	if err != nil {
		m.r.h.op(Op{Client: who, Kind: "shard.New", Call: now(), Return: now(), Err: err.Error()})
		return
	}
	defer grp.Close()
	var crashes sync.WaitGroup
	defer crashes.Wait()
	rctx, cancel := context.WithTimeout(ctx, life)
	defer cancel()
	owned := make(chan struct{}) // closed when the first fn starts
	var ownOnce sync.Once
	if crash > 0 {
		crashes.Go(func() {
			if onOwn {
				select {
				case <-owned:
				case <-rctx.Done():
					return
				}
			}
			select {
			case <-time.After(crash):
			case <-rctx.Done():
				return
			}
			if s.Lease() == 0 {
				return // no lease yet: nothing to crash
			}
			start := now()
			actx, acancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer acancel()
			lr, err := m.r.admin.Revoke(actx, s.Lease())
			f := Fault{Kind: FaultShardCrash, Detail: fmt.Sprintf("%s: lease %x revoked", who, int64(s.Lease())), Start: start, End: now()}
			if err == nil {
				f.Revs = []int64{lr.Header.Revision}
			} else {
				f.Detail += " (" + err.Error() + ")"
			}
			m.r.h.fault(f)
		})
	}
	start := now()
	// fn runs on a goroutine per shard: each call draws from a rand of its own.
	seed, calls := g.Uint64(), atomic.Uint64{}
	err = grp.Run(rctx, who, func(sctx context.Context, sh *shard.Shard) error {
		g := rand.New(rand.NewPCG(seed, calls.Add(1)))
		n := m.r.name("shard", fmt.Sprintf("g0/%05d", sh.ID()))
		m.r.took(who, "shard.Own", n, now(), sh, nil, false)
		ownOnce.Do(func() { close(owned) })
		for sctx.Err() == nil {
			m.r.evidence(who, n, sh)
			pause(sctx, time.Duration(50+g.IntN(250))*time.Millisecond)
		}
		time.Sleep(drain(g, context.Cause(sctx)))
		t := now()
		m.r.h.op(Op{Client: who, Kind: "shard.Return", Name: n.Name, Key: sh.Key(), Token: int64(sh.Token()), Call: t, Return: t})
		return nil
	})
	m.r.h.op(Op{Client: who, Kind: "shard.Run", Name: "g0", Call: start, Return: now(), Err: errString(err)})
}

// giveUp: a holder of u0, then 31 to 34 waiters on leases of their own
// queued behind it, then a waiter whose session holds u1 meanwhile (its
// watch stream is up) behind them: more keys ahead of it than its enqueue
// reads (queue.MaxRead), so it knows the newest 31 alone. The waiters
// ahead give up while the holder still holds, each deletion one key
// without a release mark: the read after the deletion of the key just
// ahead must not take them for releases (the follower must read the queue
// again and wait for the holder, which holds on and writes evidence a
// while after).
func (m *mech) giveUp(ctx context.Context, rng *rand.Rand) {
	n, an := m.r.name("mutex", "u0"), m.r.name("mutex", "u1")
	hwho := m.client() + ".h"
	hmu, err := mutex.New(m.cli, n.Name, m.r.opts(n, nil, hwho)...)
	if err != nil {
		return
	}
	defer hmu.Close()
	hctx, hcancel := context.WithTimeout(ctx, 8*time.Second)
	start := now()
	hl, err := hmu.Lock(hctx)
	hcancel()
	var h handle
	if err == nil {
		h = hl
	}
	if m.r.took(hwho, "mutex.Lock", n, start, h, err, false) == nil {
		return
	}
	held := true
	unlock := func() {
		if !held {
			return
		}
		held = false
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		start := now()
		m.r.released(hwho, n, hl, start, hl.Unlock(rctx))
	}
	defer unlock()
	m.r.evidence(hwho, n, hl)

	// The follower's session, holding u1 before anything queues.
	s, err := session.New(m.cli, m.r.sessionOpts()...)
	if err != nil {
		return
	}
	defer s.Close()
	fwho := m.client() + ".f"
	amu, err := mutex.New(m.cli, an.Name, m.r.opts(an, s, fwho+".aside")...)
	if err != nil {
		return
	}
	defer amu.Close()
	actx, acancel := context.WithTimeout(ctx, 3*time.Second)
	start = now()
	al, err := amu.Lock(actx)
	acancel()
	var ah handle
	if err == nil {
		ah = al
	}
	if m.r.took(fwho+".aside", "mutex.Lock", an, start, ah, err, false) == nil {
		return
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		start := now()
		m.r.released(fwho+".aside", an, al, start, al.Unlock(rctx))
	}()

	// The waiters ahead, then the follower; on any way out every waiter
	// gives up and the holder lets go before the wait for them.
	var wg sync.WaitGroup
	wctx, giveUp := context.WithCancel(ctx)
	fctx, fcancel := context.WithCancel(ctx)
	played := false // the follower waits for the holder's release: not cut short
	defer func() {
		giveUp()
		if !played {
			fcancel()
		}
		unlock()
		wg.Wait()
		fcancel()
	}()
	lost := func() bool { return hl.Context().Err() != nil || al.Context().Err() != nil }
	k := queue.MaxRead - 1 + rng.IntN(2) // with the holder, one more than the follower's enqueue reads
	for i := 0; i < k; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		who := fmt.Sprintf("%s.w%d", m.client(), i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.r.lockAndRelease(wctx, g, m.cli, nil, n, who, 10*time.Second, time.Duration(g.IntN(20))*time.Millisecond)
		}()
	}
	if !m.r.awaitKeys(ctx, n.Prefix, lost, func(kvs []*mvccpb.KeyValue) bool { return len(kvs) >= k+1 }) {
		return
	}
	wg.Add(1)
	fg := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())) // the follower's own: rng goes on below
	go func() {
		defer wg.Done()
		m.r.lockAndRelease(fctx, fg, m.cli, s, n, fwho, 10*time.Second, time.Duration(10+fg.IntN(40))*time.Millisecond)
	}()
	lease := int64(s.Lease())
	if !m.r.awaitKeys(ctx, n.Prefix, lost, func(kvs []*mvccpb.KeyValue) bool {
		return slices.ContainsFunc(kvs, func(kv *mvccpb.KeyValue) bool { return kv.Lease == lease })
	}) {
		return
	}
	pause(ctx, time.Duration(rng.IntN(30))*time.Millisecond)
	giveUp()
	// The holder holds on a while: a follower that took the give-ups for
	// releases holds beside it.
	for i := 0; i < 4+rng.IntN(4) && ctx.Err() == nil && !lost(); i++ {
		pause(ctx, 100*time.Millisecond)
		m.r.evidence(hwho, n, hl)
	}
	played = true
	unlock() // the follower holds next, and returns
}

// awaitKeys polls the keys under prefix until ok says so, up to 5 s, or
// until stop does.
func (r *runner) awaitKeys(ctx context.Context, prefix string, stop func() bool, ok func([]*mvccpb.KeyValue) bool) bool {
	for i := 0; i < 100 && ctx.Err() == nil && !stop(); i++ {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		// Not keys only: etcd 3.7 serves those from its index, without
		// their leases.
		resp, err := r.admin.Get(gctx, prefix, clientv3.WithPrefix())
		cancel()
		if err == nil && ok(resp.Kvs) {
			return true
		}
		pause(ctx, 50*time.Millisecond)
	}
	return false
}

// twins: 6 to 10 write locks of rw1 at once through one fresh session:
// more enqueues of one queue than the session sends alone at once, so
// that the rest wait to go as a group, which must not hold two keys of
// one queue (they would share a CreateRevision: two writers, neither
// ahead of the other, and one fencing token).
func (m *mech) twins(ctx context.Context, rng *rand.Rand) {
	s, err := session.New(m.cli, m.r.sessionOpts()...)
	if err != nil {
		m.r.h.op(Op{Client: m.client(), Kind: "session.New", Call: now(), Return: now(), Err: err.Error()})
		return
	}
	defer func() {
		start := now()
		err := s.Close()
		m.r.h.op(Op{Client: m.client(), Kind: "session.Close", Call: start, Return: now(), Err: errString(err)})
	}()
	n := m.r.name("rwmutex", "rw1")
	k := 6 + rng.IntN(5)
	var wg sync.WaitGroup
	for i := 0; i < k; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		who := fmt.Sprintf("%s.t%d", m.client(), i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.r.shared(ctx, g, m.cli, s, n, who, 8*time.Second, time.Duration(g.IntN(30))*time.Millisecond)
		}()
	}
	wg.Wait()
	// A run takes a moment: without a rest the kind would be a tenth of
	// all the run's acquisitions.
	pause(ctx, time.Duration(1000+rng.IntN(1000))*time.Millisecond)
}

// stream: a holder of r0 on a lease of its own, and a waiter behind it on
// a session of the same client; then, in turn, one of two things before
// the holder lets go. Either the holder releases in the waiter's
// BeforeWait hook, after the waiter's enqueue read its key and before the
// waiter's watch of it begins (the gap the waiter must read: planted bug
// l), or the client's connections drop while the waiter waits (its
// session's watch stream breaks, the waiter must be told and read again,
// the holder's key is watched anew: planted bug p). Either way the lock is
// free soon after and the waiter must take it within the free-lock
// bound. A round starts when the free-lock check judges one (the fault
// loop quiet for its grace), waiting up to 5 s for such a while: a round
// inside a fault's grace proves nothing.
func (m *mech) stream(ctx context.Context, rng *rand.Rand) {
	for wait := 0; !m.r.judgedNow() && wait < 50; wait++ { // 5 s at most: a short run has no quiet while
		if pause(ctx, 100*time.Millisecond); ctx.Err() != nil {
			return
		}
	}
	n := m.r.name("mutex", "r0")
	hwho, wwho := m.client()+".h", m.client()+".w"
	gap := m.runs%2 == 0
	hmu, err := mutex.New(m.cli, n.Name, m.r.opts(n, nil, hwho)...)
	if err != nil {
		return
	}
	defer hmu.Close()
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	start := now()
	hl, err := hmu.Lock(hctx)
	hcancel()
	var h handle
	if err == nil {
		h = hl
	}
	if m.r.took(hwho, "mutex.Lock", n, start, h, err, false) == nil {
		return
	}
	var once sync.Once
	unlock := func() {
		once.Do(func() {
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			start := now()
			m.r.released(hwho, n, hl, start, hl.Unlock(rctx))
		})
	}
	defer unlock()
	m.r.evidence(hwho, n, hl)

	waiting := make(chan struct{}, 1)
	hooks := &core.Hooks{BeforeWait: func(string) {
		if gap {
			unlock() // the key ahead goes before the waiter's watch of it begins
		}
		select {
		case waiting <- struct{}{}:
		default:
		}
	}}
	s, err := session.New(m.cli, m.r.sessionOpts(config.Hooks(hooks))...)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// 2.5 s: a waiter that missed the lock's release stays first in
		// line past the free-lock bound, and the kind goes on soon after.
		m.r.lockAndRelease(ctx, rng, m.cli, s, n, wwho, 2500*time.Millisecond, time.Duration(rng.IntN(20))*time.Millisecond)
	}()
	select {
	case <-waiting:
	case <-done:
		return // it held at once, or failed
	case <-ctx.Done():
		<-done
		return
	}
	if !gap {
		pause(ctx, time.Duration(20+rng.IntN(50))*time.Millisecond) // its watches are made
		m.part.DropConnections()
		pause(ctx, time.Duration(100+rng.IntN(300))*time.Millisecond)
		m.r.evidence(hwho, n, hl)
		unlock()
	}
	<-done
}
