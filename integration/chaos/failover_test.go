package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// waitProgress waits until the workload has n successful calls of each op
// that began after since; it fails the test after d. The workload offers
// no event for this, so it polls every 20 ms.
func waitProgress(t *testing.T, w *workload, since time.Time, n int, d time.Duration, ops ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok := true
		for _, op := range ops {
			got := 0
			for _, c := range w.history() {
				if c.op == op && c.err == nil && !c.start.Before(since) {
					got++
				}
			}
			ok = ok && got >= n
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d successful %v within %v\nfailures:\n%s", n, ops, d, joinLines(failures(w.history(), since)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLeaderMemberKilled kills the etcd leader while a lock is held with a
// waiter behind it, a leader leads with a candidate behind it, and
// lockers and campaigners keep going. Locking and elections go on, the
// waiter and the candidate take over when released, and no two holders
// of a name ever overlap.
func TestLeaderMemberKilled(t *testing.T) {
	c := cluster.Start(t, 3)
	const ttl = 5 * time.Second
	admin := c.Client(t)
	tr := newTracker()

	held, waiting := holderAndWaiter(t, c, tr, "kill-held", ttl)
	term, candidate := leaderAndCandidate(t, c, tr, "kill-leading", ttl)
	heldEnded, termEnded := whenEnded(held.Context()), whenEnded(term.Context())
	etcdtest.WaitKeys(t, admin, "/baton/v1/lock/kill-held/", 2)
	etcdtest.WaitKeys(t, admin, "/baton/v1/election/kill-leading/", 2)

	w := startWorkload(t, c, tr, "kill", 3, 3, ttl)
	waitProgress(t, w, time.Time{}, 5, 20*time.Second, "Lock", "Campaign")

	ctx := ctxTimeout(t, 30*time.Second)
	killed := time.Now()
	old, err := c.KillLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	elected := time.Since(killed)
	waitProgress(t, w, killed, 5, 20*time.Second, "Lock", "Campaign")

	// The waiter and the candidate take over on release.
	released := time.Now()
	if err := held.Unlock(ctx); err != nil {
		t.Errorf("Unlock of the lock held across the failover: %v", err)
	}
	var handoff, takeover time.Duration
	select {
	case r := <-waiting:
		if r.err != nil {
			t.Fatalf("waiter's Lock across the failover: %v", r.err)
		}
		handoff = time.Since(released)
	case <-time.After(15 * time.Second):
		t.Fatal("waiter never acquired after the release")
	}
	resigned := time.Now()
	if err := term.Resign(ctx); err != nil {
		t.Errorf("Resign of the term held across the failover: %v", err)
	}
	select {
	case r := <-candidate:
		if r.err != nil {
			t.Fatalf("candidate's Campaign across the failover: %v", r.err)
		}
		takeover = time.Since(resigned)
	case <-time.After(15 * time.Second):
		t.Fatal("candidate never led after the resignation")
	}
	w.stop()
	tr.check(t)

	calls := w.history()
	survived := func(e *endedAt) string {
		if t := e.Time(); !t.IsZero() && t.Before(released) {
			return "lost (" + t.Sub(killed).Round(time.Millisecond).String() + " after the kill)"
		}
		return "kept"
	}
	figure(t, "TTL %v; killed leader %s, %s elected %v later; first Lock begun after the kill done in %v (longest gap between acquisitions %v, %d in all); first Campaign %v (gap %v, %d in all)",
		ttl, old.Name(), lead.Name(), elected.Round(time.Millisecond),
		resumed(calls, "Lock", killed).Round(time.Millisecond), longestGap(calls, "Lock", killed).Round(time.Millisecond), count(calls, "Lock"),
		resumed(calls, "Campaign", killed).Round(time.Millisecond), longestGap(calls, "Campaign", killed).Round(time.Millisecond), count(calls, "Campaign"))
	figure(t, "lock held across the kill %s, handed to its waiter in %v; leadership held across the kill %s, taken by the candidate in %v",
		survived(heldEnded), handoff.Round(time.Millisecond), survived(termEnded), takeover.Round(time.Millisecond))
	if f := failures(calls, killed); len(f) > 0 {
		figure(t, "%d failed calls during the failover:\n%s", len(f), joinLines(f))
	} else {
		figure(t, "no failed call")
	}
	if err := old.Restart(); err != nil {
		t.Fatal(err)
	}
}

// TestMinorityMemberKilled kills a follower while lockers and
// campaigners run: a quorum remains, so no call may fail and no holder
// may lose what it holds.
func TestMinorityMemberKilled(t *testing.T) {
	c := cluster.Start(t, 3)
	const ttl = 5 * time.Second
	w := startWorkload(t, c, newTracker(), "minority", 4, 4, ttl)
	waitProgress(t, w, time.Time{}, 5, 20*time.Second, "Lock", "Campaign")

	ctx := ctxTimeout(t, 30*time.Second)
	followers, err := c.Followers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	followers[0].Kill()
	waitProgress(t, w, killed, 20, 30*time.Second, "Lock", "Campaign")
	w.stop()
	w.tr.check(t)

	calls := w.history()
	figure(t, "killed follower %s; %d Lock and %d Campaign calls succeeded; longest gap between acquisitions across the kill: Lock %v, Campaign %v",
		followers[0].Name(), count(calls, "Lock"), count(calls, "Campaign"),
		longestGap(calls, "Lock", killed).Round(time.Millisecond), longestGap(calls, "Campaign", killed).Round(time.Millisecond))
	// Lock.Txn carries the caller's own operations: on a connection reset
	// mid-call its outcome is unknown and only the caller can decide to
	// retry, so its failures are reported, not counted.
	if f := failures(calls, killed, "Lock.Txn"); len(f) > 0 {
		t.Errorf("%d calls failed with a quorum up:\n%s", len(f), joinLines(f))
	}
	if f := failures(calls, killed); len(f) > 0 {
		figure(t, "failed calls, fenced writes included:\n%s", joinLines(f))
	}
	if err := followers[0].Restart(); err != nil {
		t.Fatal(err)
	}
}

type lockResult struct {
	l   *mutex.Lock
	err error
}

type termResult struct {
	t   *election.Term
	err error
}

// holderAndWaiter takes lock name on one client and starts a Lock of it on
// another, each with its own lease.
func holderAndWaiter(t *testing.T, c *cluster.Cluster, tr *tracker, name string, ttl time.Duration) (*mutex.Lock, <-chan lockResult) {
	t.Helper()
	m1, err := mutex.New(c.Client(t), name, mutex.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m1.Close() })
	l, err := m1.Lock(ctxTimeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tr.acquired(name, "holder", int64(l.Token()), l.Done())
	m2, err := mutex.New(c.Client(t), name, mutex.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m2.Close() })
	ch := make(chan lockResult, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	go func() {
		l2, err := m2.Lock(ctx)
		if err == nil {
			tr.acquired(name, "waiter", int64(l2.Token()), l2.Done())
		}
		ch <- lockResult{l2, err}
	}()
	return l, ch
}

// leaderAndCandidate is holderAndWaiter for an election.
func leaderAndCandidate(t *testing.T, c *cluster.Cluster, tr *tracker, name string, ttl time.Duration) (*election.Term, <-chan termResult) {
	t.Helper()
	e1, err := election.New(c.Client(t), name, election.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e1.Close() })
	term, err := e1.Campaign(ctxTimeout(t, 10*time.Second), "leader")
	if err != nil {
		t.Fatal(err)
	}
	tr.acquired(name, "leader", int64(term.Token()), term.Done())
	e2, err := election.New(c.Client(t), name, election.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e2.Close() })
	ch := make(chan termResult, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	go func() {
		t2, err := e2.Campaign(ctx, "candidate")
		if err == nil {
			tr.acquired(name, "candidate", int64(t2.Token()), t2.Done())
		}
		ch <- termResult{t2, err}
	}()
	return term, ch
}
