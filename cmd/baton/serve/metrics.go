package serve

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's own series, beside the library's (baton_lock_*,
// baton_session_*) on the same registry. Labels are bounded: results and
// causes, never names or identities.
type metrics struct {
	holds      *prometheus.GaugeVec   // state: waiting, held
	requests   *prometheus.CounterVec // result: held, refused, busy, timeout, canceled, error
	ended      *prometheus.CounterVec // cause
	heartbeats *prometheus.CounterVec // result: ok, lost, unknown
	// sendTimeouts counts messages a caller did not take within sendTimeout.
	sendTimeouts prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		holds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_serve_holds", Help: "Hold, Lead and Shards streams open, by state (waiting, held).",
		}, []string{"state"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_serve_hold_requests_total", Help: "Hold, Lead and Shards requests by result (held, refused, busy, timeout, canceled, error).",
		}, []string{"result"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_serve_holds_ended_total", Help: "Holds, terms and shard memberships ended, by cause (released, stream_closed, heartbeat_timeout, key_gone, ...).",
		}, []string{"cause"}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_serve_heartbeats_total", Help: "Heartbeats by result (ok, lost, unknown).",
		}, []string{"result"}),
		sendTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_serve_send_timeouts_total", Help: "Messages of Hold and Lead streams the caller did not take within the send timeout (a twentieth of the TTL).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.holds, m.requests, m.ended, m.heartbeats, m.sendTimeouts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
