package robustness

import (
	"testing"
	"time"

	"github.com/batonhq/baton/internal/history"
)

// given-up: w1's Lock of m0 gave up at 22 ms; its key b appears at rev 2,
// seen at 50 ms, with no call of w1 on m0 in flight, and stays 4 s: a
// request that applied after its caller gave up. A call in flight, a short
// life, or a cut of w1's own connection ending less than its grace (a TTL
// and a second) and the bound before b goes excuse it; a cut of another
// client's does not.
func TestGivenUpCatchesAKeyPutAfterItsCallerGaveUp(t *testing.T) {
	mk := func() *History {
		h := &History{Names: []NameInfo{m0}, Events: []history.Event{put(2, kb, 2, "w1.l0"), del(3, kb, 2)}}
		h.Ops = []Op{{Client: "w1", Kind: "mutex.Lock", Name: "m0", Call: ms(1), Return: ms(22), Err: "context deadline exceeded"}}
		seenEvery(h)
		h.Seen[0].At, h.Seen[1].At = ms(50), ms(50)+int64(4*time.Second)
		return h
	}
	givenUp := func(rep *Report) int {
		n := 0
		for _, v := range rep.Violations {
			if v.Check == "given-up" {
				n++
			}
		}
		return n
	}
	cfg := Config{TTL: 3 * time.Second}
	wantViolation(t, check(mk(), cfg), "given-up", `b (token 2, by "w1.l0") was put at rev 2 (seen at 50ms) while no acquisition of w1 on m0 was in flight`)

	h := mk()
	h.Ops = append(h.Ops, Op{Client: "w1", Kind: "mutex.Lock", Name: "m0", Call: ms(40), Return: ms(40) + int64(5*time.Second), Err: "context deadline exceeded"})
	if n := givenUp(check(h, cfg)); n != 0 {
		t.Errorf("a key with a call of its caller in flight judged %d times", n)
	}
	h = mk()
	h.Seen[1].At = ms(50) + int64(time.Second)
	if n := givenUp(check(h, cfg)); n != 0 {
		t.Errorf("a key gone within the bound judged %d times", n)
	}
	h = mk()
	h.Faults = []Fault{{Kind: FaultReplyLost, Start: ms(1), End: ms(30), Clients: []string{"w1"}}}
	if n := givenUp(check(h, cfg)); n != 0 {
		t.Errorf("a key whose caller's connection was cut until 30 ms judged %d times", n)
	}
	h.Seen[1].At = ms(50) + int64(6*time.Second) // excused until 30 ms + 3 s + 1 s + 1.5 s only
	wantViolation(t, check(h, cfg), "given-up", "no acquisition of w1 on m0 was in flight")
	h.Seen[1].At = ms(50) + int64(4*time.Second)
	h.Faults[0].Clients = []string{"w2"}
	wantViolation(t, check(h, cfg), "given-up", "no acquisition of w1 on m0 was in flight")
}

// told-truly: a release told "not held" although its hold had not ended
// by a loss when it began, and nothing else deleted its key: its own
// write did, unheard. An operator's deletion, a revoked lease, or a fault
// that can end a lease near make it true, or unknowable.
func TestToldTrulyCatchesAReleaseToldNotHeldAfterItsOwnWrite(t *testing.T) {
	mk := func() *History {
		h := cleanMutex()
		h.Holds = []*Hold{
			{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(4) + 1, Cause: "baton: released"},
			{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 3, Acquired: ms(5) + 2, Ended: ms(7), Cause: "baton: released"},
		}
		h.Ops = []Op{{Client: "w0", Kind: "mutex.Release", Name: "m0", Key: ka, Token: 2, Call: ms(4), Return: ms(6),
			Err: "mutex: not held: key " + ka + " was gone before release", LeaseLeft: 2}}
		return h
	}
	wantViolation(t, run(mk()), "told-truly", "nothing else deleted its keys (a at rev 5)")

	h := mk()
	h.Faults = []Fault{{Kind: FaultAdminDelete, Start: ms(3), End: ms(5), Revs: []int64{5}}}
	if rep := run(h); len(rep.Violations) != 0 {
		t.Errorf("an operator's deletion judged: %+v", rep.Violations)
	}
	h = mk()
	h.Ops[0].Err = "mutex: not held: key " + ka + " was gone before release (its lease was revoked)"
	if rep := run(h); len(rep.Violations) != 0 {
		t.Errorf("a revoked lease judged: %+v", rep.Violations)
	}
	h = mk()
	h.Faults = []Fault{{Kind: FaultBlackhole, Start: ms(1), End: ms(3), Clients: []string{"w0"}}}
	if rep := run(h); len(rep.Violations) != 0 || rep.Oracles["told-truly: not judged (a fault of its client or a Close near)"] != 1 {
		t.Errorf("a release near a blackhole of its client: %+v %v", rep.Violations, rep.Oracles)
	}
	h.Faults[0].Clients = []string{"w2"} // another client's
	wantViolation(t, run(h), "told-truly", "nothing else deleted its keys")
	h = mk()
	h.Ops[0].LeaseLeft = -1 // its lease gone once it answered: it may have expired
	if rep := run(h); len(rep.Violations) != 0 {
		t.Errorf("a release whose lease was gone judged: %+v", rep.Violations)
	}
	// Unless the revision that deleted the key put a release mark: a
	// release, which no expiry makes.
	h.Events = append(h.Events[:4], append([]history.Event{put(5, "/robust/v1/released", 5, "")}, h.Events[4:]...)...)
	wantViolation(t, run(h), "told-truly", "nothing else deleted its keys")
	h = mk()
	h.Holds[0].Cause = "baton: ownership lost: key deleted"
	if rep := run(h); len(rep.Violations) != 0 {
		t.Errorf("a release after a loss judged: %+v", rep.Violations)
	}
}
