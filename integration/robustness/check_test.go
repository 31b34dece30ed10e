package robustness

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/history"
)

// The checks are judged on hand-made histories first: each must find the
// violation planted in its history, and nothing in the clean one. A
// checker that cannot fail proves nothing.

const (
	mutexPrefix = "/robust/v1/lock/m0/"
	work        = workPrefix + "mutex/m0"
)

var m0 = NameInfo{Prim: "mutex", Name: "m0", Prefix: mutexPrefix, Work: work, Limit: 1, Observed: true, Fence: "/robust/v1/fence/mutex%2Fm0"}

func put(rev int64, key string, create int64, value string) history.Event {
	return history.Event{Rev: rev, Key: key, Create: create, Value: value}
}

func del(rev int64, key string, create int64) history.Event {
	return history.Event{Rev: rev, Key: key, Create: create, Delete: true}
}

// seenEvery marks every revision of events as seen at rev×1 ms.
func seenEvery(h *History) {
	for _, e := range h.Events {
		if n := len(h.Seen); n == 0 || h.Seen[n-1].Rev < e.Rev {
			h.Seen = append(h.Seen, Observed{Rev: e.Rev, At: ms(e.Rev)})
		}
	}
	h.End = h.Events[len(h.Events)-1].Rev + 1
}

func ms(n int64) int64 { return n * int64(time.Millisecond) }

func run(h *History) *Report {
	seenEvery(h)
	return check(h, Config{TTL: 3 * time.Second})
}

func wantViolation(t *testing.T, rep *Report, check, substr string) {
	t.Helper()
	for _, v := range rep.Violations {
		if v.Check == check && strings.Contains(v.Msg, substr) {
			return
		}
	}
	t.Errorf("no %s violation mentioning %q; got %+v", check, substr, rep.Violations)
}

func wantClean(t *testing.T, rep *Report) {
	t.Helper()
	if len(rep.Violations) > 0 {
		t.Errorf("violations in a clean history: %+v", rep.Violations)
	}
}

const ka, kb, kc = mutexPrefix + "a", mutexPrefix + "b", mutexPrefix + "c"

// A clean mutex history: a holds and writes, releases; b, waiting, is
// granted at the deletion and writes.
func cleanMutex() *History {
	return &History{Names: []NameInfo{m0}, Events: []history.Event{
		put(2, ka, 2, ""), put(3, kb, 3, ""), put(4, work, 4, ka), del(5, ka, 2), put(6, work, 4, kb), del(7, kb, 3),
	}}
}

func TestCleanHistoryHasNoViolation(t *testing.T) {
	h := cleanMutex()
	h.Holds = []*Hold{
		{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(4) + 1, Cause: "baton: released"},
		{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 3, Acquired: ms(5) + 2, Ended: ms(7), Cause: "baton: released"},
	}
	rep := run(h)
	wantClean(t, rep)
	if rep.Writes != 2 || rep.Knows["none"]["told first"] != 1 {
		t.Errorf("writes %d, knows %v; want 2 writes and 1 handover told first", rep.Writes, rep.Knows)
	}
}

func TestExclusionCatchesAWriteByAWaiter(t *testing.T) {
	h := cleanMutex()
	h.Events = []history.Event{put(2, ka, 2, ""), put(3, kb, 3, ""), put(4, work, 4, kb), del(5, ka, 2)}
	wantViolation(t, run(h), "exclusion", "wrote while not allowed to hold")
}

// Planted bug (a)'s trace: a stale release deletes the next incarnation of
// its key by name; the release that ought to have been refused shows up as
// a write by a key that no longer exists.
func TestExclusionCatchesAWriteByADeletedKey(t *testing.T) {
	h := cleanMutex()
	h.Events = []history.Event{put(2, ka, 2, ""), del(3, ka, 2), put(4, work, 4, ka)}
	wantViolation(t, run(h), "exclusion", "does not exist")
}

// Planted bug (c)'s trace: a semaphore counting holders from a stale read
// lets a third holder act while two still hold.
func TestExclusionCatchesASemaphoreOverItsLimit(t *testing.T) {
	sp := "/robust/v1/semaphore/s0/"
	sw := workPrefix + "semaphore/s0"
	s0 := NameInfo{Prim: "semaphore", Name: "s0", Prefix: sp, Work: sw, Limit: 2}
	h := &History{Names: []NameInfo{s0}, Events: []history.Event{
		put(2, sp+"a", 2, ""), put(3, sp+"b", 3, ""), put(4, sp+"c", 4, ""),
		put(5, sw, 5, sp+"a"), put(6, sw, 5, sp+"b"), put(7, sw, 5, sp+"c"),
	}}
	rep := run(h)
	wantViolation(t, rep, "exclusion", "held together against the rule")
	wantViolation(t, rep, "exclusion", "wrote while not allowed")
}

func TestExclusionCatchesAReaderWithAWriter(t *testing.T) {
	rp := "/robust/v1/rwlock/rw0/"
	rw := workPrefix + "rwmutex/rw0"
	rw0 := NameInfo{Prim: "rwmutex", Name: "rw0", Prefix: rp, Work: rw, Limit: 1}
	w, r := rp+"1.w1", rp+"2.r2"
	h := &History{Names: []NameInfo{rw0}, Events: []history.Event{
		put(2, w, 2, ""), put(3, r, 3, ""), put(4, rw, 4, w), put(5, rw, 4, r),
	}}
	wantViolation(t, run(h), "exclusion", "rw0")
}

func TestKnowsFirstCatchesAHolderToldLate(t *testing.T) {
	h := cleanMutex()
	h.Holds = []*Hold{
		// a lost its lease (no release) and heard of it 10 ms after b's
		// grant at rev 5 was seen.
		{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(15), Cause: "baton: ownership lost: lease expired"},
		{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 3, Acquired: ms(6), Ended: ms(7), Cause: "baton: released"},
	}
	h.Faults = []Fault{{Kind: FaultBlackhole, Start: ms(1), End: ms(5)}}
	rep := run(h)
	wantViolation(t, rep, "knows-first", "was told 10ms after")
	if rep.Knows[FaultBlackhole]["told late"] != 1 {
		t.Errorf("knows %v, want one late handover counted under %s", rep.Knows, FaultBlackhole)
	}
}

