package dev

import (
	"fmt"
	"syscall"
	"time"
)

// The demo's steps, in order.
type demoPhase int

const (
	phaseFirstLeader  demoPhase = iota // wait for a leader
	phaseLeaderWrites                  // it writes; then freeze it between check and write
	phaseFailover                      // wait for another worker to lead
	phaseNewWrites                     // the new leader writes; then resume the frozen one
	phaseZombie                        // wait for the frozen one's late write
	phaseZombieLost                    // wait for it to notice the loss
	phaseDone
)

var phaseNames = map[demoPhase]string{
	phaseFirstLeader:  "waiting for a first leader",
	phaseLeaderWrites: "waiting for the leader's writes",
	phaseFailover:     "waiting for another worker to lead after the freeze",
	phaseNewWrites:    "waiting for the new leader's writes",
	phaseZombie:       "waiting for the resumed leader's late write",
	phaseZombieLost:   "waiting for the resumed leader to notice its loss",
}

// scenario drives the demo from the events it hears.
type scenario struct {
	o       demoOptions
	workers map[string]*demoWorker
	r       *demoReport
	note    func(who, format string, a ...any)

	phase    demoPhase
	leader   string // the worker whose writes count in this phase
	count    int
	stopped  time.Time
	resumed  time.Time
	exited   map[string]bool
	tokens   map[string]int64 // each worker's current or last token
	lostWait *time.Timer
}

func newScenario(o demoOptions, workers map[string]*demoWorker, r *demoReport, note func(string, string, ...any)) *scenario {
	return &scenario{o: o, workers: workers, r: r, note: note, exited: map[string]bool{}, tokens: map[string]int64{}}
}

func (s *scenario) done() bool { return s.phase == phaseDone }

func (s *scenario) stalled(interrupted bool) string {
	if interrupted {
		return "interrupted while " + phaseNames[s.phase]
	}
	return fmt.Sprintf("gave up after %v while %s", s.o.timeout, phaseNames[s.phase])
}

func (s *scenario) handle(ev demoEvent) {
	switch {
	case ev.ledger != nil:
		s.r.Ledger = append(s.r.Ledger, *ev.ledger)
		s.onLedger(*ev.ledger)
	case ev.etcd != nil:
		s.onEtcd(ev)
	case ev.worker != "" && ev.ev == nil:
		s.exited[ev.worker] = true
		if s.phase != phaseDone {
			s.note(ev.worker, "exited")
		}
	case ev.ev != nil:
		s.onWorker(ev.at, ev.worker, *ev.ev)
	}
}

func (s *scenario) onEtcd(ev demoEvent) {
	l := *ev.etcd
	if n := len(s.r.Leaders); n > 0 && s.r.Leaders[n-1].To.IsZero() {
		s.r.Leaders[n-1].To = ev.at
	}
	if l.IsZero() {
		s.note("etcd", "no leader")
		return
	}
	s.r.Leaders = append(s.r.Leaders, leaderSpan{Worker: l.Value, Token: int64(l.Token), From: ev.at})
	what := fmt.Sprintf("leader is %s (token %d)", l.Value, l.Token)
	if !s.stopped.IsZero() && s.resumed.IsZero() && s.phase == phaseFailover {
		what += fmt.Sprintf(": %s's lease expired while it was frozen", s.r.Frozen)
	}
	s.note("etcd", "%s", what)
}

func (s *scenario) onWorker(at time.Time, id string, ev workerEvent) {
	switch ev.Ev {
	case evCampaign:
		s.note(id, "campaigning")
	case evLeader:
		s.tokens[id] = ev.Token
		s.note(id, "LEADER with fencing token %d", ev.Token)
		switch {
		case s.phase == phaseFirstLeader || s.phase == phaseLeaderWrites && id != s.leader:
			s.phase, s.leader, s.count = phaseLeaderWrites, id, 0
		case s.phase == phaseFailover && id != s.r.Frozen:
			s.r.Failover, s.r.NewLeader = at.Sub(s.stopped), id
			s.phase, s.leader, s.count = phaseNewWrites, id, 0
		case s.phase == phaseNewWrites && id != s.r.Frozen:
			s.leader, s.count = id, 0 // leadership moved again on its own
		}
	case evGap:
		if s.phase == phaseLeaderWrites && id == s.leader && s.count >= s.o.writes {
			// The worker has just checked that it leads and is about to
			// write: freeze it right there.
			s.r.Frozen, s.stopped = id, time.Now()
			s.r.Timeline = append(s.r.Timeline, timelineEntry{At: s.stopped, Who: "demo", What: fmt.Sprintf(
				"SIGSTOP %s (token %d) after its check, before its next write; its lease (%v) will expire", id, ev.Token, s.o.ttl)})
			_ = s.workers[id].cmd.Process.Signal(syscall.SIGSTOP)
			s.phase = phaseFailover
		}
	case evWrite:
		if ev.Status == "failed" {
			s.note(id, "write %d failed: %s", ev.Seq, ev.Detail)
		}
	case evLost:
		s.note(id, "lost leadership (token %d): %s", ev.Token, ev.Detail)
		if id == s.r.Frozen && (s.phase == phaseZombieLost || s.phase == phaseZombie) {
			if s.phase == phaseZombie {
				s.r.Problems = append(s.r.Problems, id+" noticed its loss without attempting a late write")
			}
			s.phase = phaseDone
		}
	case evResigned:
		s.note(id, "resigned (token %d)", ev.Token)
	case evError:
		s.note(id, "error: %s", ev.Detail)
	}
}

func (s *scenario) onLedger(e ledgerEntry) {
	switch s.phase {
	case phaseLeaderWrites:
		if e.Accepted && e.Worker == s.leader {
			s.count++
		}
	case phaseNewWrites:
		if e.Accepted && e.Worker == s.leader {
			s.count++
		}
		if s.count >= s.o.writes {
			s.resumed = time.Now()
			s.r.Timeline = append(s.r.Timeline, timelineEntry{At: s.resumed, Who: "demo", What: fmt.Sprintf(
				"SIGCONT %s: it resumes where it was frozen, about to write with token %d", s.r.Frozen, s.tokens[s.r.Frozen])})
			_ = s.workers[s.r.Frozen].cmd.Process.Signal(syscall.SIGCONT)
			s.phase = phaseZombie
		}
	case phaseZombie:
		if e.Worker == s.r.Frozen {
			z := e
			s.r.Zombie = &z
			s.phase = phaseZombieLost
		}
	}
}
