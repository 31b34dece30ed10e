// Command worker is the traffic of the mixed-version test (package mixed):
// the same source is built against the previous release's library and
// against the current one, and processes of both builds contend on the
// same names of one etcd.
//
// It uses only the public API that both builds share (mutex, election,
// semaphore, rwmutex, session, fencing and shard; shard_none.go stands in
// for shard on a build older than the package), and reports, one JSON
// message a line on stdout, every call and its return, every acquisition
// with its key and token, when its Context ended and why, and every
// fenced write with its outcome, each on CLOCK_MONOTONIC (the clock of
// every process of the machine, so the test orders them against etcd's
// events). It stops when its stdin closes.
//
// Run under `baton lock NAME... --` with -cli it is the command: it writes
// with the key(s) and token of its environment, as a script would.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
	"github.com/batonhq/baton/session"
)

// The names every build contends on, and where holders write.
const (
	workPrefix     = "/work/"     // fenced evidence: the writer's key, guarded by it
	registerPrefix = "/register/" // the etcd guard's registers
	semLimit       = 2
	lockDelay      = 2 * time.Second
	shardGroup     = "g0"
	shardCount     = 4
)

var (
	mutexNames = []string{"m0", "m1", "m2"}
	setNames   = [][]string{{"m0", "m1"}, {"m1", "m2"}, {"m2", "m0"}}
)

type config struct {
	build     string
	id        int
	endpoints []string
	ns        string
	ttl       time.Duration
	lanes     []string
	seed      uint64
}