// A holder process is judged by its own clock readings: told 300 ms after
// the grant was seen is late; but a process that stood still 400 ms just
// then (its own meter's stalls) cannot say when it was told: not judged
// (starved), and counted so.
func TestKnowsFirstDoesNotJudgeAStarvedHolderProcess(t *testing.T) {
	h := cleanMutex()
	h.Holds = []*Hold{
		{Prim: "mutex", Name: "m0", Client: "c1", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(305), Cause: "baton: ownership lost: key deleted", Child: true},
		{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 3, Acquired: ms(6), Ended: ms(7), Cause: "baton: released"},
	}
	wantViolation(t, run(h), "knows-first", "was told 300ms after")

	h.ChildStalls = map[string][]harness.Stall{"c1": {{At: ms(4), Late: 400 * time.Millisecond}}}
	rep := run(h)
	wantClean(t, rep)
	if rep.Knows["none"]["not judged (starved)"] != 1 {
		t.Errorf("knows %v", rep.Knows)
	}
}

func TestKnowsFirstCatchesAHolderNeverTold(t *testing.T) {
	h := cleanMutex()
	h.Holds = []*Hold{{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2)}}
	wantViolation(t, run(h), "knows-first", "was never told")
}

// Planted bug (b)'s trace: the holder is told after the revoke, i.e. after
// the next holder's acquisition returned, though etcd's watch saw it later.
func TestKnowsFirstUsesTheNewHoldersOwnReturn(t *testing.T) {
	h := cleanMutex()
	h.Holds = []*Hold{
		{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(5) + 500, Cause: "baton: ownership lost: lease revoked"},
		{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 3, Acquired: ms(5) + 100, Ended: ms(7), Cause: "baton: released"},
	}
	h.Seen = []Observed{{Rev: 5, At: ms(9)}} // the log heard late
	h.Events = cleanMutex().Events
	h.End = 8
	rep := check(h, Config{TTL: 3 * time.Second})
	wantViolation(t, rep, "knows-first", "after the grant")
}

// In process, what counts is what was checked at the moment: a Context
// found ended when the deletion arrived was told first, however late the
// goroutine that timestamps its end ran; one found live was not.
func TestKnowsFirstJudgesInProcessHoldsAtTheMoment(t *testing.T) {
	h := cleanMutex()
	a := &Hold{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(30), Cause: "baton: ownership lost", DeleteSeen: ms(5), Told: true}
	h.Holds = []*Hold{a}
	rep := run(h)
	wantClean(t, rep)
	a.Told, a.Ended = false, ms(4)
	wantViolation(t, check(h, Config{TTL: 3 * time.Second}), "knows-first", "had not been told when its key's deletion (rev 5) was seen")
	// With no waiter to let in, the same.
	h.Events = []history.Event{put(2, ka, 2, ""), put(4, work, 4, ka), del(5, ka, 2)}
	h.Seen, h.End = nil, 0
	wantViolation(t, run(h), "knows-first", "had not been told when its key's deletion (rev 5) was seen")
	h.Events = cleanMutex().Events
	h.Seen, h.End = nil, 0
	seenEvery(h)
	b := &Hold{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 3, Acquired: ms(6), Ended: ms(7), Cause: "baton: released"}
	a.Told, a.Untold = true, []*Hold{b}
	h.Holds = append(h.Holds, b)
	wantViolation(t, check(h, Config{TTL: 3 * time.Second}), "knows-first", "w1 acquired (token 3, b) at 6ms while w0 (token 2, a) had not been told")
}

func TestKnowsFirstDoesNotJudgeOperatorsOrFrozenHolders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hold    Hold
		faults  []Fault
		outcome string
	}{
		{"operator", Hold{Ended: ms(20)}, []Fault{{Kind: FaultAdminDelete, Start: ms(4), End: ms(5), Revs: []int64{5}}}, "operator"},
		{"frozen", Hold{Ended: ms(20), Frozen: true, Child: true}, nil, "frozen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := cleanMutex()
			a := tc.hold
			a.Prim, a.Name, a.Client, a.Key, a.Token, a.Acquired, a.Cause = "mutex", "m0", "w0", ka, 2, ms(2), "baton: ownership lost"
			h.Holds = []*Hold{&a}
			h.Faults = tc.faults
			rep := run(h)
			wantClean(t, rep)
			if rep.Knows[tc.outcome]["not promised"] != 1 {
				t.Errorf("knows %v, want the handover counted as %s, not promised", rep.Knows, tc.outcome)
			}
		})
	}
}

func TestObserveCatchesAStreamGoingBack(t *testing.T) {
	h := cleanMutex()
	h.States = []ObsState{
		{Stream: 1, Prim: "mutex", Name: "m0", At: ms(5), Rev: 5, Key: kb, Token: 3},
		{Stream: 1, Prim: "mutex", Name: "m0", At: ms(6), Rev: 4, Key: ka, Token: 2},
	}
	wantViolation(t, run(h), "observe", "went back in time")
}

// Planted bug (d)'s trace: a re-read on delete can report a state that
// is not etcd's at the revision it names.
func TestObserveCatchesAFalseState(t *testing.T) {
	h := cleanMutex()
	h.States = []ObsState{{Stream: 1, Prim: "mutex", Name: "m0", At: ms(5), Rev: 5, Key: ka, Token: 2}}
	wantViolation(t, run(h), "observe", "but etcd had")
	// The right key with another incarnation's token is false too.
	h.States = []ObsState{{Stream: 1, Prim: "mutex", Name: "m0", At: ms(5), Rev: 5, Key: kb, Token: 2}}
	wantViolation(t, check(h, Config{TTL: 3 * time.Second}), "observe", "but etcd had")
}

func TestObserveCatchesTheSameHolderTwice(t *testing.T) {
	h := cleanMutex()
	h.States = []ObsState{
		{Stream: 1, Prim: "mutex", Name: "m0", At: ms(3), Rev: 3, Key: ka, Token: 2},
		{Stream: 1, Prim: "mutex", Name: "m0", At: ms(4), Rev: 4, Key: ka, Token: 2},
	}
	wantViolation(t, run(h), "observe", "same holder twice")
	// One key, a new incarnation (its lease locked again, the release
	// skipped by a re-read): a new holder, not a repeat.
	h.Events = []history.Event{put(2, ka, 2, ""), del(3, ka, 2), put(4, ka, 4, "")}
	h.States = []ObsState{
		{Stream: 1, Prim: "mutex", Name: "m0", At: ms(2), Rev: 2, Key: ka, Token: 2},
		{Stream: 1, Prim: "mutex", Name: "m0", At: ms(4), Rev: 4, Key: ka, Token: 4},
	}
	h.Seen, h.End = nil, 0
	wantClean(t, run(h))
}

