package shard

import (
	"fmt"
	"time"

	"github.com/batonhq/baton/internal/metrics"
)

// The member's metrics: the shards it owns, and each move it takes part
// in as the new owner, with its reason and how long the shard had no
// owner (from the old owner's key's deletion, as this member saw it, to
// the new fn's start).

// vacancy is a shard whose owner's key this member saw deleted.
type vacancy struct {
	at     time.Time
	reason string
}

// gone is an owner's key the watch saw deleted, at rev.
type gone struct {
	id  int
	c   contender
	rev int64
}

// vacated notes the shards whose owner's key went in one watch response;
// left holds the member keys deleted in it (member and lease, to their
// revision), for the reason: its lease (a loss) when the member's key went
// in the same revision, a leave when the member is no longer live on that
// lease, a join otherwise (the assignment moved it).
func (e *run) vacated(keys []gone, left map[string]int64) {
	now := time.Now()
	for _, v := range keys {
		if e.leases[v.c.lease] != nil {
			continue // this member's own release
		}
		reason := metrics.MoveJoin
		if rev, ok := left[leftKey(v.c.member, v.c.lease)]; ok && rev == v.rev {
			reason = metrics.MoveLoss
		} else if m, ok := e.v.members[v.c.member]; !ok || m.lease != v.c.lease {
			reason = metrics.MoveLeave
		}
		if l := e.local[v.id]; l != nil && l.pending {
			l.pending = false
			e.met.Moved(reason, 0) // the work started before this member saw the key go
			continue
		}
		e.vacancies[v.id] = vacancy{at: now, reason: reason}
	}
}

func leftKey[L ~int64](member string, lease L) string {
	return member + "\x00" + fmt.Sprint(int64(lease))
}

// taken forgets a vacancy another member filled.
func (e *run) taken(id int) { delete(e.vacancies, id) }

// movedIn counts shard l's move to this member as its fn starts, or marks
// it pending until this member sees the old owner's key go.
func (e *run) movedIn(l *local) {
	if v, ok := e.vacancies[l.id]; ok {
		delete(e.vacancies, l.id)
		e.met.Moved(v.reason, time.Since(v.at))
	} else {
		l.pending = true
	}
}

// owns counts shard l in the owned gauge, or no longer.
func (e *run) owns(l *local, owned bool) {
	if l.owned == owned {
		return
	}
	l.owned = owned
	if owned {
		e.owned++
	} else {
		e.owned--
	}
	e.met.SetOwned(e.owned)
}