func main() {
	// First: SIGUSR1 would end the process before this (see freezePoint).
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	var cfg config
	var eps, lanes string
	cli := flag.Bool("cli", false, "the command under baton lock: write with the environment's key(s) and token, then exit")
	maxRun := flag.Duration("max", 10*time.Minute, "exit after this long whatever happens")
	flag.StringVar(&cfg.build, "build", "new", "the build's label in every client name")
	flag.IntVar(&cfg.id, "id", 0, "this process's number")
	flag.StringVar(&eps, "endpoints", "127.0.0.1:2379", "etcd endpoints, comma-separated")
	flag.StringVar(&cfg.ns, "namespace", "mixed", "baton namespace")
	flag.DurationVar(&cfg.ttl, "ttl", 3*time.Second, "lease TTL")
	flag.StringVar(&lanes, "lanes", "mutex", "comma-separated traffic lanes: mutex set semaphore rwmutex election preferred delay nodelay shard")
	flag.Uint64Var(&cfg.seed, "seed", 1, "random seed")
	flag.Parse()
	cfg.endpoints = strings.Split(eps, ",")
	cfg.lanes = strings.Split(lanes, ",")
	ctx, cancel := context.WithTimeout(context.Background(), *maxRun)
	defer cancel()
	var err error
	if *cli {
		err = runCLI(ctx, cfg)
	} else {
		go func() { // stdin closing is the signal to stop
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
		err = run(ctx, cfg, usr1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// now reads CLOCK_MONOTONIC, which every process of the machine shares.
func now() int64 {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic("CLOCK_MONOTONIC: " + e.Error())
	}
	return ts.Nano()
}

// The messages, field for field those of integration/robustness (Op, Hold,
// RegOp), which the test decodes them into.
type op struct {
	Client, Kind, Name string
	Call, Return       int64
	Err, Key           string
	Token              int64
}

type hold struct {
	Prim, Name, Client, Key string
	Token                   int64
	Shared                  bool
	Acquired                int64
	Child                   bool
	// DeadOnReturn: the Context had ended when the acquisition returned
	// (its key went meanwhile): the caller never believed it held.
	DeadOnReturn bool
}

type regOp struct {
	Resource       string
	Client         int
	Read           bool
	Token          int64
	Value, Outcome string
	Call, Return   int64
}

type message struct {
	T     string // "op", "hold", "ended", "regcall", "reg", "freezing"
	Op    *op    `json:",omitempty"`
	Hold  *hold  `json:",omitempty"`
	Reg   *regOp `json:",omitempty"`
	Key   string `json:",omitempty"`
	Token int64  `json:",omitempty"`
	At    int64  `json:",omitempty"`
	Cause string `json:",omitempty"`
	ID    int64  `json:",omitempty"`
}

type reporter struct {
	mu  sync.Mutex
	enc *json.Encoder
	seq int64
}

func (r *reporter) send(m message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(m)
}

func (r *reporter) next() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	return r.seq
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// handle is what every acquisition returns: *mutex.Lock, *election.Term,
// *semaphore.Permit, *rwmutex.Lock, *shard.Shard.
type handle interface {
	Token() fencing.Token
	Key() string
	Context() context.Context
	Txn(ctx context.Context) clientv3.Txn
}

type worker struct {
	cfg   config
	cli   *clientv3.Client
	guard *fencing.EtcdGuard
	rep   *reporter
	// freezeAsked is when the test last asked for a freeze (SIGUSR1), 0
	// when none is pending.
	freezeAsked atomic.Int64
}

// freezeAskedFor is how long a freeze request waits for a freeze point;
// the test stops the process from outside once it has waited longer.
const freezeAskedFor = 2 * time.Second

// askedToFreeze records each freeze request (SIGUSR1) as it arrives.
func (w *worker) askedToFreeze(ctx context.Context, usr1 <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-usr1:
			w.freezeAsked.Store(now())
		}
	}
}

// freezePoint stops this process (SIGSTOP to itself) when the test asked
// for a freeze in the last freezeAskedFor: it is called in a hold just
// before a write, so the write comes after the TTL the test lets pass
// before it resumes the process, the pause fencing exists for. One
// request stops the process once, at whichever point comes first.
func (w *worker) freezePoint(key string, token int64) {
	at := w.freezeAsked.Load()
	if at == 0 || !w.freezeAsked.CompareAndSwap(at, 0) || now()-at > int64(freezeAskedFor) {
		return
	}
	w.rep.send(message{T: "freezing", Key: key, Token: token, At: now()})
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
}

func newClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func run(ctx context.Context, cfg config, usr1 <-chan os.Signal) error {
	cli, err := newClient(cfg.endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	guard, err := fencing.NewEtcdGuard(cli, fencing.WithNamespace(cfg.ns))
	if err != nil {
		return err
	}
	w := &worker{cfg: cfg, cli: cli, guard: guard, rep: &reporter{enc: json.NewEncoder(os.Stdout)}}
	go w.askedToFreeze(ctx, usr1)
	var wg sync.WaitGroup
	for i, lane := range cfg.lanes {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(1000*cfg.id+i)))
		client := fmt.Sprintf("%s.p%d.%s%d", cfg.build, cfg.id, lane, i)
		fn, ok := w.lane(lane)
		if !ok {
			return fmt.Errorf("unknown lane %q", lane)
		}
		wg.Add(1)
		go func() { defer wg.Done(); fn(ctx, rng, client, 100*cfg.id+i) }()
	}
	wg.Wait()
	return nil
}

type laneFunc func(ctx context.Context, rng *rand.Rand, client string, regID int)

func (w *worker) lane(name string) (laneFunc, bool) {
	switch name {
	case "mutex":
		return w.mutexLane, true
	case "set":
		return w.setLane, true
	case "semaphore":
		return w.semaphoreLane, true
	case "rwmutex":
		return w.rwmutexLane, true
	case "election":
		return w.electionLane, true
	case "preferred":
		return w.preferredLane, true
	case "delay":
		return func(ctx context.Context, rng *rand.Rand, client string, regID int) {
			w.delayLane(ctx, rng, client, regID, true)
		}, true
	case "nodelay":
		return func(ctx context.Context, rng *rand.Rand, client string, regID int) {
			w.delayLane(ctx, rng, client, regID, false)
		}, true
	case "shard":
		return w.shardLane, true
	}
	return nil, false
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *worker) opts(client string) []mutex.Option {
	return []mutex.Option{mutex.WithNamespace(w.cfg.ns), mutex.WithTTL(w.cfg.ttl), mutex.WithIdentity(client)}
}

