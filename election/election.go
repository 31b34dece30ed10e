package election

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/delay"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
)

// Election is a named leader election. Under the default strategy,
// Oldest, candidates queue in the order they campaigned and the oldest
// leads; under Preferred the best candidate leads (see Strategy). An
// Election is safe for concurrent use.
type Election struct {
	o     *core.Owner[*Term]
	delay *delay.Config // nil: no WithLockDelay
	recs  *recordOwner  // candidate records
	cand  config.Candidate
	coord string // the prefix of records and end requests
	hooks hooks

	mu      sync.Mutex
	closed  bool
	stopped map[*func(*Term)]struct{}
	after   sync.WaitGroup // the end of each term: Close waits for it
}

// hooks are pause points for tests (export_test.go); nil in production.
type hooks struct {
	beforeHandOver func(to string) // after the target was checked, before the hand-over's transaction
	onPreempt      func()          // before a candidate deletes a leader's key at the deadline
}

// errNotChosen is the take that found another leader, or a strategy's
// condition failing (the Owner's busy error).
var errNotChosen = errors.New("election: not chosen")

// New returns an Election for name in the configured namespace. It does
// not contact etcd: the lease is granted by the first Campaign. Invalid
// names and options are rejected with an error wrapping ErrInvalid.
func New(cli *clientv3.Client, name string, opts ...Option) (*Election, error) {
	o, cfg, _, sess, err := config.OpenSession[*Term](cli, config.Primitive{Kind: metrics.Election, Keys: keys.Election, Errs: &electionErrs}, name, opts)
	if err != nil {
		return nil, err
	}
	if cfg.LockDelay > 0 && Strategy(cfg.Candidate.Strategy) == Preferred {
		// A preferred election's hand-overs and preemptions do not go
		// through the lock-delay record: refuse rather than ignore it.
		_ = o.Close()
		return nil, fmt.Errorf("%w: WithLockDelay(%v) with WithStrategy(Preferred): a preferred election is not lock-delayed", ErrInvalid, cfg.LockDelay)
	}
	e := &Election{o: o, cand: cfg.Candidate, coord: keys.Prefix(cfg.Namespace, candidateKind, name),
		delay: delay.New(cli, cfg.Namespace, keys.Election, name, o.Prefix(), cfg.LockDelay)}
	if e.strategy() == Oldest {
		o.SetMover(mover{e}) // a Transfer past the next candidate moves the skipped ones
	}
	if e.cand.Deadline == 0 {
		e.cand.Deadline = config.DefaultDeadline
	}
	{
		// Every candidate writes a record, under Oldest too: it tells baton's
		// candidates from etcd's own, which a Transfer must not skip.
		// Election: a second Campaign through the lease takes the record over.
		rec := metrics.Recorder{Logger: zap.NewNop(), Kind: metrics.Election, Name: name, Namespace: cfg.Namespace, Label: name}
		e.recs = core.NewOwner[*core.Hold](sess, core.OwnerConfig{Recorder: rec,
			Prefix: e.recordPrefix(e.strategy()), Errs: &electionErrs, Untraced: true})
	}
	return e, nil
}

var electionErrs = core.Errors{NotHeld: ErrNotLeader, Busy: errNotChosen}

func (e *Election) strategy() Strategy { return Strategy(e.cand.Strategy) }

// Strategy is the strategy this Election campaigns with.
func (e *Election) Strategy() Strategy { return e.strategy() }

// Name returns the election's name.
func (e *Election) Name() string { return e.o.Name() }

// Namespace returns the election's namespace.
func (e *Election) Namespace() string { return e.o.Namespace() }

// Prefix returns the etcd prefix under which every candidate's key lives.
func (e *Election) Prefix() string { return e.o.Prefix() }

