package shard_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/shard"
)

// srv is the package's one etcd server process; tests share it and use distinct
// group names.
var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }

func client(t *testing.T) *clientv3.Client {
	t.Helper()
	return srv.Client(t)
}

func newGroup(t *testing.T, cli *clientv3.Client, name string, count int, opts ...shard.Option) *shard.Group {
	t.Helper()
	g, err := shard.New(cli, name, count, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// member is one Run in the background, recording what its fn saw.
type member struct {
	name   string
	g      *shard.Group
	cancel context.CancelFunc
	done   chan error

	mu    sync.Mutex
	owned map[int]*shard.Shard
	log   *eventLog
}

// eventLog records, in one order for every member of a test, when each
// fn started and when its Context ended.
type eventLog struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	kind   string // "start", "ended", "return"
	member string
	shard  int
	token  int64
	cause  error
	at     time.Time
}

func (l *eventLog) add(e event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.at = time.Now()
	l.events = append(l.events, e)
}

func (l *eventLog) snapshot() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event(nil), l.events...)
}

// work is the fn of a member: it records its start, waits for its
// Context (then for drain, if set), and records its end.
func (m *member) work(drain func(ctx context.Context, s *shard.Shard)) func(ctx context.Context, s *shard.Shard) error {
	return func(ctx context.Context, s *shard.Shard) error {
		m.mu.Lock()
		m.owned[s.ID()] = s
		m.mu.Unlock()
		m.log.add(event{kind: "start", member: m.name, shard: s.ID(), token: int64(s.Token())})
		<-ctx.Done()
		m.log.add(event{kind: "ended", member: m.name, shard: s.ID(), token: int64(s.Token()), cause: context.Cause(ctx)})
		if drain != nil {
			drain(ctx, s)
		}
		m.mu.Lock()
		delete(m.owned, s.ID())
		m.mu.Unlock()
		m.log.add(event{kind: "return", member: m.name, shard: s.ID(), token: int64(s.Token())})
		return ctx.Err()
	}
}

func start(t *testing.T, g *shard.Group, name string, log *eventLog, drain func(ctx context.Context, s *shard.Shard)) *member {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, g: g, cancel: cancel, done: make(chan error, 1), owned: map[int]*shard.Shard{}, log: log}
	go func() { m.done <- g.Run(ctx, name, m.work(drain)) }()
	t.Cleanup(func() { m.stop(t) })
	return m
}

// stop ends the member's Run and waits for it.
func (m *member) stop(t *testing.T) error {
	t.Helper()
	m.cancel()
	select {
	case err, ok := <-m.done:
		if ok {
			close(m.done)
			return err
		}
		return nil
	case <-time.After(30 * time.Second):
		t.Fatalf("member %s: Run did not return within 30 s of its ctx ending", m.name)
		return nil
	}
}

func (m *member) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owned)
}

// settled waits, by observing, until the group has exactly the members
// given, each shard owned by one of them and every member owning
// floor(n/m) or ceil(n/m); it returns that state.
func settled(t *testing.T, g *shard.Group, members ...string) shard.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last shard.State
	for st := range g.Observe(ctx) {
		last = st
		if balanced(st, members) {
			return st
		}
	}
	dumpGroup(t, g)
	t.Fatalf("group never settled over %v; last state: members %v, owners %v", members, last.Members, counts(last))
	return last
}

// dumpGroup logs what etcd holds under g's prefix and the stacks of the
// goroutines in baton's code, for a test that never saw the group settle:
// a stuck acquisition or loop shows where it waits.
func dumpGroup(t *testing.T, g *shard.Group) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := srv.Client(t).Get(ctx, g.Prefix(), clientv3.WithPrefix())
	if err != nil {
		t.Logf("dump: read: %v", err)
	} else {
		t.Logf("dump: etcd at revision %d under %s:", resp.Header.Revision, g.Prefix())
		for _, kv := range resp.Kvs {
			t.Logf("  %s = %q create %d mod %d lease %x", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Lease)
		}
	}
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		ours := strings.Contains(g, "batonhq/baton/internal/") || strings.Contains(g, "batonhq/baton/shard.(")
		if ours && !strings.Contains(g, "baton/internal/etcdtest") {
			t.Logf("dump: goroutine:\n%s", g)
		}
	}
}

func counts(st shard.State) map[string]int {
	c := map[string]int{}
	for _, o := range st.Owners {
		c[o.Member]++
	}
	return c
}

func balanced(st shard.State, members []string) bool {
	if len(st.Members) != len(members) {
		return false
	}
	want := map[string]bool{}
	for _, m := range members {
		want[m] = true
	}
	for _, m := range st.Members {
		if !want[m] {
			return false
		}
	}
	n, m := len(st.Owners), len(members)
	c := counts(st)
	for _, o := range st.Owners {
		if !want[o.Member] {
			return false // unowned, or owned by one not in the group
		}
	}
	for _, name := range members {
		if c[name] != n/m && c[name] != (n+m-1)/m {
			return false
		}
	}
	return true
}