// took reports an acquisition's call and, when it succeeded, the hold and,
// later, the end of its Context.
func (w *worker) took(client, kind, prim, name string, start int64, h handle, err error, shared bool) bool {
	ret := now()
	o := &op{Client: client, Kind: kind, Name: name, Call: start, Return: ret, Err: errString(err)}
	if err != nil {
		w.rep.send(message{T: "op", Op: o})
		return false
	}
	o.Key, o.Token = h.Key(), int64(h.Token())
	w.rep.send(message{T: "op", Op: o})
	w.held(client, prim, name, h.Key(), int64(h.Token()), ret, shared, h.Context())
	return true
}

func (w *worker) held(client, prim, name, key string, token, at int64, shared bool, ctx context.Context) {
	dead := ctx != nil && ctx.Err() != nil
	w.rep.send(message{T: "hold", Hold: &hold{Prim: prim, Name: name, Client: client, Key: key, Token: token, Acquired: at, Shared: shared, Child: true, DeadOnReturn: dead}})
	if ctx != nil {
		context.AfterFunc(ctx, func() {
			w.rep.send(message{T: "ended", Key: key, Token: token, At: now(), Cause: errString(context.Cause(ctx))})
		})
	}
}

func (w *worker) released(client, kind, name string, h handle, start int64, err error) {
	w.rep.send(message{T: "op", Op: &op{Client: client, Kind: kind, Name: name, Call: start, Return: now(), Err: errString(err), Key: h.Key(), Token: int64(h.Token())}})
}

// holdFor writes 1 to 3 times, without looking at the handle first (a
// holder frozen or cut off between two writes writes with its old token
// once it runs again: fencing must refuse it), pausing up to maxPause.
func (w *worker) holdFor(ctx context.Context, rng *rand.Rand, client string, regID int, prim, name string, h handle, maxPause time.Duration) {
	for i := 0; i < 1+rng.IntN(3); i++ {
		w.freezePoint(h.Key(), int64(h.Token()))
		w.evidence(client, prim, name, h)
		w.guarded(client, regID, prim, name, h, fmt.Sprintf("%s.%d.%d", client, h.Token(), i))
		pause(ctx, time.Duration(rng.Int64N(int64(maxPause)+1)))
	}
}

func resource(prim, name string) string { return prim + "/" + name }
func workKey(prim, name string) string  { return workPrefix + prim + "/" + name }
func registerKey(prim, name string) string {
	return registerPrefix + prim + "/" + name
}

// evidence is a write of the holder's key to the name's work key in a
// transaction guarded by the holder's key: etcd's proof that the key
// acted as a holder at that revision.
func (w *worker) evidence(client, prim, name string, h handle) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := now()
	var err error
	if planted {
		_, err = w.cli.Put(ctx, workKey(prim, name), h.Key())
	} else {
		var resp *clientv3.TxnResponse
		resp, err = h.Txn(ctx).Then(clientv3.OpPut(workKey(prim, name), h.Key())).Commit()
		if err == nil && !resp.Succeeded {
			err = errors.New("not held")
		}
	}
	w.rep.send(message{T: "op", Op: &op{Client: client, Kind: prim + ".Txn", Name: name, Call: start, Return: now(), Err: errString(err), Key: h.Key(), Token: int64(h.Token())}})
}

// guarded writes the name's register through the etcd guard, with the
// evidence in the same transaction. Its call is announced first: a write
// of a process killed before its answer has an unknown outcome.
func (w *worker) guarded(client string, regID int, prim, name string, h fencing.Holder, value string) {
	w.guardedKey(client, regID, prim, name, h, value, keyOf(h))
}

