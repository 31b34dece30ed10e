package robustness

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
)

// TestFreeLockJudgesAWaiterOnAStoppedWatch drives, on a real etcd and
// through the suite's own recording, the interleaving in which a waiter
// follows a session's namespace watch that was stopped while idle and is
// still ending (held in the StreamEnded hook), a second hold on the
// session starts a fresh watch, and the lock it waits for is released in
// between. The free-lock check must judge what happened: a violation
// naming the waiter's key if the waiter did not hold within the bound
// while the lock was free, none if it did.
func TestFreeLockJudgesAWaiterOnAStoppedWatch(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	const ns = "robust"
	names, err := describeNames(cli, ns)
	if err != nil {
		t.Fatal(err)
	}
	h := &History{Start: now(), Names: names}
	cfg := Config{TTL: 3 * time.Second, Namespace: ns, FreeBound: DefaultFreeBound}
	r := &runner{cfg: cfg, h: h, admin: cli}
	r.cfg.names = names
	events := startEventLog(cli, h)

	// S1's namespace watch: once armed, its loop waits in StreamEnded
	// until released.
	var (
		mu       sync.Mutex
		armed    bool
		inHook   = make(chan struct{})
		release  = make(chan struct{})
		waiting  = make(chan struct{}, 1)
		waiterOn string
		live     = make(chan struct{}, 8)
	)
	hooks := &core.Hooks{
		StreamEnded: func() {
			mu.Lock()
			a := armed
			armed = false
			mu.Unlock()
			if a {
				close(inHook)
				<-release
			}
		},
		Established: func() {
			select {
			case live <- struct{}{}:
			default:
			}
		},
		BeforeWait: func(key string) {
			mu.Lock()
			on := waiterOn != "" && strings.HasPrefix(key, waiterOn)
			mu.Unlock()
			if on {
				waiting <- struct{}{}
			}
		},
	}
	s1, err := session.New(cli, session.WithTTL(cfg.TTL), config.Hooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := session.New(cli, session.WithTTL(cfg.TTL))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	a, b, c := r.name("mutex", "m0"), r.name("mutex", "m1"), r.name("mutex", "m3")
	ctx := context.Background()
	lock := func(s *session.Session, n NameInfo, who string, d time.Duration) (*mutex.Lock, error) {
		m, err := mutex.New(cli, n.Name, r.opts(n, s, who)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		lctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		start := now()
		l, err := m.Lock(lctx)
		var hd handle
		if err == nil {
			hd = l
		}
		r.took(who, "mutex.Lock", n, start, hd, err, false)
		return l, err
	}
	unlock := func(who string, n NameInfo, l *mutex.Lock) {
		start := now()
		r.released(who, n, l, start, l.Unlock(ctx))
	}

	// S1 holds A once and lets go: its watch stops, its loop held ending.
	mu.Lock()
	armed = true
	mu.Unlock()
	la, err := lock(s1, a, "s1.a", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	etcdtest.Within(t, live, 5*time.Second, "the session's watch")
	unlock("s1.a", a, la)
	etcdtest.Within(t, inHook, 5*time.Second, "the stopped stream's end")

	// S2 holds B; S1 waits for B; S2 lets go once S1 waits.
	lb, err := lock(s2, b, "s2.b", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	waiterOn = b.Prefix
	mu.Unlock()
	const wait = 4 * time.Second
	waited := make(chan error, 1)
	go func() {
		l, err := lock(s1, b, "s1.waiter", wait)
		if err == nil {
			unlock("s1.waiter", b, l)
		}
		waited <- err
	}()
	<-waiting
	unlock("s2.b", b, lb)
	// The waiter follows the stream marked live (a moment after its
	// wait began), then S1 holds C: a fresh loop.
	time.Sleep(100 * time.Millisecond)
	lc, err := lock(s1, c, "s1.c", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	werr := <-waited
	unlock("s1.c", c, lc)

	if err := events.finish(ctx, h); err != nil {
		t.Fatal(err)
	}
	h.Settled = now()
	rep := newReport(h)
	checkFreeLock(h, r.cfg, rep)
	var found []Violation
	for _, v := range rep.Violations {
		if v.Check == "free-lock" {
			found = append(found, v)
		}
	}
	t.Logf("waiter: %v; free-lock outcomes %v; violations %+v", werr, rep.Free, found)
	switch {
	case werr != nil && len(found) == 0:
		t.Errorf("the waiter did not hold (%v) although the lock was free, and the free-lock check found nothing", werr)
	case werr != nil && !strings.Contains(found[0].Msg, "s1.waiter"):
		t.Errorf("the free-lock violation does not name the waiter: %s", found[0].Msg)
	case werr == nil && len(found) > 0:
		t.Errorf("the waiter held, yet the free-lock check reports %+v", found)
	}
}
