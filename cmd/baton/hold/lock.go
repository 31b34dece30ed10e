package hold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/cmd/baton/supervise"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
	"github.com/batonhq/baton/internal/telemetry"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/semaphore"
)

// releaseTimeout bounds the release or resignation on the way out.
const releaseTimeout = 5 * time.Second

type lockOptions struct {
	ttl     time.Duration
	timeout time.Duration
	try     bool
	grace   time.Duration
	metrics string
	limit   int  // --limit: a semaphore permit (lock_kinds.go)
	shared  bool // --shared: a read lock (lock_kinds.go)
	delay   time.Duration
	signal  string         // --release-signal (lock_request.go)
	reqSig  syscall.Signal // its value
	// tp records the library's spans (tracing.go).
	tp trace.TracerProvider
}

// HeldView is what lock prints once it holds the lock, and elect once it
// leads.
type HeldView struct {
	// Event is "acquired" in the status stream of -o json.
	Event string        `json:"event,omitempty"`
	Kind  string        `json:"kind"`
	Name  string        `json:"name"`
	Names []string      `json:"names,omitempty"` // a set's (baton lock A B --)
	Value string        `json:"value,omitempty"`
	Key   string        `json:"key"`
	Token int64         `json:"token"`
	Lease string        `json:"lease"`
	TTL   time.Duration `json:"-"`
	TTLs  int64         `json:"ttl_seconds"`
	// Limit is a semaphore's; Shared marks a read lock.
	Limit  int  `json:"limit,omitempty"`
	Shared bool `json:"shared,omitempty"`
}

func WriteHeld(w io.Writer, asJSON bool, v HeldView) error {
	v.TTLs = int64(v.TTL / time.Second)
	if asJSON {
		return cmdutil.WriteJSONLine(w, v)
	}
	what := heldWhat(v)
	value := ""
	if v.Value != "" {
		value = fmt.Sprintf(" as %q", v.Value)
	}
	_, err := fmt.Fprintf(w, "%s %q%s: token %d, key %s, lease %s (ttl %v)\n", what, v.Name, value, v.Token, v.Key, v.Lease, v.TTL)
	return err
}

// splitCommand separates NAME (and VALUE) from the command after "--".
func splitCommand(cmd *cobra.Command, a []string, fixed int) ([]string, error) {
	if len(a) <= fixed {
		return nil, nil
	}
	if cmd.ArgsLenAtDash() != fixed {
		return nil, cmdutil.UsageErrorf("put -- before the command, as in: %s %s -- %s", cmd.CommandPath(), strings.Join(a[:fixed], " "), strings.Join(a[fixed:], " "))
	}
	return a[fixed:], nil
}

