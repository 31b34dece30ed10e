package compat_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/integration/compat"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// TestLeaderKilledWithLockHeldAndWaiterQueued SIGKILLs the raft leader
// member while a lock is held and a waiter is queued: the cluster elects a
// new leader, the waiter is served only after the holder's Context ended,
// with a greater token, and the killed member rejoins.
func TestLeaderKilledWithLockHeldAndWaiterQueued(t *testing.T) {
	compat.ForEachVersion(t, func(t *testing.T, b compat.Binaries) {
		timed(t, b.Minor)
		c := compat.Start(t, b, compat.Options{})
		const ttl = 5 * time.Second
		hm, err := mutex.New(c.Client(t), "leader-kill", mutex.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hm.Close() })
		wcli := c.Client(t)
		wm, err := mutex.New(wcli, "leader-kill", mutex.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = wm.Close() })
		ctx := ctxFor(t, 90*time.Second)
		held, err := hm.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ended := whenEnded(held.Context())
		got := make(chan acquisition, 1)
		go func() {
			l, err := wm.Lock(ctx)
			got <- acquisition{lock: l, at: time.Now(), err: err}
		}()
		etcdtest.WaitKeys(t, wcli, wm.Prefix(), 2)

		lead, err := c.WaitLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		lead.Kill()
		if _, err := c.WaitLeader(ctx); err != nil {
			t.Fatal(err)
		}
		elected := time.Since(killed)

		// A fenced write tells whether the holder still owns the lock.
		resp, err := held.Txn(ctx).Then(clientv3.OpPut("/compat/leader-kill/fenced", "x")).Commit()
		if err != nil {
			t.Fatalf("fenced write after the failover: %v", err)
		}
		owns := resp.Succeeded
		select {
		case a := <-got:
			if ended.Time().IsZero() || a.at.Before(ended.Time()) {
				t.Fatalf("waiter acquired (err %v) while the holder's Context was live", a.err)
			}
			got <- a
		default:
		}
		if owns && !ended.Time().IsZero() {
			t.Errorf("holder's Context ended (%v) but its fenced write succeeded", context.Cause(held.Context()))
		}
		survived := "kept the lock"
		if !ended.Time().IsZero() {
			survived = "lost it (" + context.Cause(held.Context()).Error() + ")"
		}
		released := time.Now()
		if err := held.Unlock(ctx); err != nil && !errors.Is(err, mutex.ErrNotHeld) {
			t.Fatal(err)
		}
		var a acquisition
		select {
		case a = <-got:
		case <-time.After(3 * ttl):
			t.Fatalf("waiter not served within %v of the release", 3*ttl)
		}
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.lock.Token() <= held.Token() {
			t.Errorf("token %d after %d", a.lock.Token(), held.Token())
		}
		served := a.at.Sub(released)
		// Released before the rejoin: a restarted etcd 3.4 member (pre-vote
		// off by default) can force an election, long enough for two
		// renewals in a row to fail, which by contract ends a hold.
		if err := a.lock.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := lead.Restart(); err != nil {
			t.Fatal(err)
		}
		rejoin := time.Now()
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		figure(t, b.Minor, "TTL %v: new raft leader %s after SIGKILL of the leader; holder %s; waiter served %s after Unlock; killed member serving again %s after restart",
			ttl, ms(elected), survived, ms(served), ms(time.Since(rejoin)))
	})
}

// runLog records the terms of candidates under election.Run.
type runLog struct {
	mu    sync.Mutex
	terms []runTerm
}

type runTerm struct {
	who        string
	token      int64
	start, end time.Time
}

func (l *runLog) snapshot() []runTerm {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]runTerm(nil), l.terms...)
}

// runCandidate keeps who campaigning under Run until the test ends.
func runCandidate(t *testing.T, cli *clientv3.Client, log *runLog, name, who string, ttl time.Duration) {
	t.Helper()
	e, err := election.New(cli, name, election.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, who, func(ctx context.Context, term *election.Term) error {
			log.mu.Lock()
			log.terms = append(log.terms, runTerm{who: who, token: int64(term.Token()), start: time.Now()})
			i := len(log.terms) - 1
			log.mu.Unlock()
			<-ctx.Done()
			log.mu.Lock()
			log.terms[i].end = time.Now()
			log.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run of %s: %v", who, err)
		}
		_ = e.Close()
	})
}