func keyOf(h fencing.Holder) string {
	if k, ok := h.(interface{ Key() string }); ok {
		return k.Key()
	}
	return ""
}

func (w *worker) guardedKey(client string, regID int, prim, name string, h fencing.Holder, value, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	id := w.rep.next()
	start := now()
	w.rep.send(message{T: "regcall", ID: id, Reg: &regOp{Resource: resource(prim, name), Client: regID, Token: int64(h.Token()), Value: value, Outcome: "unknown", Call: start}})
	var err error
	if planted {
		_, err = w.cli.Txn(ctx).Then(clientv3.OpPut(registerKey(prim, name), value), clientv3.OpPut(workKey(prim, name), key)).Commit()
	} else {
		_, err = w.guard.Write(ctx, h, resource(prim, name), clientv3.OpPut(registerKey(prim, name), value), clientv3.OpPut(workKey(prim, name), key))
	}
	ret := now()
	r := &regOp{Resource: resource(prim, name), Client: regID, Token: int64(h.Token()), Value: value, Call: start, Return: ret}
	switch {
	case err == nil:
		r.Outcome = "accepted"
	case errors.Is(err, fencing.ErrStale):
		r.Outcome = "stale"
	case isLoss(err):
		r.Outcome = "lost"
	default:
		r.Outcome, r.Return = "unknown", 0
	}
	w.rep.send(message{T: "reg", ID: id, Reg: r})
	w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "fencing.EtcdGuard.Write", Name: name, Call: start, Return: ret, Err: errString(err), Key: key, Token: int64(h.Token())}})
}

// isLoss: the guard refused because the holder no longer held (its
// transaction's ownership compare failed), with nothing applied.
func isLoss(err error) bool {
	return errors.Is(err, mutex.ErrNotHeld) || errors.Is(err, election.ErrNotLeader) ||
		errors.Is(err, semaphore.ErrNotHeld) || errors.Is(err, rwmutex.ErrNotHeld) || lossOf(err)
}

func waitFor(rng *rand.Rand, minMs, spanMs int) time.Duration {
	return time.Duration(minMs+rng.IntN(spanMs)) * time.Millisecond
}