func NewCmdLock(g *cmdutil.Env) *cobra.Command {
	var o lockOptions
	cmd := &cobra.Command{
		Use:   "lock NAME... [-- CMD ARGS...]",
		Short: "Hold a lock until interrupted, or run a command under it",
		Long: `Acquire the lock NAME. Without a command, hold it until SIGINT, SIGTERM or
SIGHUP, then release it. With a command, run it with BATON_LOCK_NAME,
BATON_LOCK_KEY and BATON_FENCING_TOKEN in its environment, release the lock
when it exits, and exit with its status. The command is looked up before
the lock is requested: 127 if it is not found, 126 if it cannot be run.

On Linux the command runs in a process group of its own under a
supervisor that stops the whole group (SIGTERM, then SIGKILL after
--grace) when the lock may be lost (baton then exits with 79), when baton
gets SIGINT, SIGTERM or SIGHUP, when baton dies, and when baton stops
confirming the lock (frozen, wedged) at the lock's validity deadline.

While waiting, baton says on stderr who holds the lock, and waits
through etcd outages (on a new lease if the old one is gone). --try exits
with 75 at once if another holds the lock; so does --timeout when it runs
out. A signal ends the wait with 128+N (130 for SIGINT, 143 for SIGTERM).

--limit N takes one of N permits of the semaphore NAME instead: at most N
holders at once, served in arrival order. --shared takes a read lock of
the read/write lock NAME: readers hold together, and wait only for a
writer (a program using package rwmutex) that came before them. A lock, a
semaphore and a read/write lock of the same NAME are different objects:
a plain baton lock NAME neither waits for nor blocks --limit or --shared
holders of NAME. The command also gets BATON_LOCK_KIND (semaphore or
rwlock-read) and, for a semaphore, BATON_SEMAPHORE_LIMIT.

Several names before "--" (baton lock A B -- CMD; baton lock A B -- holds
them until interrupted) are taken at once, atomically, under one fencing
token, whatever order other holders name them in: no deadlock. The
command gets BATON_LOCK_NAMES and BATON_LOCK_KEYS, one per line, beside
the first name and key. --limit and --shared take one NAME.

With OTEL_EXPORTER_OTLP_ENDPOINT set, the wait, the hold and the release
are exported as OpenTelemetry spans (OTLP/gRPC), in the trace of baton's
own TRACEPARENT if it has one; the command gets TRACEPARENT and
TRACESTATE naming the hold, so its own spans are the hold's children.`,
		Args: cmdutil.Args(1, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			names, argv, err := lockNames(cmd, a)
			if err != nil {
				return err
			}
			if o.try && o.timeout > 0 {
				return cmdutil.UsageErrorf("--try and --timeout exclude each other")
			}
			if o.timeout < 0 || o.grace <= 0 {
				return cmdutil.UsageErrorf("--timeout must not be negative and --grace must be positive")
			}
			if err := validateKindFlags(cmd, o); err != nil {
				return err
			}
			if err := validateLockDelay(o.delay); err != nil {
				return err
			}
			if o.reqSig, err = parseSignal(o.signal); err != nil {
				return err
			}
			return runLock(cmd, g, o, names, argv)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.ttl, "ttl", mutex.DefaultTTL, "lease TTL: whole seconds, at least 2s")
	f.DurationVar(&o.timeout, "timeout", 0, "give up waiting for the lock after this long (exit 75); 0 waits until interrupted")
	f.BoolVar(&o.try, "try", false, "do not wait: exit 75 if another holds the lock")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "after SIGTERM, how long the command has before SIGKILL")
	addMetricsFlag(f, &o.metrics)
	addKindFlags(f, &o)
	addLockDelayFlag(f, &o.delay)
	addReleaseSignalFlag(f, &o.signal)
	return cmd
}

// runLock takes the lock, a semaphore permit or a read lock as the options
// say, holds it until interrupted or runs the command under it, and
// releases it.
func runLock(cmd *cobra.Command, g *cmdutil.Env, o lockOptions, names []string, argv []string) (err error) {
	errOut := cmd.ErrOrStderr()
	r, err := startHoldRun(cmd, g, argv, o.grace, o.metrics, "baton lock",
		telemetry.LockName.String(strings.Join(names, ", ")), telemetry.LockNamespace.String(g.Namespace))
	if err != nil {
		return err
	}
	defer func() { r.end(err) }()
	c, ms, ictx, span, cli := r.child, r.ms, r.ictx, r.span, r.cli
	o.tp = r.tp
	var k *locker
	if len(names) > 1 {
		k, err = newSetLocker(cli, g, o, names, ms)
	} else {
		k, err = newLocker(cli, g, o, names[0], ms)
	}
	if err != nil {
		return cmdutil.WithCode(cmdutil.ExitUsage, err)
	}
	name := k.name
	defer closeBounded(k.close)
	what := k.label()
	st := newStatusWriter(errOut, g.JSON(), what, name)

	span.SetAttributes(telemetry.LockPrimitive.String(k.primitive()))
	// The library's wait, hold and release spans are the command span's
	// children (ictx carries it).
	l, err := acquireHold(ictx, g, cli, k, o, st)
	if err != nil {
		return err
	}
	defer ms.track(l)()
	keyspace.RecordHeld(ictx, l.Txn, heldPuts(k, l)...)
	st.acquired(HeldView{Kind: string(k.kind), Name: name, Names: k.names, Key: l.Key(), Token: int64(l.Token()),
		Lease: cmdutil.LeaseHex(int64(l.Lease())), TTL: l.TTL(), Limit: k.limit, Shared: k.kind == keys.RWLock})
	release := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ictx), releaseTimeout)
		defer cancel()
		return k.release(rctx, l)
	}

	if c == nil {
		select {
		case <-l.Done():
		case <-ictx.Done():
		case r := <-requestsOf(l):
			st.requested(r, "releasing")
		}
		if err := lostError(l.Context(), what, name); err != nil {
			_ = release()
			st.lost(err, true)
			return err
		}
		if err := release(); err != nil {
			return lostOr(err, k, "release")
		}
		st.released()
		return nil
	}

	tok, err := childToken(g, l.Token())
	if err != nil {
		_ = release()
		return err
	}
	// The command's own spans are children of the hold.
	c.Env = append(kindEnv(k, l, tok), cmdutil.TraceEnv(l.Context())...)
	c.Requests, c.ReqSignal = requestsOf(l), o.reqSig
	c.OnRequest = func(r request.Request) { st.requested(r, fmt.Sprintf("passing %v to the command", o.reqSig)) }
	if ierr := supervise.InterruptedBeforeCommand(ictx, fmt.Sprintf("%s %q", what, name)); ierr != nil {
		if err := release(); err == nil {
			st.released()
		}
		return ierr
	}
	res, err := c.Run(ictx, l)
	uerr := release()
	if err != nil {
		return err
	}
	if res.Lost || res.Cause != "" {
		lerr := cmdutil.WithCode(cmdutil.ExitOwnershipLost, fmt.Errorf("%s %q lost while the command ran (%v); %s",
			what, name, lossCause(l.Context(), res), stoppedText(res, o.grace)))
		st.lost(lerr, true)
		return lerr
	}
	if uerr != nil {
		fmt.Fprintf(errOut, "baton: release %s %q: %v\n", what, name, uerr)
	} else {
		st.released()
	}
	return cmdutil.ChildStatus(res.Status)
}

