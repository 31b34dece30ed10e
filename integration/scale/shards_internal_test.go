package scale

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/shard"
)

// TestShardsHistoryJudge: the phase's reading of etcd's history counts a
// move when a shard's oldest key becomes another member's (once, across
// an unowned stretch; none when it goes back to the same member's key, and
// none before the first bound), and names an enter whose token was a
// waiter's, never the oldest.
func TestShardsHistoryJudge(t *testing.T) {
	srv, err := embedetcd.New(embedetcd.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cli, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := shard.GroupPrefix(shardsNamespace, "judge")
	put := func(key, member string) int64 {
		r, err := cli.Put(ctx, prefix+key, member)
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	del := func(key string) int64 {
		r, err := cli.Delete(ctx, prefix+key)
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	rev0, err := currentRevision(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	a := put("s/00000/a", "x") // shard 0 to x, before the first bound
	put("s/00001/b", "y")
	start := put("m/x", "{}") // not a shard key: ignored
	waiter := put("s/00000/c", "y")
	del("s/00000/a") // 0: x → y, a move
	put("s/00000/d", "x")
	del("s/00000/c")             // 0: y → x, a move
	del("s/00001/b")             // 1: unowned
	mid := put("s/00001/e", "y") // 1: back to y, no move
	del("s/00000/d")             // 0: unowned
	put("s/00000/f", "z")        // 0: x → z, a move
	end := put("s/00001/g", "z") // a waiter of 1: no change
	// After the last bound (a restart the deadline cut short): no move
	// counted, but its owners are judged.
	del("s/00001/e")               // 1: y → z (g), not counted
	after := put("s/00000/i", "y") // a waiter of 0
	del("s/00000/f")               // 0: z → y (i), not counted
	put("s/00001/h", "z")          // a waiter of 1: the ledger's end

	h, err := replayShards(ctx, cli, prefix, 2, rev0, []int64{start, mid, end})
	if err != nil {
		t.Fatal(err)
	}
	if h.moves != 3 || h.perRestart[0] != 2 || h.perRestart[1] != 1 || h.regressions != 0 {
		t.Fatalf("moves %d (per bound %v), regressions %d; want 3 ([2 1]), 0", h.moves, h.perRestart, h.regressions)
	}
	// The enters after the last bound, by owners etcd's history shows once
	// replayed to the end, are not named.
	cut := &shardsLedger{shards: map[string]*shardsHold{
		"judge/0": {entered: []fencing.Token{fencing.Token(after)}},
		"judge/1": {entered: []fencing.Token{fencing.Token(end)}},
	}}
	if got := h.notOwners(cut, "judge"); len(got) != 0 {
		t.Fatalf("notOwners after the last bound = %q, want none: the replay must reach the ledger's end", got)
	}
	l := &shardsLedger{shards: map[string]*shardsHold{
		"judge/0": {entered: []fencing.Token{fencing.Token(a), fencing.Token(waiter)}},
		"judge/1": {entered: []fencing.Token{fencing.Token(mid)}},
		"other/0": {entered: []fencing.Token{1}},
	}}
	got := h.notOwners(l, "judge")
	if len(got) != 0 {
		// c did own shard 0 (after a's deletion): only a token that never
		// was the oldest is named.
		t.Fatalf("notOwners = %q, want none", got)
	}
	l.shards["judge/1"].entered = append(l.shards["judge/1"].entered, fencing.Token(mid+1))
	if got := h.notOwners(l, "judge"); len(got) != 1 {
		t.Fatalf("notOwners = %q, want the enter by a token that never owned shard 1 (%d)", got, mid+1)
	}
}
