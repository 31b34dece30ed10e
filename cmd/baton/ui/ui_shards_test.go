package ui_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/cmd/baton/ui"
	"github.com/batonhq/baton/shard"
)

// shardMember is one shard.Group member running until leave.
type shardMember struct {
	name  string
	leave func() error
}

// joinShards runs member name in group until the test ends or leave.
func joinShards(t *testing.T, ns, group string, count int, name string) shardMember {
	t.Helper()
	g, err := shard.New(clitest.Srv.Client(t), group, count, shard.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(clitest.TestContext(t))
	done := make(chan error, 1)
	go func() {
		done <- g.Run(ctx, name, func(ctx context.Context, _ *shard.Shard) error {
			<-ctx.Done()
			return nil
		})
	}()
	var runErr error
	left := false
	leave := func() error {
		if !left {
			left = true
			stop()
			if runErr = <-done; errors.Is(runErr, context.Canceled) {
				runErr = nil
			}
			_ = g.Close()
		}
		return runErr
	}
	t.Cleanup(func() { _ = leave() })
	return shardMember{name: name, leave: leave}
}

// balanced waits, up to 10 s, for Inspect to show exactly members, each
// owning its quota and every shard owned, and returns that State.
func balanced(t *testing.T, ns, group string, members ...string) shard.State {
	t.Helper()
	ctx := clitest.TestContext(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := shard.Inspect(ctx, clitest.Srv.Client(t), group, shard.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		v := keyspace.ShardsView(group, st, nil, time.Now())
		ok := slices.Equal(st.Members, members) && v.Unowned == 0 && v.Count > 0
		for _, m := range v.Members {
			ok = ok && (m.Owns == v.Count/len(members) || m.Owns == (v.Count+len(members)-1)/len(members))
		}
		if ok {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %q not balanced over %q in 10 s: %+v", group, members, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func groupOf(s ui.Snapshot, group string) *ui.ShardGroup {
	for i := range s.Shards {
		if s.Shards[i].Group == group {
			return &s.Shards[i]
		}
	}
	return nil
}

// showsState says whether the page shows group as st reads: its members,
// what each owns, the unowned.
func showsState(s ui.Snapshot, group string, st shard.State) bool {
	g := groupOf(s, group)
	want := keyspace.ShardsView(group, st, nil, time.Now())
	return g != nil && g.Count == want.Count && g.Unowned == want.Unowned && slices.Equal(g.Members, want.Members)
}

// movedBetween is what changed owner from one State to the next, as
// "shard from→to", sorted.
func movedBetween(before, after shard.State) []string {
	var out []string
	for i, o := range after.Owners {
		if from := before.Owners[i].Member; from != o.Member {
			out = append(out, fmt.Sprintf("%d %s→%s", i, from, o.Member))
		}
	}
	slices.Sort(out)
	return out
}

func movesText(ms []ui.ShardMove) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%d %s→%s", m.Shard, m.From, m.To))
	}
	slices.Sort(out)
	return out
}

// TestUIStateShowsShardGroupsAndMoves: the page shows a shard group as
// shard.Inspect reads it (its live members, what each owns, the unowned
// shards and their IDs), and each move it saw: every shard that changed
// owner as members joined and one left, from whom to whom, and no other;
// the newest uiMaxMoves (20) of them. A group whose keys are all gone
// leaves the page.
func TestUIStateShowsShardGroupsAndMoves(t *testing.T) {
	ns := fmt.Sprintf("ui-shards-%d", time.Now().UnixNano())
	st := startUIState(t, ns)
	waitSnapshot(t, st, "connected", func(s ui.Snapshot) bool { return s.Connected })
	start := time.Now()
	const group, count = "ingest <b>", 24
	const hostile = `c <script>alert(1)</script>`

	joinShards(t, ns, group, count, "a")
	one := balanced(t, ns, group, "a")
	s := waitSnapshot(t, st, "a owning every shard", func(s ui.Snapshot) bool { return showsState(s, group, one) })
	if g := groupOf(s, group); g.Members[0].Owns != count || g.UnownedIDs != "" || len(s.ShardMoves) != 0 {
		t.Fatalf("one member: %+v, moves %+v", g, s.ShardMoves)
	}

	joinShards(t, ns, group, count, "b")
	two := balanced(t, ns, group, "a", "b")
	// The page reads a group after its changes, so two moves of one shard
	// between its reads are one: c joins once the page has seen b's.
	waitSnapshot(t, st, "a and b, 12 shards each", func(s ui.Snapshot) bool { return showsState(s, group, two) })
	c := joinShards(t, ns, group, count, hostile)
	three := balanced(t, ns, group, "a", "b", hostile)
	s = waitSnapshot(t, st, "three members, 8 shards each", func(s ui.Snapshot) bool { return showsState(s, group, three) })
	joins := append(movedBetween(one, two), movedBetween(two, three)...)
	if got := movesText(s.ShardMoves); len(joins) != 20 || !slices.Equal(got, sortedCopy(joins)) {
		t.Fatalf("moves after two joins:\n%q\nwant (12 to b, then 4 from each to c)\n%q", got, sortedCopy(joins))
	}

	// c leaves: its 8 shards move, 4 to each; the page keeps the newest 20
	// moves, the 8 of the leave last.
	if err := c.leave(); err != nil {
		t.Fatal(err)
	}
	after := balanced(t, ns, group, "a", "b")
	s = waitSnapshot(t, st, "c gone, 12 shards each", func(s ui.Snapshot) bool { return showsState(s, group, after) })
	left := movedBetween(three, after)
	if len(left) != 8 || len(s.ShardMoves) != 20 {
		t.Fatalf("leave: %d moves expected, the page holds %d: %+v", len(left), len(s.ShardMoves), s.ShardMoves)
	}
	for _, l := range left {
		if !strings.Contains(l, " "+hostile+"→") {
			t.Fatalf("leave moved %q, not a shard of c", l)
		}
	}
	if got := movesText(s.ShardMoves[12:]); !slices.Equal(got, left) {
		t.Fatalf("the newest 8 moves:\n%q\nwant c's shards\n%q", got, left)
	}
	if got := movesText(s.ShardMoves[4:12]); !slices.Equal(got, movedBetween(two, three)) {
		t.Fatalf("the 8 before: %q, want c's join %q", got, movedBetween(two, three))
	}
	for _, m := range s.ShardMoves {
		if m.Group != group || m.At.Before(start) || m.At.After(time.Now()) || m.Revision == 0 {
			t.Fatalf("move %+v: want group %q, seen since %v at a revision", m, group, start)
		}
	}

	// A member that joined and owns shard 2 alone, as its join leaves it
	// until it queues for the others (keys as package shard lays them out).
	cli := clitest.Srv.Client(t)
	ctx := clitest.TestContext(t)
	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	prefix := shard.GroupPrefix(ns, "spare")
	if _, err := cli.Txn(ctx).Then(
		clientv3.OpPut(prefix+"m/solo", `{"count":6}`, clientv3.WithLease(lease.ID)),
		clientv3.OpPut(prefix+"s/00002/"+strconv.FormatInt(int64(lease.ID), 16), "solo", clientv3.WithLease(lease.ID)),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	s = waitSnapshot(t, st, "the spare group", func(s ui.Snapshot) bool { return groupOf(s, "spare") != nil })
	if g := groupOf(s, "spare"); g.Count != 6 || g.Unowned != 5 || g.UnownedIDs != "0-1, 3-5" ||
		!slices.Equal(g.Members, []keyspace.MemberJSON{{Member: "solo", Owns: 1}}) {
		t.Fatalf("spare: %+v", g)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, st, "the spare group gone", func(s ui.Snapshot) bool { return groupOf(s, "spare") == nil && groupOf(s, group) != nil })
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// TestUIInBrowserShowsShards: the page renders the shards section, its
// group and member names as text (a <script> in a member's name stays
// text), and a move when a member leaves.
func TestUIInBrowserShowsShards(t *testing.T) {
	ctx := browser(t, 1280, 900)
	ns := fmt.Sprintf("ui-shards-browser-%d", time.Now().UnixNano())
	url := serveUI(t, ns)
	const group = `<b>jobs</b>`
	const hostile = `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">w1`
	joinShards(t, ns, group, 4, "w0")
	w1 := joinShards(t, ns, group, 4, hostile)
	balanced(t, ns, group, hostile, "w0")
	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	row := fmt.Sprintf(`[...document.querySelectorAll("#shards-body tr")].find(r => r.dataset.name === %q)`, group)
	waitJS(t, ctx, 10*time.Second, "the group with both members", fmt.Sprintf(`(() => { const r = %s; if (!r) return false;
		const ms = [...r.querySelectorAll("li.member")].map(li => li.querySelector(".value").textContent + " " + li.dataset.owns);
		return r.querySelector("th").textContent === %q && r.dataset.count === "4" && r.dataset.unowned === "0" &&
			ms.length === 2 && ms.includes(%q) && ms.includes("w0 2"); })()`, row, group, hostile+" 2"))
	if pwned := evalJS[bool](t, ctx, `window.__pwned !== undefined`); pwned {
		t.Fatal("a member name's markup ran in the page")
	}
	if n := evalJS[int](t, ctx, `document.querySelectorAll("#shards img, #shards script, #shards b").length`); n != 0 {
		t.Fatalf("%d elements parsed from names in the shards section", n)
	}
	// The joins may have moved shards already (whichever member took all
	// four first gave two up): the leave must add exactly two moves, both
	// from the leaving member to w0.
	movesJS := fmt.Sprintf(`[...document.querySelectorAll("#moves-body tr")].filter(m => m.dataset.from === %q && m.querySelector(".from").textContent === %q && m.dataset.to === "w0").length`, hostile, hostile)
	before := evalJS[int](t, ctx, `document.querySelectorAll("#moves-body tr").length`)
	fromHostile := evalJS[int](t, ctx, movesJS)
	if err := w1.leave(); err != nil {
		t.Fatal(err)
	}
	balanced(t, ns, group, "w0")
	waitJS(t, ctx, 10*time.Second, "w0 owning all 4, and 2 moves to it", fmt.Sprintf(`(() => { const r = %s; if (!r) return false;
		return r.querySelectorAll("li.member").length === 1 && r.querySelector("li.member").dataset.owns === "4" &&
			document.querySelectorAll("#moves-body tr").length === %d && %s === %d; })()`,
		row, before+2, movesJS, fromHostile+2))
	if n := evalJS[int](t, ctx, `document.querySelectorAll("main img, main script").length`); n != 0 {
		t.Fatalf("%d img/script elements in the page's content", n)
	}
}