// mutexLane: three goroutines, each with Mutexes of its own, lock m0, m1
// and m2 through one shared session (one lease, one watch), so that the
// session sees concurrent acquisitions of one name.
func (w *worker) mutexLane(ctx context.Context, rng *rand.Rand, client string, regID int) {
	var s *session.Session
	var smu sync.Mutex
	shared := func() (*session.Session, error) {
		smu.Lock()
		defer smu.Unlock()
		if s == nil {
			var err error
			if s, err = session.New(w.cli, session.WithTTL(w.cfg.ttl)); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
	defer func() {
		if s != nil {
			_ = s.Close()
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		grng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		who := fmt.Sprintf("%s.g%d", client, g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				name := mutexNames[grng.IntN(len(mutexNames))]
				sess, err := shared()
				if err != nil {
					pause(ctx, 200*time.Millisecond)
					continue
				}
				m, err := mutex.New(w.cli, name, mutex.WithNamespace(w.cfg.ns), mutex.WithSession(sess), mutex.WithIdentity(who))
				if err != nil {
					w.rep.send(message{T: "op", Op: &op{Client: who, Kind: "mutex.New", Name: name, Call: now(), Return: now(), Err: err.Error()}})
					pause(ctx, 200*time.Millisecond)
					continue
				}
				actx, cancel := context.WithTimeout(ctx, waitFor(grng, 500, 4500))
				start := now()
				kind := "mutex.Lock"
				var l *mutex.Lock
				if grng.IntN(5) == 0 {
					kind = "mutex.TryLock"
					l, err = m.TryLock(actx)
				} else {
					l, err = m.Lock(actx)
				}
				cancel()
				var h handle
				if err == nil {
					h = l
				}
				if w.took(who, kind, "mutex", name, start, h, err, false) {
					w.holdFor(ctx, grng, who, regID, "mutex", name, l, 300*time.Millisecond)
					rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
					start = now()
					w.released(who, "mutex.Release", name, l, start, l.Unlock(rctx))
					rcancel()
				}
				_ = m.Close()
				pause(ctx, waitFor(grng, 0, 100))
			}
		}()
	}
	wg.Wait()
}

// setLane locks two of m0, m1 and m2 as one mutex.Set: one transaction,
// one token for both names.
func (w *worker) setLane(ctx context.Context, rng *rand.Rand, client string, regID int) {
	for ctx.Err() == nil {
		names := setNames[rng.IntN(len(setNames))]
		s, err := mutex.NewSet(w.cli, names, w.opts(client)...)
		if err != nil {
			w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "mutex.NewSet", Call: now(), Return: now(), Err: err.Error()}})
			pause(ctx, 200*time.Millisecond)
			continue
		}
		actx, cancel := context.WithTimeout(ctx, waitFor(rng, 1000, 5000))
		start := now()
		l, err := s.Lock(actx)
		cancel()
		ret := now()
		joined := strings.Join(names, "+")
		o := &op{Client: client, Kind: "mutex.Set.Lock", Name: joined, Call: start, Return: ret, Err: errString(err)}
		if err != nil {
			w.rep.send(message{T: "op", Op: o})
			_ = s.Close()
			pause(ctx, waitFor(rng, 0, 100))
			continue
		}
		o.Token = int64(l.Token())
		w.rep.send(message{T: "op", Op: o})
		ks := l.Keys()
		for i, name := range names {
			w.held(client, "mutex", name, ks[i], int64(l.Token()), ret, false, l.Context())
		}
		for i := 0; i < 1+rng.IntN(2); i++ {
			w.freezePoint(ks[0], int64(l.Token()))
			var ops []clientv3.Op
			for j, name := range names {
				ops = append(ops, clientv3.OpPut(workKey("mutex", name), ks[j]))
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 3*time.Second)
			start := now()
			var err error
			if planted {
				_, err = w.cli.Txn(wctx).Then(ops...).Commit()
			} else {
				var resp *clientv3.TxnResponse
				resp, err = l.Txn(wctx).Then(ops...).Commit()
				if err == nil && !resp.Succeeded {
					err = errors.New("not held")
				}
			}
			wcancel()
			w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "mutex.Set.Txn", Name: joined, Call: start, Return: now(), Err: errString(err), Token: int64(l.Token())}})
			for j, name := range names {
				w.guardedKey(client, regID, "mutex", name, l, fmt.Sprintf("%s.%d.%d", client, l.Token(), i), ks[j])
			}
			pause(ctx, waitFor(rng, 0, 150))
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		start = now()
		err = l.Unlock(rctx)
		rcancel()
		w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "mutex.Set.Release", Name: joined, Call: start, Return: now(), Err: errString(err), Token: int64(l.Token())}})
		_ = s.Close()
		pause(ctx, waitFor(rng, 0, 100))
	}
}

// semaphoreLane takes permits of s0 (limit 2), two at a time through one
// Semaphore.
func (w *worker) semaphoreLane(ctx context.Context, rng *rand.Rand, client string, regID int) {
	s, err := semaphore.New(w.cli, "s0", semLimit, w.opts(client)...)
	if err != nil {
		w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "semaphore.New", Call: now(), Return: now(), Err: err.Error()}})
		return
	}
	defer s.Close()
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		grng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		who := fmt.Sprintf("%s.g%d", client, g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				actx, cancel := context.WithTimeout(ctx, waitFor(grng, 500, 4500))
				start := now()
				p, err := s.Acquire(actx)
				cancel()
				var h handle
				if err == nil {
					h = p
				}
				if w.took(who, "semaphore.Acquire", "semaphore", "s0", start, h, err, true) {
					w.holdFor(ctx, grng, who, regID*10+g, "semaphore", "s0", p, 300*time.Millisecond)
					rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
					start = now()
					w.released(who, "semaphore.Release", "s0", p, start, p.Release(rctx))
					rcancel()
				}
				pause(ctx, waitFor(grng, 0, 100))
			}
		}()
	}
	wg.Wait()
}