// mutexAcquire is a locker's acquire by a Mutex's or a Set's Lock and
// TryLock; unlockMutex its release.
func mutexAcquire(lock, tryLock func(context.Context) (*mutex.Lock, error)) func(context.Context, bool) (lockHold, error) {
	return func(ctx context.Context, try bool) (lockHold, error) {
		f := lock
		if try {
			f = tryLock
		}
		l, err := f(ctx)
		if err != nil {
			return nil, err // not a nil *mutex.Lock in a lockHold
		}
		return l, nil
	}
}

func unlockMutex(ctx context.Context, h lockHold) error { return h.(*mutex.Lock).Unlock(ctx) }

// newChild checks the command before anything is requested from etcd; nil
// without a command.
func newChild(g *cmdutil.Env, argv []string, grace time.Duration, cmd *cobra.Command) (*supervise.Child, error) {
	if len(argv) == 0 {
		return nil, nil
	}
	path, err := supervise.LookCommand(argv[0])
	if err != nil {
		return nil, err
	}
	exe, err := supervise.BatonExecutable(g)
	if err != nil {
		return nil, fmt.Errorf("find the baton binary to supervise the command: %w", err)
	}
	supervise.WarnUnsupervised(func(s string) { fmt.Fprintf(cmd.ErrOrStderr(), "baton: %s\n", s) })
	return &supervise.Child{Argv: argv, Path: path, Grace: grace, Exe: exe,
		Stdin: cmd.InOrStdin(), Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}, nil
}

// lossCause says why a hold ended under a running command.
func lossCause(ctx context.Context, res supervise.ChildResult) any {
	switch {
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), mutex.ErrLost):
		return context.Cause(ctx)
	case res.Cause == supervise.CauseDeadline:
		return "no renewal confirmed before the validity deadline"
	}
	return res.Cause
}

// newMutexLocker takes NAME as a plain lock.
func newMutexLocker(cli *clientv3.Client, g *cmdutil.Env, o lockOptions, name string, ms *metricsServer) (*locker, error) {
	m, err := mutex.New(cli, name, mutex.WithTTL(o.ttl), mutex.WithNamespace(g.Namespace), mutex.WithRegisterer(ms.registerer()),
		mutex.WithTracerProvider(o.tp), mutex.WithLockDelay(o.delay))
	if err != nil {
		return nil, err
	}
	return &locker{
		kind: keys.Lock, name: name, ns: g.Namespace, prefix: m.Prefix(),
		notHeld: mutex.ErrNotHeld, busy: mutex.ErrLocked,
		acquire: mutexAcquire(m.Lock, m.TryLock), release: unlockMutex,
		busyError: func(ctx context.Context) error {
			who := ""
			if h, herr := m.Holder(ctx); herr == nil && h.Key != "" {
				who = fmt.Sprintf(" (holder %q, token %d)", h.Identity, h.Token)
			}
			return fmt.Errorf("lock %q is held by another%s", m.Name(), who)
		},
		queue: lockQueue(cli, m),
		close: m.Close,
	}, nil
}

