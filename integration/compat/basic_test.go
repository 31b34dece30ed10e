package compat_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/integration/compat"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/internal/netproxy"
	"github.com/batonhq/baton/mutex"
)

// TestLocksAndElections runs, on one healthy 3-member cluster per version,
// the scenarios that leave the cluster whole.
func TestLocksAndElections(t *testing.T) {
	compat.ForEachVersion(t, func(t *testing.T, b compat.Binaries) {
		timed(t, b.Minor)
		start := time.Now()
		c := compat.Start(t, b, compat.Options{})
		figure(t, b.Minor, "3-member cluster up in %s", ms(time.Since(start)))
		t.Run("lock-handoff", func(t *testing.T) { lockHandoff(t, b, c) })
		t.Run("election-handover", func(t *testing.T) { electionHandover(t, b, c) })
		t.Run("holder-cut-off", func(t *testing.T) { holderCutOff(t, b, c) })
		t.Run("etcdctl-lock", func(t *testing.T) { etcdctlLock(t, b, c) })
		t.Run("etcdctl-elect", func(t *testing.T) { etcdctlElect(t, b, c) })
	})
}

type acquisition struct {
	i    int
	lock *mutex.Lock
	at   time.Time
	err  error
}

// lockHandoff queues contenders behind a holder and releases one after the
// other: each is served in queue order with a greater token.
func lockHandoff(t *testing.T, b compat.Binaries, c *compat.Cluster) {
	cli := c.Client(t)
	const n = 5
	ms := make([]*mutex.Mutex, n)
	for i := range ms {
		m, err := mutex.New(cli, "handoff", mutex.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		ms[i] = m
	}
	ctx := ctxFor(t, 60*time.Second)
	first, err := ms[0].Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan acquisition, n)
	for i := 1; i < n; i++ {
		go func() {
			l, err := ms[i].Lock(ctx)
			got <- acquisition{i: i, lock: l, at: time.Now(), err: err}
		}()
		// The queue order is the order of the keys' creation.
		etcdtest.WaitKeys(t, cli, ms[0].Prefix(), i+1)
	}
	prev := first
	var hand []time.Duration
	for want := 1; want < n; want++ {
		select {
		case a := <-got:
			t.Fatalf("contender %d acquired (err %v) while %d still held the lock", a.i, a.err, want-1)
		default:
		}
		released := time.Now()
		if err := prev.Unlock(ctx); err != nil {
			t.Fatalf("unlock of holder %d: %v", want-1, err)
		}
		var a acquisition
		select {
		case a = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("contender %d not served within 10s of the release", want)
		}
		if a.err != nil {
			t.Fatalf("contender %d: %v", a.i, a.err)
		}
		if a.i != want {
			t.Fatalf("contender %d acquired, want %d (queue order)", a.i, want)
		}
		if a.lock.Token() <= prev.Token() {
			t.Fatalf("token %d after %d: not increasing", a.lock.Token(), prev.Token())
		}
		hand = append(hand, a.at.Sub(released))
		prev = a.lock
	}
	if err := prev.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	figure(t, b.Minor, "%d holders served in queue order, tokens increasing; handover after Unlock %s", n, spread(hand))
}

type leadRecord struct {
	value string
	token int64
	at    time.Time
}