// rwmutexLane takes read locks (two readers) and write locks of rw0.
func (w *worker) rwmutexLane(ctx context.Context, rng *rand.Rand, client string, regID int) {
	rw, err := rwmutex.New(w.cli, "rw0", w.opts(client)...)
	if err != nil {
		w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "rwmutex.New", Call: now(), Return: now(), Err: err.Error()}})
		return
	}
	defer rw.Close()
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		grng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		who := fmt.Sprintf("%s.g%d", client, g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				actx, cancel := context.WithTimeout(ctx, waitFor(grng, 500, 4500))
				start := now()
				read := grng.IntN(3) > 0
				var l *rwmutex.Lock
				var err error
				kind := "rwmutex.Lock"
				if read {
					kind = "rwmutex.RLock"
					l, err = rw.RLock(actx)
				} else {
					l, err = rw.Lock(actx)
				}
				cancel()
				var h handle
				if err == nil {
					h = l
				}
				if w.took(who, kind, "rwmutex", "rw0", start, h, err, read) {
					w.holdFor(ctx, grng, who, regID*10+g, "rwmutex", "rw0", l, 300*time.Millisecond)
					rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
					start = now()
					w.released(who, "rwmutex.Release", "rw0", l, start, l.Unlock(rctx))
					rcancel()
				}
				pause(ctx, waitFor(grng, 0, 100))
			}
		}()
	}
	wg.Wait()
}

// electionLane campaigns for e0 under the default strategy (Oldest); a
// leader resigns, or transfers to the last candidate, past those between
// (whose keys the hand-over moves behind it).
func (w *worker) electionLane(ctx context.Context, rng *rand.Rand, client string, regID int) {
	for seq := 0; ctx.Err() == nil; seq++ {
		e, err := election.New(w.cli, "e0", w.opts(client)...)
		if err != nil {
			w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "election.New", Call: now(), Return: now(), Err: err.Error()}})
			pause(ctx, 200*time.Millisecond)
			continue
		}
		actx, cancel := context.WithTimeout(ctx, waitFor(rng, 1000, 5000))
		start := now()
		t, err := e.Campaign(actx, fmt.Sprintf("%s-%d", client, seq))
		cancel()
		var h handle
		if err == nil {
			h = t
		}
		if w.took(client, "election.Campaign", "election", "e0", start, h, err, false) {
			w.holdFor(ctx, rng, client, regID, "election", "e0", t, 300*time.Millisecond)
			w.handOver(ctx, rng, client, "e0", e, t, false)
		}
		_ = e.Close()
		pause(ctx, waitFor(rng, 0, 100))
	}
}

// handOver ends a term: Resign, or Transfer to a waiting candidate (the
// last one under Oldest; under Preferred a named one, else Resign hands
// over to the best).
func (w *worker) handOver(ctx context.Context, rng *rand.Rand, client, name string, e *election.Election, t *election.Term, preferred bool) {
	to := ""
	if rng.IntN(2) == 0 {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		cs, err := e.Candidates(cctx)
		cancel()
		if err == nil {
			for _, c := range cs {
				if !c.Leader && c.Key != t.Key() {
					to = c.Key
					if preferred {
						break // the best waiting, named
					}
				}
			}
		}
	}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := now()
	var err error
	kind := "election.Resign"
	if to != "" {
		kind = "election.Transfer"
		err = t.Transfer(rctx, to)
		if err != nil && t.Context().Err() == nil {
			kind += ".failed"
			w.released(client, kind, name, t, start, err)
			start, kind = now(), "election.Resign"
			err = t.Resign(rctx)
		}
	} else {
		err = t.Resign(rctx)
	}
	w.released(client, kind, name, t, start, err)
}

