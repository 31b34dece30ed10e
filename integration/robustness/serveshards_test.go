package robustness

import (
	"sync/atomic"
	"testing"
	"time"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/internal/history"
)

func serveShardName(id string) NameInfo {
	return NameInfo{Prim: "shard", Name: "sv0/" + id, Prefix: "/robust/v1/shard/sv0/s/" + id + "/", Work: workPrefix + "shard/sv0/" + id, Limit: 1, Private: true}
}

// A Shards member counts a shard its own from owned until lost, its own
// Drained or its validity deadline, whichever is first; a deadline passed
// ends the membership for it, and a shard owned after is never held.
func TestServeMemberKnowsWhenItsShardsEnd(t *testing.T) {
	s0, s1 := serveShardName("00000"), serveShardName("00001")
	h := &History{Names: []NameInfo{s0, s1}}
	mb := newServeMember(&mech{r: &runner{h: h, cfg: Config{names: h.Names}}}, "serve.sm0-0")
	mb.ack = serveAckNever
	mb.valid.Store(now() + int64(time.Hour))
	a := mb.hold(&batonv1.ShardOwned{Shard: 0, Token: 2, Key: s0.Prefix + "a"})
	b := mb.hold(&batonv1.ShardOwned{Shard: 1, Token: 3, Key: s1.Prefix + "a"})
	if a == nil || b == nil || a.x.DeadOnReturn || b.x.DeadOnReturn {
		t.Fatalf("owned shards not held: %v %v", a, b)
	}
	// Lost tells shard 0; shard 1, moved and never acknowledged, is still
	// its own when its key goes (planted bug t's trace).
	mb.receive(&batonv1.ShardsResponse{Event: &batonv1.ShardsResponse_Lost{Lost: &batonv1.ShardEnded{Shard: 0, Token: 2, Cause: batonv1.Cause_CAUSE_MOVED}}}, nil)
	mb.receive(&batonv1.ShardsResponse{Event: &batonv1.ShardsResponse_Moved{Moved: &batonv1.ShardEnded{Shard: 1, Token: 3, Cause: batonv1.Cause_CAUSE_MOVED}}}, nil)
	at := now()
	h.deleteSeen(a.x.Key, 2, at)
	h.deleteSeen(b.x.Key, 3, at)
	if !a.x.Told || a.x.Cause != "lost: CAUSE_MOVED" || b.x.Told || b.x.Ended != 0 {
		t.Errorf("shard 0 told %v (%q), shard 1 told %v (ended %d); want lost to tell shard 0 alone", a.x.Told, a.x.Cause, b.x.Told, b.x.Ended)
	}
	// Its validity passes: shard 1 told then, and the deadline is final.
	mb.mu.Lock()
	v := now()
	mb.valid.Store(v)
	mb.expireLocked(v)
	mb.mu.Unlock()
	if b.x.Ended != v || b.x.Cause != "validity expired" || !b.x.over(v) {
		t.Errorf("shard 1 ended at %d (%q); want %d, validity expired", b.x.Ended, b.x.Cause, v)
	}
	select {
	case <-mb.expired:
	default:
		t.Error("expired not closed")
	}
	mb.extend(now(), time.Hour)
	if mb.valid.Load() != v {
		t.Error("a reply after the deadline extended it")
	}
	if c := mb.hold(&batonv1.ShardOwned{Shard: 0, Token: 7, Key: s0.Prefix + "b"}); c != nil {
		t.Error("a shard owned after the deadline was held")
	}
	if x := h.Holds[len(h.Holds)-1]; !x.DeadOnReturn || x.Token != 7 {
		t.Errorf("the shard owned after the deadline: %+v; want dead on return", x)
	}
}

// Knows-first judges a serve member's shard by the member's own end of
// it: a moved shard's key deleted after lost reached it is told first;
// one deleted at the drain deadline while its validity runs on (planted
// bug t) is not, and the next owner acts beside it.
func TestKnowsFirstJudgesAServeMembersShard(t *testing.T) {
	sv := serveShardName("00000")
	ka, kb := sv.Prefix+"a", sv.Prefix+"b"
	for _, lost := range []bool{true, false} {
		h := &History{Names: []NameInfo{sv}, Events: []history.Event{
			put(2, ka, 2, ""), put(3, kb, 3, ""), put(4, sv.Work, 4, ka), del(5, ka, 2), put(6, sv.Work, 4, kb), del(7, kb, 3),
		}}
		valid := new(atomic.Int64)
		valid.Store(ms(6) + int64(time.Second))
		done := make(chan struct{})
		a := &Hold{Prim: "shard", Name: sv.Name, Client: "serve.sm0-0", Key: ka, Token: 2, Acquired: ms(2), validTo: valid}
		h.acquired(a, sv, done)
		if lost {
			close(done)
			h.ended(a, ms(4), "lost: CAUSE_MOVED")
		}
		h.deleteSeen(ka, 2, ms(5))
		b := &Hold{Prim: "shard", Name: sv.Name, Client: "serve.sm1-0", Key: kb, Token: 3, Acquired: ms(5) + 2, validTo: new(atomic.Int64)}
		b.validTo.Store(ms(100))
		h.acquired(b, sv, make(chan struct{}))
		rep := run(h)
		if lost {
			wantClean(t, rep)
		} else {
			wantViolation(t, rep, "knows-first", "had not been told when its key's deletion (rev 5) was seen")
		}
	}
}