// Campaign queues value as a candidate and returns once it leads, ctx
// ends, or the Election is closed (ErrClosed). It returns success only
// after reading, in the same revision that shows no older candidate, that
// its own key still exists with its original CreateRevision. ctx bounds
// the wait only: the Term's Context lives until leadership is lost,
// resigned or handed over. On error no key of this call is left in etcd.
// A refusal by etcd (permission denied, authentication failed, invalid
// request) is returned at once. An Oldest Campaign on an election that
// Preferred candidates run fails with an error wrapping ErrStrategy and
// ErrInvalid; a Preferred one on an election that Oldest candidates (or
// etcd's) run waits until they have all left, never preempting them.
//
// Under Preferred the candidate first writes its record (value and
// attributes) and leads when it is the best live candidate and nobody
// leads, or when a leader hands over to it; see Strategy.
//
// A lease has one key per election, so a Campaign through a lease that
// already leads this election (another Election of this process on the
// same session, or this one again) takes that key over and writes its
// value, as etcd's Campaign does: the earlier Term ends first, with
// ErrLost and ErrReplaced, and the token stays the same.
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	if e.strategy() == Preferred {
		return e.campaignPreferred(ctx, value)
	}
	var rec *core.Hold
	if e.recs != nil {
		var err error
		if rec, err = e.putRecord(ctx, value); err != nil {
			return nil, err
		}
	}
	// Refused while Preferred candidates run the election: a key in its
	// prefix would break their hand-overs.
	noPreferred := clientv3.Compare(clientv3.CreateRevision(e.recordPrefix(Preferred)), "=", 0).WithPrefix()
	t, err := delay.Acquire(ctx, e.o, e.delay, core.Request{Value: value, If: []clientv3.Cmp{noPreferred}}, e.wrap(value, rec))
	if errors.Is(err, errNotChosen) {
		err = fmt.Errorf("%w: %w: election %q is run by candidates of the preferred strategy; this one campaigns with oldest",
			ErrInvalid, ErrStrategy, e.Name())
	}
	if err != nil {
		if rec != nil { // in the background: Campaign returns within ~100 ms of ctx's end, etcd reachable or not
			e.recs.Go(context.WithoutCancel(ctx), func(ctx context.Context) { _ = core.Release(ctx, rec) }) // after Close, Close deleted it
		}
		return nil, err
	}
	e.started(t)
	return t, nil
}

// wrap makes the Term of a hold, before the hold is armed.
func (e *Election) wrap(value string, rec *core.Hold) func(*core.Hold) *Term {
	return func(h *core.Hold) *Term {
		t := &Term{hold: h, e: e, rec: rec, value: value, endCh: make(chan struct{})}
		t.ctx, t.cancel = context.WithCancelCause(h.Context())
		return t
	}
}

// started arranges what follows a term's end: its record is deleted and
// the stopped-leading callbacks run. Under Preferred it starts the watch
// for requests to end the term.
func (e *Election) started(t *Term) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return // Close ends the term and deletes the record itself
	}
	e.after.Add(1)
	context.AfterFunc(t.ctx, func() {
		defer e.after.Done()
		if cause := context.Cause(t.ctx); !errors.Is(cause, ErrReleased) && !errors.Is(cause, ErrTransferred) {
			t.dropRecord(context.Background()) // a loss; Resign and hand-overs drop it once the key is gone
		}
		e.mu.Lock()
		fns := make([]func(*Term), 0, len(e.stopped))
		for p := range e.stopped {
			fns = append(fns, *p)
		}
		e.mu.Unlock()
		for _, fn := range fns {
			fn(t)
		}
	})
	e.o.Go(t.ctx, t.watchEnd) // under Oldest, for requests to hand over to a named candidate
}

// IsLeader reports whether a term of this Election leads as far as this
// process knows: a Term's Context has not ended. It reads local state
// only, so it is cheap; act on a Term's Context and token, not on this.
func (e *Election) IsLeader() bool {
	for _, t := range e.o.Held() {
		if t.IsLeader() {
			return true
		}
	}
	return false
}

// OnStoppedLeading registers fn to be called, in a goroutine of its own,
// once for every term of this Election that ends from then on, after its
// Context ended (context.Cause(t.Context()) says why: ErrReleased,
// ErrTransferred, or ErrLost and a reason). It is client-go's
// OnStoppedLeading, for callers that do not use Run. The returned func
// unregisters fn. Close waits for the calls in progress.
func (e *Election) OnStoppedLeading(fn func(t *Term)) (remove func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped == nil {
		e.stopped = make(map[*func(*Term)]struct{})
	}
	p := &fn
	e.stopped[p] = struct{}{}
	return func() {
		e.mu.Lock()
		delete(e.stopped, p)
		e.mu.Unlock()
	}
}

// Held returns the terms this Election holds, in the order they were
// won: every Term that Campaign returned and that was not resigned since,
// including one whose Context a loss has ended (its Resign is still due).
// It is for inspection, such as a debug endpoint; use a Term's Context,
// not this list, to decide whether to act as leader.
func (e *Election) Held() []*Term { return e.o.Held() }

// Close resigns every term the Election holds (their Context ends with
// ErrReleased), ends every Observe channel, makes waiting and later
// Campaign calls return ErrClosed, and revokes the lease the Election
// created (a shared session is left open). It deletes the Election's
// metric series unless another open Election records under the same
// label, waits for every goroutine the Election started (stopped-leading
// callbacks included), and is idempotent.
func (e *Election) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	err := delay.Close(e.delay, e.o, (*Term).Resign)
	if e.recs != nil {
		err = errors.Join(err, e.recs.Close())
	}
	e.after.Wait()
	return err
}