// acquireHold takes the hold as the options say, mapping "not now" to
// ExitNotAcquired and an interrupt to 128+N. A blocking wait goes on
// through etcd outages until --timeout or a signal.
func acquireHold(ictx context.Context, g *cmdutil.Env, cli *clientv3.Client, k *locker, o lockOptions, st *statusWriter) (lockHold, error) {
	what := fmt.Sprintf("%s %q", k.label(), k.name)
	if o.try {
		actx, cancel := g.OpContext(ictx)
		defer cancel()
		l, err := k.acquire(actx, true)
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, k.busy):
			hctx, hcancel := g.OpContext(ictx)
			defer hcancel()
			return nil, cmdutil.WithCode(cmdutil.ExitNotAcquired, k.busyError(hctx))
		case errors.Is(err, semaphore.ErrLimitMismatch):
			return nil, cmdutil.WithCode(cmdutil.ExitUsage, err)
		}
		if ierr := cmdutil.InterruptedError(ictx, "%s: not acquired", what); ierr != nil {
			return nil, ierr
		}
		return nil, g.Failed("acquire "+what, err)
	}

	actx, cancel := ictx, context.CancelFunc(func() {})
	if o.timeout > 0 {
		actx, cancel = context.WithTimeout(ictx, o.timeout)
	}
	defer cancel()
	wctx, wcancel := context.WithCancel(actx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchQueue(wctx, cli, k.prefix, st, k.queue)
	}()
	defer wg.Wait()
	defer wcancel()

	for attempt := 0; ; attempt++ {
		l, err := k.acquire(actx, false)
		if err == nil {
			return l, nil
		}
		switch {
		case ictx.Err() != nil:
			if ierr := cmdutil.InterruptedError(ictx, "%s: not acquired", what); ierr != nil {
				return nil, ierr
			}
			return nil, cmdutil.WithCode(cmdutil.ExitNotAcquired, fmt.Errorf("%s: interrupted before it was acquired", what))
		case actx.Err() != nil:
			return nil, cmdutil.WithCode(cmdutil.ExitNotAcquired, fmt.Errorf("%s not acquired within %v", what, o.timeout))
		case errors.Is(err, semaphore.ErrLimitMismatch):
			return nil, cmdutil.WithCode(cmdutil.ExitUsage, err)
		case !worthWaiting(err):
			return nil, g.Failed("acquire "+what, err)
		}
		st.unreachableNow(err)
		if !cmdutil.Sleep(actx, cmdutil.WaitBackoff(attempt)) {
			continue // the next acquire returns at once with actx's end
		}
	}
}

// lockQueue reads the holder and the waiters ahead of this process (its
// key carries this process's identity, as mutex writes it).
func lockQueue(cli *clientv3.Client, m *mutex.Mutex) func(ctx context.Context) (queueState, bool, error) {
	self := keyspace.HolderIdentity()
	return func(ctx context.Context) (queueState, bool, error) {
		h, err := m.Holder(ctx)
		if err != nil || h.Key == "" || h.Identity == self {
			return queueState{}, false, err
		}
		ws, err := m.Waiters(ctx)
		if err != nil {
			return queueState{}, false, err
		}
		ahead := 0
		for _, w := range ws {
			if w.Identity == self {
				break
			}
			ahead++
		}
		return queueState{holder: h.Identity, token: int64(h.Token), heldFor: keyspace.HeldFor(ctx, cli, m.Namespace(), keys.Lock, m.Name(), h.Lease), ahead: ahead}, true, nil
	}
}

// lostError is an ExitOwnershipLost error if ctx ended by a loss, nil if
// it has not ended or ended by a release.
func lostError(ctx context.Context, kind, name string) error {
	if ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if !errors.Is(cause, mutex.ErrLost) {
		return nil
	}
	return cmdutil.WithCode(cmdutil.ExitOwnershipLost, fmt.Errorf("%s %q lost: %v", kind, name, cause))
}

// lostOr maps a release's ErrNotHeld to ownership lost.
func lostOr(err error, k *locker, what string) error {
	if errors.Is(err, mutex.ErrLost) || errors.Is(err, k.notHeld) {
		return cmdutil.WithCode(cmdutil.ExitOwnershipLost, fmt.Errorf("%s %q: %s: %w", k.label(), k.name, what, err))
	}
	return fmt.Errorf("%s %q: %s: %w", k.label(), k.name, what, err)
}

func stoppedText(res supervise.ChildResult, grace time.Duration) string {
	if res.Killed {
		return fmt.Sprintf("the command got SIGTERM, outlived the %v grace and got SIGKILL (status %d)", grace, res.Status)
	}
	return fmt.Sprintf("the command got SIGTERM and exited with status %d", res.Status)
}
