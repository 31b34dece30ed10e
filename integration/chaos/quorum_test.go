package chaos_test

import (
	"context"
	"errors"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// runLog records the terms of singletons under election.Run.
type runLog struct {
	mu    sync.Mutex
	terms map[string][]runTerm // by election name
}

type runTerm struct {
	who        string
	start, end time.Time
}

// runSingleton keeps who campaigning in name under election.Run until the
// test ends; its work holds leadership until its context ends.
func runSingleton(t *testing.T, c *cluster.Cluster, tr *tracker, log *runLog, name, who string, ttl time.Duration) {
	t.Helper()
	e, err := election.New(c.Client(t), name, election.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, who, func(ctx context.Context, term *election.Term) error {
			tr.acquired(name, who, int64(term.Token()), term.Done())
			log.mu.Lock()
			log.terms[name] = append(log.terms[name], runTerm{who: who, start: time.Now()})
			i := len(log.terms[name]) - 1
			log.mu.Unlock()
			<-ctx.Done()
			log.mu.Lock()
			log.terms[name][i].end = time.Now()
			log.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run of %s in %s: %v", who, name, err)
		}
		_ = e.Close()
	})
}

// leading returns the live terms of name (no end yet) and the first term
// begun after since.
func (l *runLog) leading(name string, since time.Time) (live []runTerm, first runTerm) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rt := range l.terms[name] {
		if rt.end.IsZero() {
			live = append(live, rt)
		}
		if rt.start.After(since) && first.start.IsZero() {
			first = rt
		}
	}
	return live, first
}

// TestQuorumLostLongerThanTTL stops two of three members for twice the
// TTL while a lock is held and singletons run under election.Run, one of
// them behind a leader process that is SIGKILLed during the outage. Every
// holder's Context must end before quorum returns; afterwards the
// singletons lead again by themselves and no key of a lost lease remains.
// A new etcd leader renews every lease for a full TTL when it takes
// office, so the crashed leader's key outlives the outage by a TTL: the
// failover that costs is measured.
func TestQuorumLostLongerThanTTL(t *testing.T) {
	c := cluster.Start(t, 3)
	const ttl = 2 * time.Second
	admin := c.Client(t)
	tr := newTracker()
	log := &runLog{terms: make(map[string][]runTerm)}

	m, err := mutex.New(c.Client(t), "quorum-lock", mutex.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	l, err := m.Lock(ctxTimeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lockEnded := whenEnded(l.Context())

	singles := map[string]int{"quorum-single": 1, "quorum-pair": 2}
	for name, n := range singles {
		for i := range n {
			runSingleton(t, c, tr, log, name, "run-"+strconv.Itoa(i), ttl)
		}
	}
	// The crashed leader: a process leading "quorum-crash", a singleton
	// under Run waiting behind it.
	ch := startChild(t, "leader", map[string]string{
		endpointsEnv: strings.Join(c.Endpoints(), ","), nameEnv: "quorum-crash", ttlEnv: ttl.String(),
	})
	_, crashKey := ch.held(30 * time.Second)
	crashLease, err := strconv.ParseInt(path.Base(crashKey), 16, 64)
	if err != nil {
		t.Fatalf("lease of %s: %v", crashKey, err)
	}
	runSingleton(t, c, tr, log, "quorum-crash", "run-behind", ttl)
	etcdtest.WaitKeys(t, admin, "/baton/v1/election/quorum-crash/", 2)
	etcdtest.WaitKeys(t, admin, "/baton/v1/election/quorum-pair/", 2)
	var holders []*endedAt
	for name := range singles {
		deadline := time.Now().Add(10 * time.Second)
		for live, _ := log.leading(name, time.Time{}); len(live) != 1; live, _ = log.leading(name, time.Time{}) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d leaders, want 1", name, len(live))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// The outage: the leader and a follower go; the leader process crashes.
	ctx := ctxTimeout(t, 60*time.Second)
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	down := []*cluster.Member{lead}
	for _, mb := range c.Members() {
		if mb != lead && len(down) < 2 {
			down = append(down, mb)
		}
	}
	killed := time.Now()
	for _, mb := range down {
		mb.Kill()
	}
	ch.signal(syscall.SIGKILL)
	holders = append(holders, lockEnded)
	log.mu.Lock()
	liveAtKill := 0
	for _, terms := range log.terms {
		for _, rt := range terms {
			if rt.end.IsZero() {
				liveAtKill++
			}
		}
	}
	log.mu.Unlock()

	// Stay down for twice the TTL.
	time.Sleep(time.Until(killed.Add(2 * ttl)))
	restoring := time.Now()
	var stillLive []string
	if lockEnded.Time().IsZero() {
		stillLive = append(stillLive, "the lock's holder")
	}
	for name := range singles {
		if live, _ := log.leading(name, time.Time{}); len(live) > 0 {
			stillLive = append(stillLive, name+"'s leader")
		}
	}
	if len(stillLive) > 0 {
		t.Errorf("Contexts still live when quorum returned: %v", stillLive)
	}
	if err := c.Restart(down...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	ttlLeft := "gone"
	if resp, err := admin.TimeToLive(ctx, clientv3.LeaseID(crashLease)); err == nil && resp.TTL > 0 {
		ttlLeft = strconv.FormatInt(resp.TTL, 10) + "s"
	}

	// The singletons lead again by themselves.
	names := []string{"quorum-single", "quorum-pair", "quorum-crash"}
	relead := make(map[string]time.Duration)
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range names {
		for {
			if _, first := log.leading(name, restoring); !first.start.IsZero() {
				relead[name] = first.start.Sub(back)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no leader within 30 s of quorum's return", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// No key of a lost lease remains: each prefix holds only live
	// candidates, and the lock's, none.
	etcdtest.WaitKeys(t, admin, "/baton/v1/lock/quorum-lock/", 0)
	keysGone := time.Since(back)
	etcdtest.WaitKeys(t, admin, "/baton/v1/election/quorum-single/", 1)
	etcdtest.WaitKeys(t, admin, "/baton/v1/election/quorum-pair/", 2)
	etcdtest.WaitKeys(t, admin, "/baton/v1/election/quorum-crash/", 1)
	tr.check(t)
	if err := l.Unlock(ctx); !errors.Is(err, mutex.ErrNotHeld) {
		t.Errorf("Unlock after the outage = %v, want ErrNotHeld", err)
	}

	var ends []string
	for _, e := range holders {
		ends = append(ends, e.Time().Sub(killed).Round(time.Millisecond).String())
	}
	figure(t, "TTL %v; 2 of 3 members down %v; lock holder's Context ended %s after the kill; %d terms live at the kill, all ended before quorum returned",
		ttl, restoring.Sub(killed).Round(time.Millisecond), strings.Join(ends, ","), liveAtKill)
	figure(t, "after quorum returned: crashed leader's lease had %s left (renewed by the new etcd leader); lead again after: single %v, pair %v, behind the crashed leader %v; lost lock's key gone after %v",
		ttlLeft, relead["quorum-single"].Round(time.Millisecond), relead["quorum-pair"].Round(time.Millisecond),
		relead["quorum-crash"].Round(time.Millisecond), keysGone.Round(time.Millisecond))
}