func TestObserveCatchesAStreamThatDoesNotConverge(t *testing.T) {
	h := cleanMutex()
	h.States = []ObsState{{Stream: 1, Prim: "mutex", Name: "m0", At: ms(2), Rev: 2, Key: ka, Token: 2}}
	h.StreamEnds = map[int]int64{1: ms(5) + int64(20*time.Second)}
	h.Faults = []Fault{{Kind: FaultBlackhole, Start: ms(3), End: ms(6)}}
	rep := run(h)
	wantViolation(t, rep, "observe", "did not converge")
	// The same stream, caught up after the fault: clean.
	h.States = append(h.States, ObsState{Stream: 1, Prim: "mutex", Name: "m0", At: ms(9), Rev: 5, Key: kb, Token: 3})
	wantClean(t, check(h, Config{TTL: 3 * time.Second}))
}

func TestRegisterCatchesAStaleTokenAdmitted(t *testing.T) {
	h := cleanMutex()
	h.Regs = []RegOp{
		{Resource: "mutex/m0", Client: 0, Token: 5, Value: "x", Outcome: "accepted", Call: 10, Return: 20},
		{Resource: "mutex/m0", Client: 1, Token: 3, Value: "y", Outcome: "accepted", Call: 30, Return: 40},
	}
	wantViolation(t, run(h), "register", "not linearizable")
}

func TestRegisterCatchesAStaleRead(t *testing.T) {
	h := cleanMutex()
	h.Regs = []RegOp{
		{Resource: "mutex/m0", Client: 0, Token: 3, Value: "x", Outcome: "accepted", Call: 10, Return: 20},
		{Resource: "mutex/m0", Client: 1, Token: 5, Value: "y", Outcome: "accepted", Call: 30, Return: 40},
		{Resource: "mutex/m0", Client: 2, Read: true, Value: "x", Call: 50, Return: 60},
	}
	wantViolation(t, run(h), "register", "not linearizable")
	// A failed write may or may not have applied; a lost one never does.
	h.Regs = []RegOp{
		{Resource: "mutex/m0", Client: 0, Token: 3, Value: "x", Outcome: "accepted", Call: 10, Return: 20},
		{Resource: "mutex/m0", Client: 1, Token: 5, Value: "y", Outcome: "unknown", Call: 30},
		{Resource: "mutex/m0", Client: 3, Token: 6, Value: "z", Outcome: "lost", Call: 31, Return: 35},
		{Resource: "mutex/m0", Client: 2, Read: true, Value: "x", Call: 50, Return: 60},
		{Resource: "mutex/m0", Client: 2, Read: true, Value: "y", Call: 70, Return: 80},
	}
	wantClean(t, check(h, Config{TTL: 3 * time.Second}))
}

func TestGuardCatchesARejectionOfTheHighest(t *testing.T) {
	h := cleanMutex()
	h.Admits = []RegOp{
		{Resource: "mutex/m0", Client: 0, Token: 5, Outcome: "accepted", Call: 10, Return: 20},
		{Resource: "mutex/m0", Client: 1, Token: 5, Outcome: "stale", Call: 30, Return: 40},
	}
	wantViolation(t, run(h), "guard", "not linearizable")
}

func TestFenceCatchesAMarkGoingDown(t *testing.T) {
	h := cleanMutex()
	h.Events = append(h.Events, put(8, m0.Fence, 8, "5"), put(9, m0.Fence, 8, "4"))
	wantViolation(t, run(h), "fence", "went down at rev 9")
}

func TestEventLogCatchesAGap(t *testing.T) {
	h := cleanMutex()
	h.Events = append(h.Events[:3], h.Events[4:]...)
	wantViolation(t, run(h), "event-log", "skipped revisions 5 to 5")
}