// preferredLane campaigns for e1 under Preferred with a priority and the
// build as its version (so a newer build is the better candidate, as in a
// rolling upgrade); a leader asked to end its term hands over, or ignores
// it and is preempted at the hand-over deadline.
func (w *worker) preferredLane(ctx context.Context, rng *rand.Rand, client string, regID int) {
	version := "v1"
	if w.cfg.build == "new" {
		version = "v2"
	}
	for seq := 0; ctx.Err() == nil; seq++ {
		opts := append(w.opts(client), election.WithStrategy(election.Preferred), election.WithPriority(rng.IntN(3)),
			election.WithVersion(version), election.WithHandoverDeadline(waitFor(rng, 300, 1200)))
		e, err := election.New(w.cli, "e1", opts...)
		if err != nil {
			w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "election.New", Call: now(), Return: now(), Err: err.Error()}})
			pause(ctx, 200*time.Millisecond)
			continue
		}
		actx, cancel := context.WithTimeout(ctx, waitFor(rng, 1000, 5000))
		start := now()
		t, err := e.Campaign(actx, fmt.Sprintf("%s-%d", client, seq))
		cancel()
		var h handle
		if err == nil {
			h = t
		}
		if w.took(client, "election.Campaign", "election", "e1", start, h, err, false) {
			ignore := rng.IntN(4) == 0
			for i := 0; i < 1+rng.IntN(3) && t.Context().Err() == nil; i++ {
				w.evidence(client, "election", "e1", t)
				w.guarded(client, regID, "election", "e1", t, fmt.Sprintf("%s.%d.%d", client, t.Token(), i))
				select {
				case <-t.EndRequested():
					if !ignore {
						i = 99
					}
				case <-time.After(waitFor(rng, 0, 300)):
				case <-ctx.Done():
				}
			}
			if ignore && t.Context().Err() == nil {
				pause(ctx, waitFor(rng, 0, 1500)) // preempted, maybe
			}
			w.handOver(ctx, rng, client, "e1", e, t, true)
		}
		_ = e.Close()
		pause(ctx, waitFor(rng, 0, 100))
	}
}

// delayLane locks ld0, each time on a session of its own, with a
// lock-delay (withDelay) or without; a holder sometimes closes its session
// instead of unlocking: lost without releasing, which a lock-delay makes
// the next holder wait out.
func (w *worker) delayLane(ctx context.Context, rng *rand.Rand, client string, regID int, withDelay bool) {
	for ctx.Err() == nil {
		s, err := session.New(w.cli, session.WithTTL(w.cfg.ttl))
		if err != nil {
			pause(ctx, 200*time.Millisecond)
			continue
		}
		opts := []mutex.Option{mutex.WithNamespace(w.cfg.ns), mutex.WithSession(s), mutex.WithIdentity(client)}
		if withDelay {
			opts = append(opts, mutex.WithLockDelay(lockDelay))
		}
		m, err := mutex.New(w.cli, "ld0", opts...)
		if err != nil {
			w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "mutex.New", Name: "ld0", Call: now(), Return: now(), Err: err.Error()}})
			_ = s.Close()
			pause(ctx, 200*time.Millisecond)
			continue
		}
		actx, cancel := context.WithTimeout(ctx, waitFor(rng, 2000, 8000))
		start := now()
		l, err := m.Lock(actx)
		cancel()
		var h handle
		if err == nil {
			h = l
		}
		if w.took(client, "mutex.Lock", "mutex", "ld0", start, h, err, false) {
			w.holdFor(ctx, rng, client, regID, "mutex", "ld0", l, 200*time.Millisecond)
			start = now()
			if rng.IntN(3) == 0 {
				err := s.Close() // revokes the lease: lost without releasing
				w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "session.Close.holding", Name: "ld0", Call: start, Return: now(), Err: errString(err), Key: l.Key(), Token: int64(l.Token())}})
			} else {
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
				w.released(client, "mutex.Release", "ld0", l, start, l.Unlock(rctx))
				rcancel()
			}
		}
		_ = m.Close()
		_ = s.Close()
		pause(ctx, waitFor(rng, 0, 300))
	}
}

