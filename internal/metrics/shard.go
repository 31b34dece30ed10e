package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Shards holds the collectors of a shard group's member: how many shards
// it owns, the moves it took part in as the new owner, and how long a shard
// it took had been without an owner. Registered like Metrics: on the
// caller's Registerer, reused when already there.
type Shards struct {
	Owned    *prometheus.GaugeVec
	Moves    *prometheus.CounterVec
	Unowned  *prometheus.HistogramVec
	ns, name string
	member   string
}

// The reasons a shard moves.
const (
	MoveJoin  = "join"  // given up by a live member, to balance a join
	MoveLeave = "leave" // released by a member that left the group
	MoveLoss  = "loss"  // its owner's lease ended without a release
)

// Buckets for a shard's time without an owner: 1 ms to about 65 s.
var unownedBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

// NewShards builds and registers the collectors of one member of group
// name in namespace ns. A nil reg returns a nil *Shards, whose methods do
// nothing.
func NewShards(reg prometheus.Registerer, ns, name, member string) (*Shards, error) {
	if reg == nil {
		return nil, nil
	}
	c := collectors{reg: reg}
	s := &Shards{
		Owned: c.gauge("baton_shard_owned", "Shards this member of the group owns.", []string{"namespace", "name", "member"}),
		Moves: c.counter("baton_shard_moves_total", "Shards this member took over from another member, by reason: join, leave, loss.", reasonLabels),
		Unowned: c.histogram("baton_shard_unowned_duration_seconds", "Time a shard this member took over was without an owner: from the old owner's key's deletion, as this member saw it, to the new work's start.",
			unownedBuckets, nameLabels),
		ns: ns, name: name, member: member,
	}
	return s, c.err
}

// SetOwned records how many shards the member owns.
func (s *Shards) SetOwned(n int) {
	if s != nil {
		s.Owned.WithLabelValues(s.ns, s.name, s.member).Set(float64(n))
	}
}

// Moved records one shard taken over for reason, unowned for d.
func (s *Shards) Moved(reason string, d time.Duration) {
	if s != nil {
		s.Moves.WithLabelValues(s.ns, s.name, reason).Inc()
		s.Unowned.WithLabelValues(s.ns, s.name).Observe(d.Seconds())
	}
}

// Forget deletes the member's owned series (it left the group).
func (s *Shards) Forget() {
	if s != nil {
		s.Owned.DeleteLabelValues(s.ns, s.name, s.member)
	}
}