func TestReportLastLine(t *testing.T) {
	h := cleanMutex()
	h.Ops = []Op{{Kind: "mutex.Lock"}, {Kind: "mutex.Lock", Err: "x"}}
	h.Faults = []Fault{{Kind: FaultBlackhole}, {Kind: FaultBlackhole}, {Kind: FaultMemberKill}}
	h.Events = append(h.Events, put(8, work, 4, kc))
	rep := run(h)
	rep.Seed = 42
	var b strings.Builder
	rep.Print(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := "robustness: 2 operations, 3 faults (2 kinds), 12 histories checked, 1 violations, seed 42" // with the free-lock, granted, frozen-fenced, request-delivered, distinct-tokens, given-up and told-truly checks
	if got := lines[len(lines)-1]; got != want {
		t.Errorf("last line %q, want %q", got, want)
	}
	if !strings.Contains(b.String(), "etcd rev 8") {
		t.Errorf("no excerpt of the history around the violation:\n%s", b.String())
	}
}

// Planted bug (e)'s trace: two Campaigns on one session return the same
// key, and the second returns while the first still leads.
func TestSharedKeysCatchesTwoHoldersOfOneKey(t *testing.T) {
	h := cleanMutex()
	first := &Hold{Prim: "mutex", Name: "m0", Client: "w1", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(5), Cause: "baton: released"}
	second := &Hold{Prim: "mutex", Name: "m0", Client: "w1", Key: ka, Token: 2, Acquired: ms(3), Ended: ms(5), Cause: "baton: released"}
	first.Untold = []*Hold{second}
	h.Holds = []*Hold{first, second}
	rep := run(h)
	wantViolation(t, rep, "shared-key", "two holders on one key")
	if len(rep.Violations) != 1 {
		t.Errorf("want the shared key reported once, got %+v", rep.Violations)
	}
	first.Untold = nil // the first had ended when the second returned: a takeover
	wantClean(t, check(h, Config{TTL: 3 * time.Second}))
}

// A permit holder told late is a handover judged like a lock's.
func TestKnowsFirstJudgesSemaphoreHandovers(t *testing.T) {
	sp := "/robust/v1/semaphore/s0/"
	s0 := NameInfo{Prim: "semaphore", Name: "s0", Prefix: sp, Work: workPrefix + "semaphore/s0", Limit: 2}
	a, b, c := sp+"a", sp+"b", sp+"c"
	h := &History{Names: []NameInfo{s0}, Events: []history.Event{
		put(2, a, 2, ""), put(3, b, 3, ""), put(4, c, 4, ""), del(5, a, 2),
	}, Holds: []*Hold{
		{Prim: "semaphore", Name: "s0", Client: "w0", Key: a, Token: 2, Acquired: ms(2), Ended: ms(8), Cause: "baton: ownership lost"},
		{Prim: "semaphore", Name: "s0", Client: "w2", Key: c, Token: 4, Acquired: ms(6), Ended: ms(9), Cause: "baton: released"},
	}}
	wantViolation(t, run(h), "knows-first", "semaphore s0: w0")
}

// A handle returned after its key's deletion was seen told its caller
// first only if its Context had already ended on return.
func TestKnowsFirstJudgesAHandleReturnedAfterItsKeyWent(t *testing.T) {
	h := cleanMutex()
	a := &Hold{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(6), Ended: ms(6) + 500, Cause: "baton: ownership lost", DeadOnReturn: true}
	h.Holds = []*Hold{a}
	wantClean(t, run(h))
	a.DeadOnReturn = false
	wantViolation(t, check(h, Config{TTL: 3 * time.Second}), "knows-first", "was returned as a holder, not yet told")
}

// A process's handle returned already ended (its Context done when the call
// returned it, reported by the process) was told first, however late the
// process reported the end; one returned live after its key went was not.
func TestKnowsFirstCountsAProcessHandleReturnedEndedAsTold(t *testing.T) {
	h := cleanMutex()
	a := &Hold{Prim: "mutex", Name: "m0", Client: "c0", Key: ka, Token: 2, Acquired: ms(6), Ended: ms(6) + 500, Cause: "baton: ownership lost", Child: true, DeadOnReturn: true}
	h.Holds = []*Hold{a}
	wantClean(t, run(h))
	a.DeadOnReturn = false
	wantViolation(t, check(h, Config{TTL: 3 * time.Second}), "knows-first", "after the grant was seen")
}

// A free lock is taken: b, first in line from rev 5, is neither returned
// nor gone within the bound.
func TestFreeLockCatchesAWaiterThatDoesNotTakeAFreeLock(t *testing.T) {
	h := &History{Names: []NameInfo{m0}, Events: []history.Event{
		put(2, ka, 2, "w0"), put(3, kb, 3, "w1"), del(5, ka, 2), del(9, kb, 3),
	}}
	h.Holds = []*Hold{{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(4), Cause: "baton: released"}}
	seenEvery(h)
	h.Seen[len(h.Seen)-1].At = ms(5) + int64(3*time.Second) // b's key went 3 s later
	rep := check(h, Config{TTL: 3 * time.Second})
	wantViolation(t, rep, "free-lock", `by "w1"`)

	// Returned within the bound, or gone within it: no violation.
	h.Holds = append(h.Holds, &Hold{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 3, Acquired: ms(40)})
	if rep := check(h, Config{TTL: 3 * time.Second}); rep.Free["violation"] != 0 {
		t.Errorf("a waiter that took the lock at once judged %v", rep.Free)
	}
	// A fault near excuses it.
	h.Holds = h.Holds[:1]
	h.Faults = []Fault{{Kind: FaultMemberKill, Start: ms(1), End: ms(3)}}
	if rep := check(h, Config{TTL: 3 * time.Second}); rep.Free["violation"] != 0 || rep.Free["excused: fault near"] != 1 {
		t.Errorf("with a fault near: %v", rep.Free)
	}
}

// The free-lock bound follows the run: a waiter that returned 2.5 s after
// its grant, while the health watch's reads took 800 ms each, is within 4
// of those round trips; the same waiter beside 20 ms reads is a violation.
// A process that stood still 1.2 s meanwhile gets that time back. And a
// window with no read answered, in which the process stood still longer
// than the bound, is not judged (starved), and says so.
func TestFreeLockBoundFollowsTheRunsRoundTripsAndStalls(t *testing.T) {
	waiter := func() *History {
		h := &History{Names: []NameInfo{m0}, Events: []history.Event{
			put(2, ka, 2, "w0"), put(3, kb, 3, "w1"), del(5, ka, 2), del(9, kb, 3),
		}}
		h.Holds = []*Hold{
			{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(4), Cause: "baton: released"},
			{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 3, Acquired: ms(5) + int64(2500*time.Millisecond)},
		}
		seenEvery(h)
		h.Seen[len(h.Seen)-1].At = ms(5) + int64(4*time.Second)
		return h
	}
	cfg := Config{TTL: 3 * time.Second}

	h := waiter()
	h.Probes = []Probe{{At: ms(5), RTT: 20 * time.Millisecond}, {At: ms(300), RTT: 20 * time.Millisecond}}
	wantViolation(t, check(h, cfg), "free-lock", "returned only at 2.505s, 2.5s after")

	h.Probes = []Probe{{At: ms(5), RTT: 800 * time.Millisecond}, {At: ms(900), RTT: 700 * time.Millisecond}}
	rep := check(h, cfg)
	if rep.Free["violation"] != 0 || rep.Free["taken within a longer bound"] != 1 {
		t.Errorf("beside 800 ms round trips: %v", rep.Free)
	}

	h = waiter()
	h.Stalls = []harness.Stall{{At: ms(600), Late: 1200 * time.Millisecond}}
	rep = check(h, cfg)
	if rep.Free["violation"] != 0 || rep.Free["taken within a longer bound"] != 1 {
		t.Errorf("with a 1.2 s stall: %v", rep.Free)
	}
	h.Stalls = []harness.Stall{{At: ms(600), Late: 200 * time.Millisecond}}
	wantViolation(t, check(h, cfg), "free-lock", "and 200ms this process stood still")

	// Never returned, its key gone 4 s after: with 1.6 s stood still and no
	// read answered meanwhile, the window is not judged.
	h = waiter()
	h.Holds = h.Holds[:1]
	h.Stalls = []harness.Stall{{At: ms(100), Late: 1600 * time.Millisecond}}
	rep = check(h, cfg)
	if rep.Free["violation"] != 0 || rep.Free["not judged (starved)"] != 1 {
		t.Errorf("a starved window: %v", rep.Free)
	}
}

// An etcdctl process's key (no value, or its proposal) first in line on a
// free lock is not judged while the etcdctl traffic runs: its return is
// a process's print read through a pipe. Outside that traffic the same
// key is judged.
func TestFreeLockDoesNotJudgeAnEtcdctlProcess(t *testing.T) {
	h := &History{Names: []NameInfo{m0}, Events: []history.Event{
		put(2, ka, 2, "w0"), put(3, kb, 3, ""), del(5, ka, 2), del(9, kb, 3),
	}}
	h.Holds = []*Hold{{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(4), Cause: "baton: released"}}
	seenEvery(h)
	h.Seen[len(h.Seen)-1].At = ms(5) + int64(3*time.Second)
	wantViolation(t, check(h, Config{TTL: 3 * time.Second}), "free-lock", `by ""`)

	h.Traffic = []TrafficRun{{Kind: TrafficEtcdctl, Start: ms(1), End: ms(10)}}
	if rep := check(h, Config{TTL: 3 * time.Second}); rep.Free["violation"] != 0 || rep.Free["not promised: an etcdctl process"] != 1 {
		t.Errorf("an etcdctl process's key judged: %v", rep.Free)
	}
	// A baton contender's key in the same window is still judged.
	h.Events[1] = put(3, kb, 3, "w1")
	if rep := check(h, Config{TTL: 3 * time.Second}); rep.Free["violation"] != 1 {
		t.Errorf("a baton waiter beside the etcdctl traffic not judged: %v", rep.Free)
	}
}

// Granted holders only: b's Campaign returned its key although the key
// went with a's in one revision and never led.
func TestGrantedCatchesAHolderThatNeverLed(t *testing.T) {
	h := &History{Names: []NameInfo{m0}, Events: []history.Event{
		put(2, ka, 2, ""), put(3, kb, 3, ""), put(4, kc, 4, ""), del(5, ka, 2), del(5, kb, 3),
	}}
	h.Holds = []*Hold{{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 3, Acquired: ms(6)}}
	wantViolation(t, run(h), "granted", "never let hold")
}

// etcd's concurrency.Election returns from Campaign once the keys ahead
// are gone, without reading its own: when an operator's range delete took
// them all in one revision, it returns leading with no key. Not baton's
// promise, and not judged under that fault; the same return with no fault
// is still a violation.
func TestGrantedDoesNotJudgeAnEtcdCampaignAfterAnOperatorsRangeDelete(t *testing.T) {
	h := &History{Names: []NameInfo{m0}, Events: []history.Event{
		put(2, ka, 2, ""), put(3, kb, 3, ""), del(4, ka, 2), del(4, kb, 3),
	}}
	h.Holds = []*Hold{{Prim: "mutex", Name: "m0", Client: "etcd.x2", Key: kb, Token: 3, Acquired: ms(6), Foreign: true}}
	wantViolation(t, run(h), "granted", "never let hold")

	h.Faults = []Fault{{Kind: FaultOperatorKeys, Start: ms(3), End: ms(4), Revs: []int64{4}}}
	rep := run(h)
	wantClean(t, rep)
	if rep.Oracles["granted: not promised (an etcd Campaign whose key an operator deleted)"] != 1 {
		t.Errorf("judgements %v", rep.Oracles)
	}
}

// A traffic kind that made no acquisition fails the run, unless the run
// was starved: then its last line says it was not reached.
func TestCoverageOfAStarvedRunIsNotJudged(t *testing.T) {
	h := cleanMutex()
	h.Traffic = []TrafficRun{{Kind: TrafficBurst}}
	rep := run(h)
	rep.covered(h, []string{TrafficBurst})
	wantViolation(t, rep, "coverage", "traffic kind burst ran 1 times without one acquisition")

	rep = run(h)
	rep.Starvation = harness.Starvation{Span: time.Minute, Lost: 30 * time.Second, Max: 400 * time.Millisecond}
	rep.covered(h, []string{TrafficBurst})
	wantClean(t, rep)
	if s := rep.Summary(); !strings.Contains(s, "STARVED (50% of the run lost to stalls, the longest 400ms: its timings are not results; not reached: burst)") {
		t.Errorf("summary %q", s)
	}
}

// etcd's Campaign can also return after its own key went (its session's
// lease expired on a starved machine): it never led, and a baton holder
// acting beside it was not untold.
func TestKnowsFirstDoesNotJudgeAnEtcdCampaignReturnedWithoutItsKey(t *testing.T) {
	h := &History{Names: []NameInfo{m0}, Events: []history.Event{
		put(2, ka, 2, "etcd.x2"), del(3, ka, 2), put(4, kb, 4, "etcd.y2"), del(9, kb, 4),
	}}
	y := &Hold{Prim: "mutex", Name: "m0", Client: "etcd.y2", Key: kb, Token: 4, Acquired: ms(5), Ended: ms(9), Cause: "baton: released"}
	x := &Hold{Prim: "mutex", Name: "m0", Client: "etcd.x2", Key: ka, Token: 2, Acquired: ms(6), Foreign: true}
	y.Untold = []*Hold{x}
	h.Holds = []*Hold{y, x}
	rep := run(h)
	for _, v := range rep.Violations {
		if v.Check == "knows-first" {
			t.Errorf("judged: %s", v.Msg)
		}
	}
	x.Foreign = false
	wantViolation(t, run(h), "knows-first", "had not been told")
}

// Lock-delay: a holder lost without releasing (its record stays, per hold
// or in an older build's form), and the next one returns 100 ms later,
// within the 2 s delay.
func TestLockDelayCatchesAnAcquisitionWithinTheDelay(t *testing.T) {
	for _, rec := range []string{"held/a/2", "held/a"} {
		t.Run(rec, func(t *testing.T) {
			n := m0
			n.Delay, n.DelayPrefix = 2*time.Second, "/robust/v1/delay/lock/m0/"
			rec := n.DelayPrefix + rec
			h := &History{Names: []NameInfo{n}, Events: []history.Event{
				put(2, ka, 2, ""), put(3, rec, 3, ""), put(4, kb, 4, ""), del(5, ka, 2), put(6, work, 6, kb),
			}}
			h.Holds = []*Hold{
				{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(5)},
				{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 4, Acquired: ms(5) + int64(100*time.Millisecond)},
			}
			rep := run(h)
			wantViolation(t, rep, "lock-delay", "within the lock-delay")
			wantViolation(t, rep, "lock-delay", "no marker expired")
		})
	}
}

// With the event watch possibly late (a member isolated while the loss was
// heard), its clock does not judge the delay; etcd's revisions still do: a
// write before the loss's marker expired is caught.
func TestLockDelayJudgedByRevisionsWhenTheWatchMayBeLate(t *testing.T) {
	n := m0
	n.Delay, n.DelayPrefix = 2*time.Second, "/robust/v1/delay/lock/m0/"
	rec := n.DelayPrefix + "held/a/2"
	marker := n.DelayPrefix + "until/a/2"
	for _, tc := range []struct {
		name   string
		events []history.Event
		caught bool
	}{
		{"marker gone before the next write", []history.Event{
			put(2, ka, 2, ""), put(3, rec, 3, ""), put(4, kb, 4, ""), del(5, ka, 2), del(6, rec, 3), put(6, marker, 6, ""),
			del(7, marker, 6), put(8, work, 8, kb)}, false},
		{"a write before the marker expired", []history.Event{
			put(2, ka, 2, ""), put(3, rec, 3, ""), put(4, kb, 4, ""), del(5, ka, 2), del(6, rec, 3), put(6, marker, 6, ""),
			put(7, work, 7, kb), del(8, marker, 6)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{Names: []NameInfo{n}, Events: tc.events}
			h.Holds = []*Hold{
				{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(4)},
				{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 4, Acquired: ms(5) + int64(100*time.Millisecond)},
			}
			h.Faults = []Fault{{Kind: FaultMemberIsolate, Start: ms(4), End: ms(5)}}
			rep := run(h)
			if tc.caught {
				wantViolation(t, rep, "lock-delay", "before the lock-delay marker")
				return
			}
			wantClean(t, rep)
		})
	}
}

// A frozen holder's write after its key went must be rejected.
func TestFrozenFencedCatchesALateWriteAccepted(t *testing.T) {
	h := cleanMutex()
	h.Holds = []*Hold{{Prim: "mutex", Name: "m0", Client: "c0", Key: ka, Token: 2, Acquired: ms(2), Frozen: true, Child: true}}
	h.Regs = []RegOp{{Resource: "mutex/m0", Client: 1000, Token: 2, Value: "late", Outcome: "accepted", Call: ms(6), Return: ms(7)}}
	wantViolation(t, run(h), "frozen-fenced", "the fence accepted it")
}

// An operator's CLI deletion is told from a holder's own by the key's
// incarnation and the revisions around the run, not by when the deletion
// was heard: the event log can hear it seconds after the CLI returned.
func TestKnowsFirstMatchesAnOperatorsCLIRunByRevision(t *testing.T) {
	for _, tc := range []struct {
		name          string
		from, to, tok int64
		judged        bool
	}{
		{"the run's deletion, heard late", 4, 5, 2, false},
		{"after the run's last revision", 4, 4, 2, true},
		{"before the run began", 5, 6, 2, true},
		{"another incarnation of the key", 4, 5, 9, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := cleanMutex()
			seenEvery(h)
			late := ms(4) + int64(2*time.Second)
			for i := range h.Seen {
				if h.Seen[i].Rev >= 5 {
					h.Seen[i].At = late + ms(h.Seen[i].Rev)
				}
			}
			h.Holds = []*Hold{{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: ms(2), Ended: late + int64(time.Second), Cause: "baton: ownership lost"}}
			h.Faults = []Fault{{Kind: FaultOperatorCLI, Start: ms(4) + 1, End: ms(4) + 2, Keys: []string{ka}, Tokens: []int64{tc.tok}, RevFrom: tc.from, RevTo: tc.to}}
			rep := check(h, Config{TTL: 3 * time.Second})
			if tc.judged {
				wantViolation(t, rep, "knows-first", "after the grant")
				return
			}
			wantClean(t, rep)
			if rep.Knows["operator"]["not promised"] != 1 {
				t.Errorf("knows %v, want the hand-over counted as the operator's, not promised", rep.Knows)
			}
		})
	}
}

