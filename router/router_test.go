package router_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/router"
)

// lock takes name in namespace ns through r; the lock is released and the
// mutex closed with the test.
func lock(t *testing.T, r *router.Router, ns, name string) *mutex.Lock {
	t.Helper()
	ctx := etcdtest.Context(t, 10*time.Second)
	cli, err := r.Client(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mutex.New(cli, name, mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("lock %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	return l
}

func TestLocksOfEachNamespaceLandOnItsCluster(t *testing.T) {
	r := newRouter(t, twoClusters(srvA, srvB))
	pay := lock(t, r, "payments", "settle-land")
	job := lock(t, r, "jobs", "nightly-land")

	a, b := srvA.Client(t), srvB.Client(t)
	if got := etcdtest.Keys(t, a, "/payments/v1/lock/settle-land/"); !slices.Equal(got, []string{pay.Key()}) {
		t.Errorf("cluster a holds %v under payments, want [%s]", got, pay.Key())
	}
	if got := etcdtest.Keys(t, b, "/jobs/v1/lock/nightly-land/"); !slices.Equal(got, []string{job.Key()}) {
		t.Errorf("cluster b holds %v under jobs, want [%s]", got, job.Key())
	}
	if got := etcdtest.Keys(t, a, "/jobs/"); len(got) != 0 {
		t.Errorf("cluster a holds jobs keys %v", got)
	}
	if got := etcdtest.Keys(t, b, "/payments/"); len(got) != 0 {
		t.Errorf("cluster b holds payments keys %v", got)
	}
}

func TestClientIsSharedAndClosedByClose(t *testing.T) {
	r, err := router.New(twoClusters(srvA, srvB))
	if err != nil {
		t.Fatal(err)
	}
	opened := map[string]int{}
	var mu sync.Mutex
	router.SetDialHook(r, func(c string) { mu.Lock(); opened[c]++; mu.Unlock() })
	ctx := etcdtest.Context(t, 10*time.Second)
	clis := make([]*clientv3.Client, 8)
	var wg sync.WaitGroup
	for i := range clis {
		wg.Go(func() {
			cli, err := r.Client(ctx, "payments")
			if err != nil {
				t.Error(err)
			}
			clis[i] = cli
		})
	}
	wg.Wait()
	for _, c := range clis[1:] {
		if c != clis[0] {
			t.Fatal("concurrent callers got different clients")
		}
	}
	if other, err := r.Client(ctx, "jobs"); err != nil || other == clis[0] {
		t.Fatalf("jobs shares payments' client or failed: %v", err)
	}
	if opened["a"] != 1 || opened["b"] != 1 {
		t.Fatalf("connections opened %v, want one per cluster", opened)
	}
	if _, err := clis[0].Get(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if clis[0].Ctx().Err() == nil {
		t.Fatal("a client is still open after Close")
	}
	if _, err := r.Client(ctx, "payments"); !errors.Is(err, router.ErrClosed) {
		t.Fatalf("Client after Close = %v, want ErrClosed", err)
	}
	if _, err := r.ClusterClient(ctx, "b"); !errors.Is(err, router.ErrClosed) {
		t.Fatalf("ClusterClient after Close = %v, want ErrClosed", err)
	}
}

func TestClusterClientNamesTheCluster(t *testing.T) {
	r := newRouter(t, twoClusters(srvA, srvB))
	ctx := etcdtest.Context(t, 10*time.Second)
	byName, err := r.ClusterClient(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	byNS, err := r.Client(ctx, "jobs")
	if err != nil || byNS != byName {
		t.Fatalf("Client(jobs) is not cluster b's client: %v", err)
	}
	if _, err := r.ClusterClient(ctx, "c"); !errors.Is(err, router.ErrUnknownCluster) {
		t.Fatalf("ClusterClient(c) = %v, want ErrUnknownCluster", err)
	}
}

// silentListener accepts connections and never answers: an etcd that does
// not respond.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// An opening that hangs on one cluster (authentication against an etcd
// that does not answer) holds up neither the other clusters nor callers
// whose context ends.
func TestOpeningOneClusterNeverWaitsForAnother(t *testing.T) {
	m := router.Map{Clusters: []router.Cluster{
		{Name: "dead", Endpoints: []string{silentListener(t)}, Namespaces: []string{"payments"},
			Credentials: &router.Credentials{User: "u", PasswordEnv: "PW"}},
		{Name: "b", Endpoints: srvB.Endpoints(), Namespaces: []string{"jobs"}},
	}}
	r, err := router.New(m, router.WithDialTimeout(3*time.Second), router.WithGetenv(func(string) string { return "pw" }))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dialing := make(chan struct{})
	router.SetDialHook(r, func(c string) {
		if c == "dead" {
			close(dialing)
		}
	})
	first := make(chan error, 1)
	go func() {
		_, err := r.Client(context.Background(), "payments")
		first <- err
	}()
	etcdtest.Within(t, dialing, 5*time.Second, "the opening of cluster dead")

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := r.Client(ctx, "payments"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second caller of dead = %v, want its context's deadline", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("second caller returned after %v, its context ended after 200ms", d)
	}
	start = time.Now()
	cli, err := r.Client(etcdtest.Context(t, 5*time.Second), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(etcdtest.Context(t, 5*time.Second), "x"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("cluster b answered after %v while dead was opening", d)
	}
	select {
	case err := <-first:
		t.Fatalf("the opening of dead ended early: %v", err)
	default:
	}
	if err := <-first; err == nil || !strings.Contains(err.Error(), `cluster "dead"`) {
		t.Fatalf("opening of dead = %v, want an error naming the cluster", err)
	}
}

func TestEmptyPasswordVariableIsAnError(t *testing.T) {
	m := router.Map{Clusters: []router.Cluster{{Name: "a", Endpoints: srvA.Endpoints(), Namespaces: []string{"payments"},
		Credentials: &router.Credentials{User: "u", PasswordEnv: "NOT_SET"}}}}
	r := newRouter(t, m, router.WithGetenv(func(string) string { return "" }))
	_, err := r.Client(t.Context(), "payments")
	if err == nil || !strings.Contains(err.Error(), `cluster "a": credentials: environment variable NOT_SET is empty`) {
		t.Fatalf("Client = %v, want the empty variable named", err)
	}
}

// cycles runs n Lock/Unlock cycles of one name in ns and returns their
// durations; any failed call fails the test.
func cycles(t *testing.T, m *mutex.Mutex, n int) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		l, err := m.Lock(ctx)
		if err != nil {
			cancel()
			t.Fatalf("cycle %d: Lock: %v", i, err)
		}
		if err := l.Unlock(ctx); err != nil {
			cancel()
			t.Fatalf("cycle %d: Unlock: %v", i, err)
		}
		cancel()
		out = append(out, time.Since(start))
	}
	return out
}

func p99(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

// Cluster a stops: jobs' cycles on b go on with no failed call and none
// waiting on a.
func TestStoppedClusterLeavesTheOthersWorking(t *testing.T) {
	a := etcdtest.Start(t, etcdtest.Config{Name: "a-stop"})
	r := newRouter(t, twoClusters(a, srvB), router.WithDialTimeout(time.Second))
	ctx := etcdtest.Context(t, 60*time.Second)
	payCli, err := r.Client(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}
	pay, err := mutex.New(payCli, "settle-stop", mutex.WithNamespace("payments"), mutex.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer pay.Close()
	payLock, err := pay.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	jobsCli, err := r.Client(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := mutex.New(jobsCli, "nightly-stop", mutex.WithNamespace("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer jobs.Close()

	const n = 200
	cycles(t, jobs, 20) // warm up the session
	up := cycles(t, jobs, n)

	a.Stop()
	etcdtest.Within(t, payLock.Done(), 10*time.Second, "payments' holder learning that cluster a is gone")
	// payments' own calls fail, bounded by their contexts...
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if _, err := pay.Lock(pctx); err == nil {
		t.Fatal("Lock on the stopped cluster succeeded")
	}
	cancel()
	// ...while one goroutine keeps trying, jobs' cycles go on.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, _ = pay.TryLock(c)
			cancel()
		}
	})
	down := cycles(t, jobs, n)
	close(stop)
	wg.Wait()

	pu, pd := p99(up), p99(down)
	t.Logf("FIGURE jobs cycle p99 on b: %v with a up, %v with a down (%d cycles each)", pu, pd, n)
	// A call of jobs that waited on a would wait out the dial timeout to a
	// (1 s, above) or fail: every cycle completed, none that long. (The
	// p99s are figures, not a bound: on a shared 2-core machine under the
	// race detector they move by several times between runs.)
	if worst := slices.Max(down); worst >= time.Second {
		t.Fatalf("a jobs cycle took %v with cluster a down: as long as a dial to a", worst)
	}
}

// The fencing story across a namespace move: payments moves from a
// (whose revisions are far ahead) to b. The holder that acquired on a is
// rejected by the guard once b's holder has written, with composed
// tokens; with raw tokens the guard would reject the new holder instead.
func TestHolderOnTheOldClusterIsRejectedAfterTheMove(t *testing.T) {
	a := etcdtest.Start(t, etcdtest.Config{Name: "a-move"})
	b := etcdtest.Start(t, etcdtest.Config{Name: "b-move"})
	ctx := etcdtest.Context(t, 30*time.Second)
	// a's revisions run ahead of b's, as an old busy cluster's do.
	ac := a.Client(t)
	for i := range 50 {
		if _, err := ac.Put(ctx, fmt.Sprintf("/other/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	before := router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: a.Endpoints(), Epoch: 1, Namespaces: []string{"payments"}},
		{Name: "b", Endpoints: b.Endpoints(), Epoch: 2},
	}}
	after := router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: a.Endpoints(), Epoch: 1},
		{Name: "b", Endpoints: b.Endpoints(), Epoch: 2, Namespaces: []string{"payments"}},
	}}
	if err := router.CheckMove(before, after); err != nil {
		t.Fatal(err)
	}
	old := newRouter(t, before)
	zombie := lock(t, old, "payments", "ledger")
	zombieTok, err := old.Token("payments", zombie.Token())
	if err != nil {
		t.Fatal(err)
	}

	// The move: the map switches; the old holder never released (paused).
	moved := newRouter(t, after)
	holder := lock(t, moved, "payments", "ledger")
	holderTok, err := moved.Token("payments", holder.Token())
	if err != nil {
		t.Fatal(err)
	}
	if holder.Token() >= zombie.Token() {
		t.Fatalf("precondition: b's raw token %d should be below a's %d", holder.Token(), zombie.Token())
	}

	guard := fencing.NewMemoryGuard()
	if err := guard.Admit(ctx, "ledger", holderTok); err != nil {
		t.Fatalf("the new holder is rejected: %v", err)
	}
	err = guard.Admit(ctx, "ledger", zombieTok)
	var stale *fencing.StaleError
	if !errors.Is(err, fencing.ErrStale) || !errors.As(err, &stale) || stale.Highest != holderTok {
		t.Fatalf("the old cluster's holder: Admit = %v, want ErrStale below %d", err, holderTok)
	}

	// The same with raw tokens lets the zombie through: why tokens carry
	// the epoch.
	raw := fencing.NewMemoryGuard()
	if err := raw.Admit(ctx, "ledger", holder.Token()); err != nil {
		t.Fatal(err)
	}
	if err := raw.Admit(ctx, "ledger", zombie.Token()); err != nil {
		t.Fatalf("raw tokens: the zombie was rejected (%v); the test no longer shows the problem", err)
	}
}

func TestCheckMove(t *testing.T) {
	c := func(name string, epoch uint16, ns ...string) router.Cluster {
		return router.Cluster{Name: name, Endpoints: []string{name + ":1"}, Epoch: epoch, Namespaces: ns}
	}
	pin := func(c router.Cluster, id string) router.Cluster { c.ID = id; return c }
	retire := func(m router.Map, ns, cluster string, epoch uint16) router.Map {
		m.Retired = append(m.Retired, router.Retired{Namespace: ns, Default: ns == "", Cluster: cluster, Epoch: epoch})
		return m
	}
	mk := func(dflt string, cs ...router.Cluster) router.Map { return router.Map{Default: dflt, Clusters: cs} }
	for _, tt := range []struct {
		name       string
		prev, next router.Map
		want       string // empty: allowed
	}{
		{"to a greater epoch", mk("", c("a", 1, "p"), c("b", 2)), mk("", c("a", 1), c("b", 2, "p")), ""},
		{"to an equal epoch", mk("", c("a", 1, "p"), c("b", 1)), mk("", c("a", 1), c("b", 1, "p")),
			`namespace "p" moves from cluster "a" (epoch 1) to cluster "b" (epoch 1): the new epoch must be greater than 1`},
		{"epoch goes down in place", mk("", c("a", 3, "p")), mk("", c("a", 2, "p")),
			`namespace "p" stays on cluster "a" whose epoch goes down from 3 to 2`},
		{"epoch goes up in place", mk("", c("a", 3, "p")), mk("", c("a", 4, "p")), ""},
		{"out of the default", mk("a", c("a", 1), c("b", 1)), mk("a", c("a", 1), c("b", 1, "p")),
			`namespace "p" moves from cluster "a" (epoch 1) to cluster "b" (epoch 1)`},
		{"into the default", mk("b", c("a", 1, "p"), c("b", 2)), mk("b", c("a", 1), c("b", 2)), ""},
		{"default changes", mk("a", c("a", 1), c("b", 1)), mk("b", c("a", 1), c("b", 1)),
			`the default moves from cluster "a" (epoch 1) to cluster "b" (epoch 1)`},
		{"new namespace", mk("", c("a", 1)), mk("", c("a", 1, "p")), ""},
		// Identity: a name repointed at another etcd cluster is a move.
		{"same name, new identity, same epoch", mk("", pin(c("a", 1, "p"), "a1")), mk("", pin(c("a", 1, "p"), "b2")),
			`namespace "p" moves from cluster "a" (epoch 1, etcd cluster 00000000000000a1) to cluster "a" (epoch 1, etcd cluster 00000000000000b2) (the name "a" now means another etcd cluster): the new epoch must be greater than 1`},
		{"same name, new identity, new epoch", mk("", pin(c("a", 1, "p"), "a1")), mk("", pin(c("a", 2, "p"), "b2")), ""},
		{"pin dropped", mk("", pin(c("a", 1, "p"), "a1")), mk("", c("a", 1, "p")),
			`namespace "p" stays on cluster "a", which no longer pins its identity (it pinned 00000000000000a1)`},
		{"first pin", mk("", c("a", 1, "p")), mk("", pin(c("a", 1, "p"), "a1")), ""},
		{"renamed, same identity", mk("", pin(c("a", 1, "p"), "a1")), mk("", pin(c("z", 1, "p"), "a1")), ""},
		{"default repointed", mk("a", pin(c("a", 1), "a1")), mk("a", pin(c("a", 1), "b2")),
			`the default moves from cluster "a" (epoch 1, etcd cluster 00000000000000a1) to cluster "a" (epoch 1, etcd cluster 00000000000000b2)`},
		// History: removal must be recorded, and kept, and a re-added
		// namespace is ordered after its record.
		{"removed without a record", mk("", c("a", 3, "p"), c("b", 1, "q")), mk("", c("b", 1, "q")),
			`namespace "p" is no longer served (it was on cluster "a" (epoch 3)): add it to the next map's retired list with cluster "a" and epoch 3`},
		{"removed with a record", mk("", c("a", 3, "p"), c("b", 1, "q")), retire(mk("", c("b", 1, "q")), "p", "a", 3), ""},
		{"record below the last epoch", mk("", c("a", 3, "p"), c("b", 1, "q")), retire(mk("", c("b", 1, "q")), "p", "a", 2),
			`namespace "p" is retired from cluster "a" (epoch 2), below the epoch 3 of cluster "a" (epoch 3)`},
		{"record dropped", retire(mk("", c("b", 1, "q")), "p", "a", 3), mk("", c("b", 1, "q")),
			`namespace "p" was retired from cluster "a" (epoch 3), and the next map drops that record`},
		{"re-added at a lower epoch", retire(mk("", c("b", 1, "q")), "p", "a", 3), mk("", c("b", 2, "q", "p")),
			`namespace "p" moves from retired from cluster "a" (epoch 3) to cluster "b" (epoch 2): the new epoch must be greater than 3`},
		{"re-added above", retire(mk("", c("b", 1, "q")), "p", "a", 3), mk("", c("b", 4, "q", "p")), ""},
		{"default removed without a record", mk("a", c("a", 2)), mk("", c("a", 2)), `the default is no longer served`},
		{"default re-added lower, and its namespaces", retire(mk("", c("a", 2)), "", "a", 5), mk("b", c("a", 2), c("b", 3, "p")),
			`the default moves from retired from cluster "a" (epoch 5) to cluster "b" (epoch 3)`},
		{"a namespace the retired default may have served", retire(mk("", c("a", 2)), "", "a", 5), mk("", c("a", 2), c("b", 3, "p")),
			`namespace "p" moves from retired from cluster "a" (epoch 5) to cluster "b" (epoch 3)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := router.CheckMove(tt.prev, tt.next)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, router.ErrEpochOrder) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckMove = %v, want ErrEpochOrder with %q", err, tt.want)
			}
		})
	}
}

func TestTokenOrdersByEpochThenRevision(t *testing.T) {
	a, err := router.Token(1, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	b, err := router.Token(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !(b > a) {
		t.Fatalf("epoch 2 revision 1 (%d) is not above epoch 1 revision 2^40 (%d)", b, a)
	}
	if z, _ := router.Token(0, 42); z != 42 {
		t.Fatalf("epoch 0 changes the token: %d", z)
	}
	if e, rev := router.SplitToken(b); e != 2 || rev != 1 {
		t.Fatalf("SplitToken = %d, %d", e, rev)
	}
	top, err := router.Token(router.MaxEpoch, 1<<router.RevisionBits-1)
	if err != nil || top <= 0 {
		t.Fatalf("the greatest token %d is not positive: %v", top, err)
	}
	for _, bad := range []fencing.Token{0, -1, 1 << router.RevisionBits} {
		if _, err := router.Token(1, bad); !errors.Is(err, router.ErrTokenRange) {
			t.Errorf("Token(1, %d) = %v, want ErrTokenRange", bad, err)
		}
	}
}
