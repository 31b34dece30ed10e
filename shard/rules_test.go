package shard_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/watch"
	"github.com/batonhq/baton/session"
	"github.com/batonhq/baton/shard"
)

// history returns every event under prefix from revision from until a put
// the call makes at its end (whose revision it returns).
func history(t *testing.T, cli *clientv3.Client, prefix string, from int64) ([]*clientv3.Event, int64) {
	t.Helper()
	ctx := etcdtest.Context(t, 20*time.Second)
	end, err := cli.Put(ctx, prefix+"~end", "")
	if err != nil {
		t.Fatal(err)
	}
	var out []*clientv3.Event
	for wr := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if wr.Err() != nil {
			t.Fatal(wr.Err())
		}
		for _, ev := range wr.Events {
			if string(ev.Kv.Key) == prefix+"~end" {
				return out, end.Header.Revision
			}
			out = append(out, ev)
		}
	}
	t.Fatal("history: the watch ended")
	return nil, 0
}

func rev(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(etcdtest.Context(t, 5*time.Second), "/")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// TestOneOwnerPerShardAtEveryRevision (rule 1): through joins, a leave and
// a lost lease, etcd's history shows at every revision at most one owner
// per shard, each new owner's token above every earlier one's, and every
// fenced write a shard's work made was applied while its writer owned the
// shard.
func TestOneOwnerPerShardAtEveryRevision(t *testing.T) {
	cli := client(t)
	const n, group = 16, "rule1"
	writes := "/rule1-writes/"
	from := rev(t, cli) + 1
	log := &eventLog{}
	write := func(ctx context.Context, s *shard.Shard, what string) {
		_, _ = s.Txn(ctx).Then(clientv3.OpPut(fmt.Sprintf("%s%05d", writes, s.ID()), fmt.Sprintf("%d %s", s.Token(), what))).Commit()
	}
	fn := func(m *member) func(ctx context.Context, s *shard.Shard) error {
		return func(ctx context.Context, s *shard.Shard) error {
			write(ctx, s, m.name+" start")
			<-ctx.Done()
			write(context.WithoutCancel(ctx), s, m.name+" drain") // the key is still ours while fn drains
			return nil
		}
	}
	run := func(name string, opts ...shard.Option) *member {
		g := newGroup(t, cli, group, n, append([]shard.Option{shard.WithTTL(2 * time.Second)}, opts...)...)
		ctx, cancel := context.WithCancel(context.Background())
		m := &member{name: name, g: g, cancel: cancel, done: make(chan error, 1), owned: map[int]*shard.Shard{}, log: log}
		go func() { m.done <- g.Run(ctx, name, fn(m)) }()
		t.Cleanup(func() { m.stop(t) })
		return m
	}
	a := run("a")
	b := run("b")
	settled(t, a.g, "a", "b")
	sess, err := session.New(cli, session.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	c := run("c", shard.WithSession(sess))
	settled(t, a.g, "a", "b", "c")
	d := run("d")
	settled(t, a.g, "a", "b", "c", "d")
	b.stop(t)
	settled(t, a.g, "a", "c", "d")
	// c's lease is revoked under it: its keys go at once, it joins again.
	if _, err := cli.Revoke(etcdtest.Context(t, 5*time.Second), sess.Lease()); err != nil {
		t.Fatal(err)
	}
	settled(t, c.g, "a", "c", "d")
	// Every member stopped before the histories are read: the group's and
	// the writes' are read one after the other, and a write made between
	// the two reads would be judged against owners the first never saw.
	for _, m := range []*member{a, c, d} {
		m.stop(t)
	}

	prefix := shard.GroupPrefix("baton", group)
	evs, _ := history(t, cli, prefix, from)
	wevs, _ := history(t, cli, writes, from)
	queues := make([]map[string]*mvccpb.KeyValue, n)
	for i := range queues {
		queues[i] = map[string]*mvccpb.KeyValue{}
	}
	head := func(s int) *mvccpb.KeyValue {
		var best *mvccpb.KeyValue
		for _, kv := range queues[s] {
			if best == nil || kv.CreateRevision < best.CreateRevision {
				best = kv
			}
		}
		return best
	}
	shardOf := func(key string) int {
		rest, ok := strings.CutPrefix(key, prefix+"s/")
		if !ok {
			return -1
		}
		var id int
		fmt.Sscanf(rest[:5], "%d", &id)
		return id
	}
	highest := make([]int64, n)
	owners := make([]int64, n) // the head's token at the current revision
	changes := 0
	wi := 0
	// Apply the group's events revision by revision, checking the writes
	// of each revision against the owners it left.
	check := func(upTo int64) {
		for ; wi < len(wevs) && wevs[wi].Kv.ModRevision <= upTo; wi++ {
			kv := wevs[wi].Kv
			var id int
			fmt.Sscanf(strings.TrimPrefix(string(kv.Key), writes), "%d", &id)
			var tok int64
			fmt.Sscanf(string(kv.Value), "%d", &tok)
			if owners[id] != tok {
				t.Errorf("revision %d: a write to shard %d carried token %d (%s) while the owner's token was %d", kv.ModRevision, id, tok, kv.Value, owners[id])
			}
		}
	}
	for i := 0; i < len(evs); {
		r := evs[i].Kv.ModRevision
		check(r - 1)
		for ; i < len(evs) && evs[i].Kv.ModRevision == r; i++ {
			ev := evs[i]
			s := shardOf(string(ev.Kv.Key))
			if s < 0 {
				continue
			}
			if ev.Type == mvccpb.DELETE {
				delete(queues[s], string(ev.Kv.Key))
			} else {
				queues[s][string(ev.Kv.Key)] = ev.Kv
			}
		}
		for s := range queues {
			h := head(s)
			tok := int64(0)
			if h != nil {
				tok = h.CreateRevision
			}
			if tok != 0 && tok != owners[s] {
				if tok <= highest[s] {
					t.Errorf("revision %d: shard %d's new owner has token %d, not above an earlier owner's %d", r, s, tok, highest[s])
				}
				highest[s] = tok
				changes++
			}
			owners[s] = tok
		}
	}
	check(1 << 62)
	if changes < n {
		t.Fatalf("only %d owner changes in the history, want at least %d", changes, n)
	}
	if len(wevs) < n {
		t.Fatalf("only %d fenced writes in the history", len(wevs))
	}
}

// TestOldOwnerKnowsFirst (rule 2): a shard's Context ends before another
// member can own it: on a move (held at the release by a hook, while the
// new owner's fn has not started), on Run's ctx ending, and on a loss of
// the lease (the old owner cut off from etcd).
func TestOldOwnerKnowsFirst(t *testing.T) {
	cli := client(t)
	log := &eventLog{}
	const n = 6
	ga := newGroup(t, cli, "rule2", n, shard.WithTTL(2*time.Second))
	var checked atomic.Int32
	var bad []string
	var mu sync.Mutex
	shard.SetHooks(ga, shard.Hooks{Releasing: func(id int) {
		// a's shard is about to be released: its Context has ended, and no
		// one else has started work on it.
		for _, e := range log.snapshot() {
			if e.shard == id && e.member != "a" && e.kind == "start" {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("shard %d: %s started before a released it", id, e.member))
				mu.Unlock()
			}
		}
		checked.Add(1)
	}})
	a := start(t, ga, "a", log, nil)
	settled(t, ga, "a")
	gb := newGroup(t, cli, "rule2", n, shard.WithTTL(2*time.Second))
	b := start(t, gb, "b", log, nil)
	settled(t, ga, "a", "b")
	if checked.Load() == 0 {
		t.Fatal("the release hook never ran")
	}
	mu.Lock()
	for _, s := range bad {
		t.Error(s)
	}
	mu.Unlock()
	a.stop(t) // Run's ctx ending
	settled(t, gb, "b")
	checkEndedBeforeStart(t, log.snapshot(), "a", map[string]error{"moved": shard.ErrMoved, "released": shard.ErrReleased})
	_ = b
}

// TestOldOwnerKnowsFirstOnLoss (rule 2): a member whose traffic is
// blackholed has every shard's Context ended (ErrLost) before the other
// member's work on that shard starts.
func TestOldOwnerKnowsFirstOnLoss(t *testing.T) {
	cli := client(t)
	pcli, proxy := srv.Proxied(t)
	log := &eventLog{}
	const n = 6
	ga := newGroup(t, pcli, "rule2-loss", n, shard.WithTTL(2*time.Second))
	start(t, ga, "a", log, nil)
	settled(t, ga, "a")
	gb := newGroup(t, cli, "rule2-loss", n, shard.WithTTL(2*time.Second))
	start(t, gb, "b", log, nil)
	settled(t, gb, "a", "b")
	proxy.Blackhole()
	settled(t, gb, "b")
	checkEndedBeforeStart(t, log.snapshot(), "a", map[string]error{"moved": shard.ErrMoved, "lost": shard.ErrLost})
	lost := 0
	for _, e := range log.snapshot() {
		if e.member == "a" && e.kind == "ended" && errors.Is(e.cause, shard.ErrLost) {
			lost++
		}
	}
	if lost == 0 {
		t.Fatal("no shard of the cut-off member ended with ErrLost")
	}
	proxy.Restore()
}

// checkEndedBeforeStart: every start of a shard's work by another member
// after old's comes after old's Context ended, with one of the causes.
func checkEndedBeforeStart(t *testing.T, events []event, old string, causes map[string]error) {
	t.Helper()
	ownedBy := map[int]string{}
	endedAt := map[int]bool{}
	moves := 0
	for _, e := range events {
		switch {
		case e.kind == "start":
			if prev := ownedBy[e.shard]; prev == old && !endedAt[e.shard] {
				t.Errorf("shard %d: %s's work started while %s's Context was live", e.shard, e.member, old)
			} else if prev == old {
				moves++
			}
			ownedBy[e.shard], endedAt[e.shard] = e.member, false
		case e.kind == "ended" && e.member == ownedBy[e.shard]:
			endedAt[e.shard] = true
			if e.member == old {
				ok := false
				for _, c := range causes {
					ok = ok || errors.Is(e.cause, c)
				}
				if !ok {
					t.Errorf("shard %d: %s's Context ended with %v", e.shard, old, e.cause)
				}
			}
		}
	}
	if moves == 0 {
		t.Fatalf("no shard moved from %s", old)
	}
}

// TestBalancedOnceMembershipIsStable (rule 3): members that start at once,
// then one more, then one fewer: each time every shard is owned and each
// member owns floor or ceil of N/M, in etcd and in the members' own work.
func TestBalancedOnceMembershipIsStable(t *testing.T) {
	cli := client(t)
	log := &eventLog{}
	const n = 23
	var ms []*member
	names := []string{"m0", "m1", "m2", "m3", "m4"}
	for _, name := range names {
		ms = append(ms, start(t, newGroup(t, cli, "rule3", n, shard.WithTTL(2*time.Second)), name, log, nil))
	}
	settled(t, ms[0].g, names...)
	ms = append(ms, start(t, newGroup(t, cli, "rule3", n, shard.WithTTL(2*time.Second)), "m5", log, nil))
	names = append(names, "m5")
	settled(t, ms[0].g, names...)
	ms[2].stop(t)
	names = append(names[:2:2], names[3:]...)
	st := settled(t, ms[0].g, names...)
	// The members' work agrees with etcd once their loops caught up.
	c := counts(st)
	waitFor(t, func() bool {
		for _, m := range ms {
			if m.name != "m2" && m.count() != c[m.name] {
				return false
			}
		}
		return true
	}, "every member's running work to match the owners")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStickyJoinAndLeave (rule 4): from a balanced group, a join moves at
// most ceil(N/(M+1)) shards, all to the newcomer, and a leave moves only
// the leaver's shards; every state etcd went through in between is
// checked, not only the end.
func TestStickyJoinAndLeave(t *testing.T) {
	cli := client(t)
	log := &eventLog{}
	const n = 20
	g := func() *shard.Group { return newGroup(t, cli, "rule4", n, shard.WithTTL(2*time.Second)) }
	ms := map[string]*member{}
	for _, name := range []string{"a", "b", "c"} {
		ms[name] = start(t, g(), name, log, nil)
	}
	before := settled(t, ms["a"].g, "a", "b", "c")

	// Observe from the balanced state on, through the join.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	states := ms["a"].g.Observe(ctx)
	<-states
	ms["d"] = start(t, g(), "d", log, nil)
	after := follow(t, states, before, []string{"a", "b", "c", "d"}, func(s int, from, to string) {
		if to != "d" && to != "" {
			t.Errorf("join: shard %d went from %q to %q, not to the newcomer", s, from, to)
		}
	})
	if moved, limit := changed(before, after), (n+3)/4; moved > limit {
		t.Errorf("join: %d shards moved, at most %d allowed", moved, limit)
	}

	ms["b"].cancel()
	final := follow(t, states, after, []string{"a", "c", "d"}, func(s int, from, to string) {
		if from != "b" && from != "" {
			t.Errorf("leave of b: shard %d went from %q to %q", s, from, to)
		}
	})
	if moved, own := changed(after, final), counts(after)["b"]; moved != own {
		t.Errorf("leave of b: %d shards moved, b owned %d", moved, own)
	}
}

// follow reads states until the group is balanced over members, calling
// moved for every shard whose owner changed from one state to the next.
func follow(t *testing.T, states <-chan shard.State, from shard.State, members []string, moved func(s int, from, to string)) shard.State {
	t.Helper()
	last := from
	for st := range states {
		for s := range st.Owners {
			if st.Owners[s].Member != last.Owners[s].Member {
				moved(s, last.Owners[s].Member, st.Owners[s].Member)
			}
		}
		last = st
		if balanced(st, members) {
			return st
		}
	}
	t.Fatalf("never balanced over %v: %v", members, counts(last))
	return last
}

func changed(a, b shard.State) int {
	n := 0
	for s := range a.Owners {
		if a.Owners[s].Member != b.Owners[s].Member {
			n++
		}
	}
	return n
}

// TestDrainedBeforeTheMoveWithoutTTLWait (rule 5): a shard moving from a
// live member is released only after its fn returned, and the new owner,
// queued on it already, takes it then: with a 60 s TTL the move takes a
// round trip, not a lease expiry. A fn that ignores its Context is cut
// off at the drain timeout, and Run still waits for it.
func TestDrainedBeforeTheMoveWithoutTTLWait(t *testing.T) {
	cli := client(t)
	log := &eventLog{}
	const n = 4
	ttl := shard.WithTTL(60 * time.Second)
	release := make(chan struct{})
	ga := newGroup(t, cli, "rule5", n, ttl)
	a := start(t, ga, "a", log, func(ctx context.Context, s *shard.Shard) { <-release })
	settled(t, ga, "a")
	gb := newGroup(t, cli, "rule5", n, ttl)
	start(t, gb, "b", log, nil)
	// b queues on the shards a drains: each of them gets a second key.
	waitFor(t, func() bool {
		queued := 0
		for s := 0; s < n; s++ {
			if len(etcdtest.Keys(t, cli, fmt.Sprintf("%ss/%05d/", ga.Prefix(), s))) == 2 {
				queued++
			}
		}
		return queued == n/2
	}, "b to queue on the shards a gives up")
	owners, err := ga.Owners(etcdtest.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if o.Member != "a" {
			t.Fatalf("shard %d is %q's while a drains", o.Shard, o.Member)
		}
	}
	began := time.Now()
	close(release)
	settled(t, ga, "a", "b")
	if d := time.Since(began); d > 20*time.Second {
		t.Fatalf("the moves took %v: a TTL wait", d)
	}
	returned := map[int]bool{}
	for _, e := range log.snapshot() {
		switch {
		case e.member == "a" && e.kind == "return":
			returned[e.shard] = true
		case e.member == "b" && e.kind == "start" && !returned[e.shard]:
			t.Errorf("shard %d: b started before a's work returned", e.shard)
		}
	}
	_ = a

	// A fn that ignores its Context: released at the drain timeout.
	stuck := make(chan struct{})
	gc := newGroup(t, cli, "rule5-stuck", 1, ttl, shard.WithDrainTimeout(300*time.Millisecond))
	c := start(t, gc, "c", log, func(ctx context.Context, s *shard.Shard) { <-stuck })
	settled(t, gc, "c")
	waitFor(t, func() bool { return c.count() == 1 }, "c's work to start")
	gd := newGroup(t, cli, "rule5-stuck", 1, ttl)
	d := start(t, gd, "d", log, nil)
	_ = d
	c.cancel()
	settled(t, gd, "d")
	select {
	case err := <-c.done:
		t.Fatalf("Run returned (%v) while its fn still ran", err)
	default:
	}
	close(stuck)
	if err := c.stop(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
}

// TestBadInputRefusedNothingWritten (rule 6).
func TestBadInputRefusedNothingWritten(t *testing.T) {
	cli := client(t)
	for _, tc := range []struct {
		what  string
		group string
		count int
		opts  []shard.Option
		want  string
	}{
		{"count 0", "g", 0, nil, "1 to 16384"},
		{"count -1", "g", -1, nil, "1 to 16384"},
		{"count 16385", "g", shard.MaxCount + 1, nil, "1 to 16384"},
		{"empty group", "", 4, nil, "must not be empty"},
		{"control character", "a\x00b", 4, nil, "control character"},
		{"long group", strings.Repeat("x", 257), 4, nil, "at most 256"},
		{"drain 0", "g", 4, []shard.Option{shard.WithDrainTimeout(0)}, "WithDrainTimeout"},
		{"drain too long", "g", 4, []shard.Option{shard.WithDrainTimeout(2 * time.Hour)}, "WithDrainTimeout"},
		{"ttl 1s", "g", 4, []shard.Option{shard.WithTTL(time.Second)}, "WithTTL"},
		{"nil logger", "g", 4, []shard.Option{shard.WithLogger(nil)}, "WithLogger"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			_, err := shard.New(cli, tc.group, tc.count, tc.opts...)
			if !errors.Is(err, shard.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}

	leases := func() int {
		resp, err := cli.Leases(etcdtest.Context(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}
	noop := func(ctx context.Context, s *shard.Shard) error { <-ctx.Done(); return nil }
	ctx := etcdtest.Context(t, 20*time.Second)
	g8 := newGroup(t, cli, "rule6", 8)
	for _, name := range []string{"", "a\nb", strings.Repeat("m", 257)} {
		if err := g8.Run(ctx, name, noop); !errors.Is(err, shard.ErrInvalid) {
			t.Errorf("Run(%q): %v, want ErrInvalid", name, err)
		}
	}
	if keys := etcdtest.Keys(t, cli, g8.Prefix()); len(keys) != 0 {
		t.Fatalf("bad member names wrote %v", keys)
	}
	start(t, g8, "x", &eventLog{}, nil)
	settled(t, g8, "x")
	keysBefore, leasesBefore := etcdtest.Keys(t, cli, g8.Prefix()), leases()
	rev0 := rev(t, cli)

	g16 := newGroup(t, cli, "rule6", 16)
	err := g16.Run(ctx, "y", noop)
	if !errors.Is(err, shard.ErrCountMismatch) || !strings.Contains(err.Error(), " 8 ") || !strings.Contains(err.Error(), "16") {
		t.Errorf("Run with another count: %v, want ErrCountMismatch naming 8 and 16", err)
	}
	gx := newGroup(t, cli, "rule6", 8)
	if err := gx.Run(ctx, "x", noop); !errors.Is(err, shard.ErrDuplicateMember) {
		t.Errorf("Run of a live member name on another lease: %v, want ErrDuplicateMember", err)
	}
	if err := g8.Run(ctx, "z", noop); !errors.Is(err, shard.ErrRunning) {
		t.Errorf("a second Run of one Group: %v, want ErrRunning", err)
	}
	if got := rev(t, cli); got != rev0 {
		t.Errorf("the refusals moved etcd from revision %d to %d", rev0, got)
	}
	if keys := etcdtest.Keys(t, cli, g8.Prefix()); !equalStrings(keys, keysBefore) {
		t.Errorf("keys after the refusals: %v, before: %v", keys, keysBefore)
	}
	if got := leases(); got != leasesBefore {
		t.Errorf("the refusals granted leases: %d, before %d", got, leasesBefore)
	}
}

func equalStrings(a, b []string) bool {
	sort.Strings(a)
	sort.Strings(b)
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}

// countingClient counts the unary requests and the stream messages
// (renewals, watch requests) it sends.
func countingClient(t *testing.T, unary, stream *atomic.Int64, methods *sync.Map) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				unary.Add(1)
				methods.Store(fmt.Sprint(unary.Load(), " ", method), true)
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				s, err := streamer(ctx, desc, cc, method, opts...)
				return countingStream{s, stream}, err
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

type countingStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s countingStream) SendMsg(m any) error { s.n.Add(1); return s.ClientStream.SendMsg(m) }

// TestCostAtRestIndependentOfShards (rule 7): a member that owns 8 shards
// and one that owns 2,048 send the same at rest over a window of three
// renewal intervals: no unary request at all, and only their renewals on
// the streams.
func TestCostAtRestIndependentOfShards(t *testing.T) {
	measure := func(n int) (unary, stream int64) {
		var u, s atomic.Int64
		var methods sync.Map
		cli := countingClient(t, &u, &s, &methods)
		g := newGroup(t, cli, fmt.Sprintf("rule7-%d", n), n, shard.WithTTL(3*time.Second))
		m := start(t, g, "only", &eventLog{}, nil)
		settled(t, g, "only")
		waitFor(t, func() bool { return m.count() == n }, "every shard's work to start")
		u0, s0 := u.Load(), s.Load()
		time.Sleep(3 * time.Second) // the window at rest: three renewals
		methods.Range(func(k, _ any) bool {
			var i int64
			fmt.Sscan(k.(string), &i)
			if i > u0 {
				t.Logf("%d shards: a request at rest: %s", n, k)
			}
			return true
		})
		return u.Load() - u0, s.Load() - s0
	}
	u8, s8 := measure(8)
	u2k, s2k := measure(2048)
	t.Logf("at rest over 3 s: 8 shards: %d unary, %d stream messages; 2048 shards: %d unary, %d stream messages", u8, s8, u2k, s2k)
	if u8 != 0 || u2k != 0 {
		t.Errorf("unary requests at rest: %d with 8 shards, %d with 2048, want 0", u8, u2k)
	}
	if s8 > 6 || s2k > 6 {
		t.Errorf("stream messages at rest: %d with 8 shards, %d with 2048, want the renewals alone (at most 6)", s8, s2k)
	}
}

// TestRevokedMemberEndsItsShardsAsLost (rule 2's cause): a member whose
// lease someone else revoked ends its shards' Contexts with ErrLost, not
// ErrMoved, also when its loop sees its keys go before its session's watch
// tells the holds why (the session's deletions held in the Deleted hook
// until every shard's Context ended).
func TestRevokedMemberEndsItsShardsAsLost(t *testing.T) {
	cli := client(t)
	const n = 6
	var armed atomic.Bool
	hold := make(chan struct{})
	hooks := &core.Hooks{Stream: watch.Hooks{Deleted: func(string) {
		if armed.Load() {
			select {
			case <-hold:
			case <-time.After(10 * time.Second):
			}
		}
	}}}
	sess, err := session.New(cli, session.WithTTL(30*time.Second), config.Hooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	log := &eventLog{}
	ga := newGroup(t, cli, "rule2-revoked", n, shard.WithSession(sess))
	start(t, ga, "a", log, nil)
	settled(t, ga, "a")
	gb := newGroup(t, cli, "rule2-revoked", n)
	start(t, gb, "b", log, nil)
	st := settled(t, gb, "a", "b")
	mine := counts(st)["a"]

	before := len(log.snapshot())
	armed.Store(true)
	if _, err := cli.Revoke(etcdtest.Context(t, 5*time.Second), sess.Lease()); err != nil {
		t.Fatal(err)
	}
	ended := func() (lost, other []error) {
		for _, e := range log.snapshot()[before:] {
			if e.member == "a" && e.kind == "ended" {
				if errors.Is(e.cause, shard.ErrLost) {
					lost = append(lost, e.cause)
				} else {
					other = append(other, e.cause)
				}
			}
		}
		return lost, other
	}
	deadline := time.Now().Add(8 * time.Second)
	for {
		lost, other := ended()
		if len(lost)+len(other) >= mine {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's shards did not end while its session's watch was held: %d of %d ended", len(lost)+len(other), mine)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(hold)
	if lost, other := ended(); len(other) > 0 {
		t.Errorf("a revoked member ended %d of its %d shards with another cause than ErrLost: %v", len(other), len(lost)+len(other), other)
	}
	// Every shard owned again: by b, and by a too once a joined again
	// (which it does as soon as its fns returned).
	ownedByLive(t, gb, 30*time.Second)
}

// TestOneLeaseRunsOneMember (rule 6): a second member name on a lease a
// live member of the group already runs on is refused at its first join,
// with nothing written, as WithSession says ("one lease runs at most one
// member of a group"); it was refused only on a rejoin before.
func TestOneLeaseRunsOneMember(t *testing.T) {
	cli := client(t)
	sess, err := session.New(cli, session.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	ga := newGroup(t, cli, "rule6-lease", 4, shard.WithSession(sess))
	start(t, ga, "a", &eventLog{}, nil)
	settled(t, ga, "a")
	keysBefore, rev0 := etcdtest.Keys(t, cli, ga.Prefix()), rev(t, cli)
	gb := newGroup(t, cli, "rule6-lease", 4, shard.WithSession(sess))
	ctx := etcdtest.Context(t, 10*time.Second)
	err = gb.Run(ctx, "b", func(ctx context.Context, s *shard.Shard) error { <-ctx.Done(); return nil })
	if !errors.Is(err, shard.ErrDuplicateMember) || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("a second member on a's lease: %v, want ErrDuplicateMember naming a", err)
	}
	if got := rev(t, cli); got != rev0 {
		t.Errorf("the refusal moved etcd from revision %d to %d", rev0, got)
	}
	if keys := etcdtest.Keys(t, cli, ga.Prefix()); !equalStrings(keys, keysBefore) {
		t.Errorf("keys after the refusal: %v, before: %v", keys, keysBefore)
	}
}

// TestSecondRunOfANameOnOneLeaseRefused (rule 6): a second Run of a member
// name already running on the same lease (another Group on the same shared
// session) is refused with ErrDuplicateMember, with nothing written or
// deleted: the first Run's shards run on undisturbed. It was accepted
// before, as the first Run's own key, and when it stopped it deleted the
// member key from under the first Run, whose shards all ended with
// ErrMoved although nothing moved.
func TestSecondRunOfANameOnOneLeaseRefused(t *testing.T) {
	cli := client(t)
	sess, err := session.New(cli, session.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	const n = 4
	log := &eventLog{}
	ga := newGroup(t, cli, "rule6-same-lease", n, shard.WithSession(sess))
	a := start(t, ga, "a", log, nil)
	settled(t, ga, "a")
	waitFor(t, func() bool { return a.count() == n }, "a's work on every shard")
	keysBefore, rev0 := etcdtest.Keys(t, cli, ga.Prefix()), rev(t, cli)
	gb := newGroup(t, cli, "rule6-same-lease", n, shard.WithSession(sess))
	ctx := etcdtest.Context(t, 3*time.Second)
	err = gb.Run(ctx, "a", func(ctx context.Context, s *shard.Shard) error { <-ctx.Done(); return nil })
	if !errors.Is(err, shard.ErrDuplicateMember) || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("a second Run of a on a's lease: %v, want ErrDuplicateMember naming a", err)
	}
	if got := rev(t, cli); got != rev0 {
		t.Errorf("the refusal moved etcd from revision %d to %d", rev0, got)
	}
	if keys := etcdtest.Keys(t, cli, ga.Prefix()); !equalStrings(keys, keysBefore) {
		t.Errorf("keys after the refusal: %v, before: %v", keys, keysBefore)
	}
	for _, e := range log.snapshot() {
		if e.kind == "ended" {
			t.Errorf("shard %d of the first Run ended (%v) after the second Run of its name", e.shard, e.cause)
		}
	}
}