// The drain: a shard moved from a member is started by the next owner
// only once the old fn returned; a start before is named, one after (or a
// release at the drain timeout, or an end that was not a move) is not.
func TestDrainedCatchesAMoveBeforeTheFnReturned(t *testing.T) {
	const moved = "shard: moved to another member"
	for _, tc := range []struct {
		name          string
		cause         string
		ret, next     int64
		wantViolation bool
	}{
		{"next fn started before the return", moved, ms(20), ms(15), true},
		{"next fn started after the return", moved, ms(20), ms(25), false},
		{"released at the drain timeout", moved, ms(10) + int64(shardDrain), ms(15), false},
		{"not a move", "baton: released", ms(20), ms(15), false},
		{"lost to a crash, ended as moved", moved, ms(20), ms(15), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{}
			if strings.HasPrefix(tc.name, "lost") {
				// m0's lease revoked by a fault at rev 5: its key went with it.
				sh := NameInfo{Prim: "shard", Name: "g0/00001", Prefix: mutexPrefix} // ka, kb: its keys
				h.Names = []NameInfo{sh}
				h.Events = []history.Event{put(2, ka, 2, ""), del(5, ka, 2)}
				h.Faults = []Fault{{Kind: FaultShardCrash, Start: ms(4), End: ms(5), Revs: []int64{5}}}
			}
			h.Holds = []*Hold{
				{Prim: "shard", Name: "g0/00001", Client: "shard.m0", Key: ka, Token: 2, Acquired: ms(2), Ended: ms(10), Cause: tc.cause},
				{Prim: "shard", Name: "g0/00001", Client: "shard.m1", Key: kb, Token: 4, Acquired: tc.next},
			}
			h.Ops = []Op{{Client: "shard.m0", Kind: "shard.Return", Name: "g0/00001", Key: ka, Token: 2, Call: tc.ret, Return: tc.ret}}
			rep := newReport(h)
			checkDrained(h, rep)
			if tc.wantViolation {
				wantViolation(t, rep, "drained", "before the fn of shard.m0")
				return
			}
			wantClean(t, rep)
		})
	}
}