// electionHandover runs three candidates under Run and stops the leader's
// Run twice: the next candidate leads within a round trip, and Observe
// reports the leaders in order.
func electionHandover(t *testing.T, b compat.Binaries, c *compat.Cluster) {
	cli := c.Client(t)
	obs, err := election.New(cli, "handover")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = obs.Close() })
	octx, ocancel := context.WithCancel(context.Background())
	observed := make(chan []election.Leader, 1)
	sawLast := make(chan struct{})
	lastSeen := sawLast
	oc := obs.Observe(octx)
	go func() {
		var seen []election.Leader
		for l := range oc {
			if l.Value == "c3" && sawLast != nil {
				close(sawLast)
				sawLast = nil
			}
			seen = append(seen, l)
		}
		observed <- seen
	}()

	leads := make(chan leadRecord, 3)
	values := []string{"c1", "c2", "c3"}
	cancels := make([]context.CancelFunc, len(values))
	dones := make([]chan error, len(values))
	for i, v := range values {
		e, err := election.New(cli, "handover", election.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		cancels[i], dones[i] = cancel, make(chan error, 1)
		go func() {
			dones[i] <- e.Run(ctx, v, func(ctx context.Context, term *election.Term) error {
				leads <- leadRecord{value: v, token: int64(term.Token()), at: time.Now()}
				<-ctx.Done()
				return nil
			})
		}()
		etcdtest.WaitKeys(t, cli, obs.Prefix(), i+1)
	}
	var prev leadRecord
	select {
	case prev = <-leads:
	case <-time.After(10 * time.Second):
		t.Fatal("no leader within 10s")
	}
	if prev.value != "c1" {
		t.Fatalf("first leader %q, want c1", prev.value)
	}
	var hand []time.Duration
	for i := 1; i < len(values); i++ {
		stopped := time.Now()
		cancels[i-1]()
		var next leadRecord
		select {
		case next = <-leads:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not lead within 10s of %s's Run ending", values[i], values[i-1])
		}
		if err := <-dones[i-1]; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run of %s: %v", values[i-1], err)
		}
		if next.value != values[i] || next.token <= prev.token {
			t.Fatalf("after %s (token %d): %s leads with token %d; want %s with a greater token",
				prev.value, prev.token, next.value, next.token, values[i])
		}
		hand = append(hand, next.at.Sub(stopped))
		prev = next
	}
	select {
	case <-lastSeen:
	case <-time.After(10 * time.Second):
		t.Fatal("Observe did not report c3 within 10s of its leading")
	}
	cancels[2]()
	<-dones[2]
	ocancel()
	seen := <-observed
	var order []string
	var last int64
	for _, l := range seen {
		if l.IsZero() || (len(order) > 0 && order[len(order)-1] == l.Value) {
			continue
		}
		if int64(l.Token) <= last {
			t.Errorf("Observe: token %d after %d", l.Token, last)
		}
		last = int64(l.Token)
		order = append(order, l.Value)
	}
	if !slices.Equal(order, values) {
		t.Errorf("Observe reported leaders %v, want %v", order, values)
	}
	figure(t, b.Minor, "Run handover after the leader's Run ended %s; Observe reported %v", spread(hand), order)
}

// holderCutOff blackholes the holder's only connection, to one member,
// while a waiter on another client is queued: the holder's Context must
// end before the waiter acquires.
func holderCutOff(t *testing.T, b compat.Binaries, c *compat.Cluster) {
	pxy, err := netproxy.New(c.Members()[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pxy.Close() })
	hcli, err := clientv3.New(clientv3.Config{Endpoints: []string{pxy.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pxy.Restore(); _ = hcli.Close() })
	cli := c.Client(t, c.Members()[1].Endpoint(), c.Members()[2].Endpoint())

	const ttl = 3 * time.Second
	hm, err := mutex.New(hcli, "cutoff", mutex.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pxy.Restore(); _ = hm.Close() })
	wm, err := mutex.New(cli, "cutoff", mutex.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wm.Close() })
	ctx := ctxFor(t, 60*time.Second)
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
	etcdtest.WaitKeys(t, cli, wm.Prefix(), 2)

	cut := time.Now()
	pxy.Blackhole()
	var a acquisition
	select {
	case a = <-got:
	case <-time.After(3 * ttl):
		t.Fatalf("waiter not served within %v of the cut", 3*ttl)
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	end := ended.Time()
	if end.IsZero() || !end.Before(a.at) {
		t.Fatalf("the cut-off holder's Context was still live when the waiter acquired (ended %v)", end)
	}
	if !errors.Is(context.Cause(held.Context()), mutex.ErrLost) {
		t.Errorf("cause %v, want ErrLost", context.Cause(held.Context()))
	}
	if a.lock.Token() <= held.Token() {
		t.Errorf("token %d after %d", a.lock.Token(), held.Token())
	}
	pxy.Restore()
	if err := a.lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	figure(t, b.Minor, "TTL %v: cut-off holder's Context ended %s after the cut, %s before the waiter acquired (%s after the cut)",
		ttl, ms(end.Sub(cut)), ms(a.at.Sub(end)), ms(a.at.Sub(cut)))
}

// spread formats a sample as min/median/max.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return "min " + ms(s[0]) + " median " + ms(s[len(s)/2]) + " max " + ms(s[len(s)-1])
}