// tokenHolder is a holder known by its keys and token, as `baton lock`
// hands them to its command: its transactions compare every key's
// CreateRevision with the token.
type tokenHolder struct {
	cli   *clientv3.Client
	keys  []string
	token fencing.Token
}

func (t tokenHolder) Token() fencing.Token { return t.token }
func (t tokenHolder) Key() string          { return t.keys[0] }
func (t tokenHolder) Context() context.Context {
	return context.Background() // the supervisor, not the command, watches the lock
}

func (t tokenHolder) Txn(ctx context.Context) clientv3.Txn {
	var own []clientv3.Cmp
	for _, k := range t.keys {
		own = append(own, clientv3.Compare(clientv3.CreateRevision(k), "=", int64(t.token)))
	}
	return &ownedTxn{Txn: t.cli.Txn(ctx), own: own}
}

// ownedTxn adds the ownership comparisons to whatever the caller compares.
type ownedTxn struct {
	clientv3.Txn
	own []clientv3.Cmp
	cmp bool
}

func (o *ownedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	o.cmp = true
	o.Txn = o.Txn.If(append(cs, o.own...)...)
	return o
}

func (o *ownedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	if !o.cmp {
		o.If()
	}
	o.Txn = o.Txn.Then(ops...)
	return o
}

func (o *ownedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	if !o.cmp {
		o.If()
	}
	o.Txn = o.Txn.Else(ops...)
	return o
}

// runCLI is the command under `baton lock NAME... --`: it reports a hold
// per name and writes with the key(s) and token of its environment.
func runCLI(ctx context.Context, cfg config) error {
	tok, err := fencing.ParseToken(os.Getenv("BATON_FENCING_TOKEN"))
	if err != nil {
		return err
	}
	names := []string{os.Getenv("BATON_LOCK_NAME")}
	ks := []string{os.Getenv("BATON_LOCK_KEY")}
	if v := os.Getenv("BATON_LOCK_NAMES"); v != "" {
		names, ks = strings.Split(v, "\n"), strings.Split(os.Getenv("BATON_LOCK_KEYS"), "\n")
	}
	if len(names) != len(ks) || names[0] == "" || ks[0] == "" {
		return fmt.Errorf("names %q and keys %q from the environment do not match", names, ks)
	}
	cli, err := newClient(cfg.endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	guard, err := fencing.NewEtcdGuard(cli, fencing.WithNamespace(cfg.ns))
	if err != nil {
		return err
	}
	w := &worker{cfg: cfg, cli: cli, guard: guard, rep: &reporter{enc: json.NewEncoder(os.Stdout)}}
	client := fmt.Sprintf("%s.cli%d", cfg.build, cfg.id)
	at := now()
	for i, name := range names {
		w.held(client, "mutex", name, ks[i], int64(tok), at, false, nil)
	}
	h := tokenHolder{cli: cli, keys: ks, token: tok}
	rng := rand.New(rand.NewPCG(cfg.seed, uint64(at)))
	for i := 0; i < 1+rng.IntN(3) && ctx.Err() == nil; i++ {
		for j, name := range names {
			one := tokenHolder{cli: cli, keys: ks, token: tok}
			one.keys = append([]string{ks[j]}, append(append([]string(nil), ks[:j]...), ks[j+1:]...)...)
			w.evidence(client, "mutex", name, one)
			w.guardedKey(client, 5000+cfg.id, "mutex", name, h, fmt.Sprintf("%s.%d.%d", client, tok, i), ks[j])
		}
		pause(ctx, waitFor(rng, 0, 200))
	}
	return nil
}