// Planted bug (g)'s trace: an enqueue group that put two write locks of
// one session in one queue in one transaction, both keys created at rev 3:
// neither ahead of the other, one fencing token for two holders. Keys of
// two names created in one revision (a group as it should be) are not.
func TestDistinctTokensCatchesTwoKeysOfOneQueueInOneRevision(t *testing.T) {
	rp := "/robust/v1/rwlock/rw1/"
	rw1 := NameInfo{Prim: "rwmutex", Name: "rw1", Prefix: rp, Work: workPrefix + "rwmutex/rw1", Limit: 1}
	a, b := rp+"1.w1", rp+"1.w2"
	h := &History{Names: []NameInfo{rw1}, Events: []history.Event{
		put(3, a, 3, ""), put(3, b, 3, ""), put(4, rw1.Work, 4, a), del(5, a, 3), put(6, rw1.Work, 4, b), del(7, b, 3),
	}}
	wantViolation(t, run(h), "distinct-tokens", "rwmutex rw1: 1.w1 and 1.w2 created in one revision")

	clean := &History{Names: []NameInfo{m0, rw1}, Events: []history.Event{
		put(3, ka, 3, ""), put(3, a, 3, ""), put(4, work, 4, ka), put(5, rw1.Work, 5, a), del(6, ka, 3), del(6, a, 3),
	}}
	rep := run(clean)
	wantClean(t, rep)
	if got := rep.Oracles["distinct-tokens"]; got != 2 {
		t.Errorf("distinct-tokens judged %d creations, want 2", got)
	}
}