// TestQuorumLossFor20s stops two of three members, the raft leader among
// them, for 20 s while a lock is held with a waiter queued and two
// candidates run for leadership. The holder's and the leader's Contexts
// must end during the outage; afterwards the waiter is served and a
// candidate leads again, without anyone restarting them.
func TestQuorumLossFor20s(t *testing.T) {
	compat.ForEachVersion(t, func(t *testing.T, b compat.Binaries) {
		timed(t, b.Minor)
		c := compat.Start(t, b, compat.Options{})
		const ttl, outage = 5 * time.Second, 20 * time.Second
		hm, err := mutex.New(c.Client(t), "quorum", mutex.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hm.Close() })
		wcli := c.Client(t)
		wm, err := mutex.New(wcli, "quorum", mutex.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = wm.Close() })
		ctx := ctxFor(t, 3*time.Minute)
		held, err := hm.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ended := whenEnded(held.Context())
		// A waiter's Lock fails when its own session is lost during the
		// outage (ErrLost, or a lease grant timing out); the waiter
		// retries, as a caller must.
		got := make(chan acquisition, 1)
		var waitErrs []error
		go func() {
			for {
				l, err := wm.Lock(ctx)
				if err != nil && ctx.Err() == nil {
					waitErrs = append(waitErrs, err)
					time.Sleep(200 * time.Millisecond)
					continue
				}
				got <- acquisition{lock: l, at: time.Now(), err: err}
				return
			}
		}()
		etcdtest.WaitKeys(t, wcli, wm.Prefix(), 2)

		log := &runLog{}
		runCandidate(t, c.Client(t), log, "quorum", "a", ttl)
		etcdtest.WaitKeys(t, wcli, "/baton/v1/election/quorum/", 1)
		runCandidate(t, c.Client(t), log, "quorum", "b", ttl)
		etcdtest.WaitKeys(t, wcli, "/baton/v1/election/quorum/", 2)
		for deadline := time.Now().Add(10 * time.Second); len(log.snapshot()) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no candidate led within 10s")
			}
		}

		lead, err := c.WaitLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		down := []*compat.Member{lead}
		for _, m := range c.Members() {
			if m != lead && len(down) < 2 {
				down = append(down, m)
			}
		}
		killed := time.Now()
		for _, m := range down {
			m.Kill()
		}
		time.Sleep(time.Until(killed.Add(outage)))
		select {
		case a := <-got:
			t.Fatalf("waiter returned during the outage: %v", a.err)
		default:
		}
		if ended.Time().IsZero() {
			t.Error("the holder's Context was still live when quorum returned")
		}
		for _, rt := range log.snapshot() {
			if rt.end.IsZero() {
				t.Errorf("%s's term was still live when quorum returned", rt.who)
			}
		}
		termsBefore := len(log.snapshot())
		for _, m := range down {
			if err := m.Restart(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.WaitLeader(ctx); err != nil {
			t.Fatal(err)
		}
		back := time.Now()

		var a acquisition
		select {
		case a = <-got:
		case <-time.After(60 * time.Second):
			t.Fatal("waiter not served within 60s of quorum's return")
		}
		if a.err != nil {
			t.Fatalf("waiter did not survive the outage: %v", a.err)
		}
		retried := fmt.Sprintf("Lock failed %d times and was retried, first with %q", len(waitErrs), firstErr(waitErrs))
		if len(waitErrs) == 0 {
			retried = "its Lock call waited through"
		}
		if a.lock.Token() <= held.Token() {
			t.Errorf("token %d after %d", a.lock.Token(), held.Token())
		}
		served := a.at.Sub(back)
		var relead time.Duration
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if terms := log.snapshot(); len(terms) > termsBefore {
				relead = terms[termsBefore].start.Sub(back)
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no candidate led again within 60s of quorum's return")
			}
		}
		terms := log.snapshot()
		for i := 1; i < len(terms); i++ {
			if terms[i-1].end.IsZero() || terms[i-1].end.After(terms[i].start) || terms[i].token <= terms[i-1].token {
				t.Errorf("term %+v overlaps or precedes %+v", terms[i-1], terms[i])
			}
		}
		if err := a.lock.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := held.Unlock(ctx); !errors.Is(err, mutex.ErrNotHeld) {
			t.Errorf("Unlock of the lost lock = %v, want ErrNotHeld", err)
		}
		figure(t, b.Minor, "TTL %v, 2 of 3 members down, quorum back %s after the kill: holder's Context ended %s into the outage; after quorum returned the waiter (%s) was served in %s and a candidate led again in %s",
			ttl, ms(back.Sub(killed)), ms(ended.Time().Sub(killed)), retried, ms(served), ms(relead))
	})
}

func firstErr(errs []error) string {
	if len(errs) == 0 {
		return ""
	}
	return errs[0].Error()
}