// The shard group's ownership: a shard with no key queued while a live
// member could take it is named once that lasts past the bound; not when
// it is short, when every live member is stuck on it (its member key
// names it), when a client was cut off as it began (a fault that began
// later cuts the judged stretch short), or while the only member that
// could take it had just joined.
func TestOwnedCatchesAShardNobodyQueuesOn(t *testing.T) {
	const g = "/robust/v1/shard/g0/"
	for _, tc := range []struct {
		name          string
		member        string        // m0's value
		joined        time.Duration // when m0's key was seen made (shard 1 is released at 10 s)
		gap           time.Duration
		fault         string
		wantViolation bool
	}{
		{"unqueued past the bound", `{"count":4}`, 0, 4 * time.Second, "", true},
		{"unqueued briefly", `{"count":4}`, 0, 500 * time.Millisecond, "", false},
		{"stuck on the only live member", `{"count":4,"stuck":[1]}`, 0, 4 * time.Second, "", false},
		{"stuck on another shard", `{"count":4,"stuck":[2]}`, 0, 4 * time.Second, "", true},
		{"a client cut off", `{"count":4}`, 0, 4 * time.Second, FaultBlackhole, false},
		{"a client cut off after the bound", `{"count":4}`, 0, 6 * time.Second, FaultBlackhole + " late", true},
		{"just joined", `{"count":4}`, 9500 * time.Millisecond, 4 * time.Second, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{}
			for id := 0; id < shardCount; id++ {
				h.Names = append(h.Names, NameInfo{Prim: "shard", Name: fmt.Sprintf("g0/%05d", id), Prefix: fmt.Sprintf("%ss/%05d/", g, id)})
			}
			k := func(id int, l string) string { return fmt.Sprintf("%ss/%05d/%s", g, id, l) }
			h.Events = []history.Event{
				put(2, g+"m/m0", 2, tc.member),
				put(3, k(0, "a"), 3, "m0"), put(3, k(1, "a"), 3, "m0"), put(3, k(2, "a"), 3, "m0"), put(3, k(3, "a"), 3, "m0"),
				del(4, k(1, "a"), 3), // shard 1 released: nobody queued
				put(5, k(1, "b"), 5, "m0"),
				del(6, g+"m/m0", 2), del(6, k(0, "a"), 3), del(6, k(1, "b"), 5), del(6, k(2, "a"), 3), del(6, k(3, "a"), 3),
			}
			at := func(d time.Duration) int64 { return int64(d) }
			h.Seen = []Observed{{2, at(tc.joined)}, {3, at(tc.joined + time.Millisecond)}, {4, at(10 * time.Second)},
				{5, at(10*time.Second + tc.gap)}, {6, at(11*time.Second + tc.gap)}}
			h.End = 7
			if kind, late := strings.CutSuffix(tc.fault, " late"); late {
				h.Faults = []Fault{{Kind: kind, Start: at(13 * time.Second), End: at(14 * time.Second)}}
			} else if tc.fault != "" {
				h.Faults = []Fault{{Kind: tc.fault, Start: at(10 * time.Second), End: at(11 * time.Second)}}
			}
			rep := newReport(h)
			checkOwned(h, rep)
			if tc.wantViolation {
				wantViolation(t, rep, "owned", "shard g0/00001: no member queued on it")
				return
			}
			wantClean(t, rep)
		})
	}
}

func TestMetricLabelsCatchesMoreValuesThanTheLimit(t *testing.T) {
	h := cleanMutex()
	h.MetricLabelLimit = 2
	h.Metrics = []MetricSample{
		{Process: "main", At: ms(1), Names: []string{"m0", "m1"}},
		{Process: "c0", At: ms(1), Names: []string{"m0", "e0"}},
		{Process: "main", At: ms(2), Names: []string{"m1"}}, // m0's series deleted, its place kept
		{Process: "main", At: ms(3), Names: []string{"m1", "w0"}},
	}
	rep := run(h)
	wantViolation(t, rep, "metric-labels", "process main: its Registerer carried 3 name label values by 3ms (m0, m1, w0), more than its limit 2")
	if len(rep.Violations) != 1 {
		t.Errorf("violations %+v, want main's only: c0 has its own Registerer", rep.Violations)
	}
}

func TestMetricLabelsCatchesACollapseNotCounted(t *testing.T) {
	other := map[string]bool{"name": true}
	h := cleanMutex()
	h.MetricLabelLimit = 1
	h.Metrics = []MetricSample{
		{Process: "main", At: ms(1), Names: []string{"m0"}},
		{Process: "main", At: ms(2), Names: []string{"m0"}, Other: other},
		{Process: "main", At: ms(3), Names: []string{"m0"}, Other: other},
	}
	wantViolation(t, run(h), "metric-labels", `process main: name="(other)" exported from 2ms on, but baton_metric_labels_collapsed_total{label="name"} stayed 0 in all 3 samples`)

	// Counted by the last sample: a gather is not atomic, so the sample
	// that first shows "(other)" may read the counter before its increment.
	clean := cleanMutex()
	clean.MetricLabelLimit = 1
	clean.ExplicitLabels = []string{"observers"} // a caller's label is not counted
	clean.Metrics = []MetricSample{
		{Process: "main", At: ms(1), Names: []string{"m0", "observers"}},
		{Process: "main", At: ms(2), Names: []string{"m0"}, Other: other},
		{Process: "main", At: ms(3), Names: []string{"m0"}, Other: other, Collapsed: map[string]float64{"name": 2}},
		{Process: "c0", At: ms(3), Resources: []string{"mutex/m0"}},
	}
	rep := run(clean)
	wantClean(t, rep)
	if got := rep.Oracles["metric-labels"]; got != 8 {
		t.Errorf("metric-labels judged %d samples, want 8 (4 samples, 2 labels each)", got)
	}
}

// etcd's Campaign returns once the keys older than its own are gone,
// without reading its own: granted first, its key deleted (its lease
// revoked), it can come back while the next leader holds. That is not the
// next leader's successor acquiring; a baton contender doing the same is.
func TestKnowsFirstDoesNotJudgeAnEtcdCampaignReturningLate(t *testing.T) {
	h := &History{Names: []NameInfo{m0}, Events: []history.Event{
		put(2, ka, 2, ""), put(3, kb, 3, ""), del(4, ka, 2), del(8, kb, 3),
	}}
	x := &Hold{Prim: "mutex", Name: "m0", Client: "etcd.x2", Key: ka, Token: 2, Acquired: ms(6), Ended: ms(9), Foreign: true}
	p := &Hold{Prim: "mutex", Name: "m0", Client: "transfer.t0", Key: kb, Token: 3, Acquired: ms(4) + 1, Ended: ms(8), Cause: "baton: released", Untold: []*Hold{x}}
	h.Holds = []*Hold{p, x}
	rep := run(h)
	for _, v := range rep.Violations {
		if v.Check == "knows-first" {
			t.Errorf("an etcd Campaign returning late judged: %+v", v)
		}
	}
	if rep.Knows["etcd contender"]["returned after its key went"] != 1 {
		t.Errorf("the late return not counted: %v", rep.Knows)
	}
	x.Foreign = false
	wantViolation(t, check(h, Config{TTL: 3 * time.Second}), "knows-first", "etcd.x2 acquired (token 2, a) at 6ms while transfer.t0 (token 3, b) had not been told")
}

// A stall of this process lengthens the free-lock bound once: the health
// reads it delayed measured it too, and are counted without it.
func TestFreeLockBoundCountsAStallOnce(t *testing.T) {
	stall := 1200 * time.Millisecond
	h := &History{
		Stalls: []harness.Stall{{At: ms(100), Late: stall}},
		Probes: []Probe{{At: ms(90), RTT: stall + 20*time.Millisecond}}, // a read of 20 ms, delayed by the stall
	}
	deadline, rtt, stalled := h.freeDeadline(ms(0), DefaultFreeBound)
	if stalled != stall {
		t.Errorf("stalled %v, want %v", stalled, stall)
	}
	if want := ms(0) + int64(DefaultFreeBound) + int64(stall); deadline != want {
		t.Errorf("deadline %v (round trip %v), want the bound plus the stall, %v", time.Duration(deadline), rtt, time.Duration(want))
	}
	// A read slow on its own (the server's, not this process's) still
	// stretches the bound to its round trips.
	h.Stalls = nil
	h.Probes = []Probe{{At: ms(90), RTT: time.Second}}
	if deadline, _, _ := h.freeDeadline(ms(0), DefaultFreeBound); deadline != int64(freeRoundTrips*time.Second) {
		t.Errorf("deadline %v, want %d round trips of 1s", time.Duration(deadline), freeRoundTrips)
	}
}

// A baton serve caller counts itself told once its validity deadline has
// passed, whether or not its stream's lost came: a deletion seen after
// the deadline, or an acquisition returned after it, finds it told; one
// before it does not.
func TestKnowsFirstCountsAServeCallersValidityAsTold(t *testing.T) {
	for _, tc := range []struct {
		deadline int64
		told     bool
	}{{ms(4), true}, {ms(6), false}} {
		h := cleanMutex()
		valid := new(atomic.Int64)
		valid.Store(tc.deadline)
		a := &Hold{Prim: "mutex", Name: "m0", Client: "serve.s0-0", Key: ka, Token: 2, Acquired: ms(2), validTo: valid}
		h.acquired(a, m0, make(chan struct{}))
		h.deleteSeen(ka, 2, ms(5))
		b := &Hold{Prim: "mutex", Name: "m0", Client: "w1", Key: kb, Token: 3, Acquired: ms(5) + 2}
		h.acquired(b, m0, make(chan struct{}))
		if a.Told != tc.told || (len(a.Untold) == 0) != tc.told {
			t.Errorf("deadline %v: told %v, untold %d; want told %v", time.Duration(tc.deadline), a.Told, len(a.Untold), tc.told)
		}
		rep := run(h)
		if tc.told {
			wantClean(t, rep)
		} else {
			wantViolation(t, rep, "knows-first", "had not been told when its key's deletion (rev 5) was seen")
		}
	}
}

// A waiter with a lock-delay that turns a lost holder's record into a
// marker after its grant waits for that marker: when the marker outlives
// its key (the run stopped it first), it never returned while its key
// lasted, rightly, and is not a waiter that missed a free lock.
func TestFreeLockWaitsForAMarkerPutAfterTheGrant(t *testing.T) {
	n := m0
	n.Delay, n.DelayPrefix = 2*time.Second, "/robust/v1/delay/lock/m0/"
	marker := n.DelayPrefix + "until/x/1"
	sec := func(s float64) int64 { return int64(s * float64(time.Second)) }
	events := []history.Event{
		put(2, ka, 2, ""), put(3, kb, 3, ""), del(5, ka, 2), put(6, marker, 6, ""), del(8, kb, 3),
	}
	h := &History{Names: []NameInfo{n}, Events: events,
		Seen:  []Observed{{Rev: 2, At: sec(0.1)}, {Rev: 3, At: sec(0.2)}, {Rev: 5, At: sec(1)}, {Rev: 6, At: sec(1.01)}, {Rev: 8, At: sec(3)}},
		End:   9,
		Holds: []*Hold{{Prim: "mutex", Name: "m0", Client: "w0", Key: ka, Token: 2, Acquired: sec(0.1), Ended: sec(0.9), Cause: "baton: released"}},
	}
	rep := check(h, Config{TTL: 3 * time.Second})
	for _, v := range rep.Violations {
		if v.Check == "free-lock" {
			t.Fatalf("a waiter held back by a marker that outlived its key judged: %s", v.Msg)
		}
	}
	// Without the marker the same waiter missed a free lock.
	h.Events = []history.Event{put(2, ka, 2, ""), put(3, kb, 3, ""), del(5, ka, 2), del(8, kb, 3)}
	h.Seen = []Observed{{Rev: 2, At: sec(0.1)}, {Rev: 3, At: sec(0.2)}, {Rev: 5, At: sec(1)}, {Rev: 8, At: sec(3)}}
	wantViolation(t, check(h, Config{TTL: 3 * time.Second}), "free-lock", "first in line on a free lock")
}

// An operator's request that never reached a serve caller still holding
// is a violation, unless a fault was in progress during the wait; one
// that reached it is judged.
func TestRequestDeliveredJudgesTheWait(t *testing.T) {
	wait := func(kind string, faults ...Fault) *History {
		return &History{Events: []history.Event{put(2, "/x", 2, "")}, Ops: []Op{{Client: "serve.c1", Kind: kind, Name: "m1", Call: ms(1000), Return: ms(11000), Token: 7}}, Faults: faults}
	}
	rep := run(wait(opReleaseRequested))
	wantClean(t, rep)
	if rep.Oracles["request-delivered"] != 1 {
		t.Errorf("a delivered request judged %d times, want 1", rep.Oracles["request-delivered"])
	}
	wantViolation(t, run(wait(opReleaseRequested+".timeout")), "request-delivered", "did not reach the holder's stream (token 7)")
	wantClean(t, run(wait(opReleaseRequested+".timeout", Fault{Kind: "serve-freeze", Start: ms(5000), End: ms(9000)})))
	wantClean(t, run(wait(opReleaseRequested+".lost")))
}
