package scale

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
)

// ServerStats is what the etcd member reports of itself, read from its
// Prometheus metrics: an embedded member registers them with the process's
// default registry.
type ServerStats struct {
	// Watchers is etcd_debugging_mvcc_watcher_total, WatchStreams
	// etcd_debugging_mvcc_watch_stream_total.
	Watchers     float64 `json:"watchers"`
	WatchStreams float64 `json:"watch_streams"`
	// Keys is etcd_debugging_mvcc_keys_total: live keys.
	Keys float64 `json:"keys"`
	// DBBytes is etcd_mvcc_db_total_size_in_bytes, DBInUseBytes the part
	// in use (etcd_mvcc_db_total_size_in_use_in_bytes).
	DBBytes      float64 `json:"db_bytes"`
	DBInUseBytes float64 `json:"db_in_use_bytes"`
	// Events is etcd_debugging_mvcc_events_total: events sent to watchers.
	Events float64 `json:"events"`
	// WatchMessages is grpc_server_msg_sent_total of the Watch method:
	// watch responses sent, each carrying one or more events.
	WatchMessages float64 `json:"watch_messages"`
	// Unary is grpc_server_handled_total summed over unary methods (Range,
	// Txn, Put, LeaseGrant…): requests the server answered.
	Unary float64 `json:"unary"`
	// StreamMessages is grpc_server_msg_received_total of bidirectional
	// streams: messages clients sent on them (lease renewals, watch
	// requests).
	StreamMessages float64 `json:"stream_messages"`
	// Ranges, Txns, Puts and Deletes are etcd_mvcc_*_total: operations applied.
	Ranges, Txns, Puts, Deletes float64
}

// fields are s's figures by metric name; a label after a space keeps only
// the samples with that label (grpc_type=unary: unary calls alone).
func (s *ServerStats) fields() map[string]*float64 {
	return map[string]*float64{
		"etcd_debugging_mvcc_watcher_total":                    &s.Watchers,
		"etcd_debugging_mvcc_watch_stream_total":               &s.WatchStreams,
		"etcd_debugging_mvcc_keys_total":                       &s.Keys,
		"etcd_mvcc_db_total_size_in_bytes":                     &s.DBBytes,
		"etcd_mvcc_db_total_size_in_use_in_bytes":              &s.DBInUseBytes,
		"etcd_debugging_mvcc_events_total":                     &s.Events,
		"grpc_server_msg_sent_total grpc_method=Watch":         &s.WatchMessages,
		"grpc_server_handled_total grpc_type=unary":            &s.Unary,
		"grpc_server_msg_received_total grpc_type=bidi_stream": &s.StreamMessages,
		"etcd_mvcc_range_total":                                &s.Ranges,
		"etcd_mvcc_txn_total":                                  &s.Txns,
		"etcd_mvcc_put_total":                                  &s.Puts,
		"etcd_mvcc_delete_total":                               &s.Deletes,
	}
}

// ReadServer gathers the member's metrics from g (nil: the process's
// default gatherer, where an embedded member registers them).
func ReadServer(g prometheus.Gatherer) (ServerStats, error) {
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	mfs, err := g.Gather()
	if err != nil {
		return ServerStats{}, fmt.Errorf("gather etcd metrics: %w", err)
	}
	byName := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	var s ServerStats
	found := 0
	for spec, p := range s.fields() {
		name, filter, _ := strings.Cut(spec, " ")
		label, value, _ := strings.Cut(filter, "=")
		if mf := byName[name]; mf != nil {
			*p = sumWhere(mf, label, value)
			found++
		}
	}
	if found < 3 {
		return ServerStats{}, fmt.Errorf("no etcd server metrics in the registry (is an embedded member running in this process?)")
	}
	return s, nil
}

// sumWhere sums the metric's samples whose label has value (every sample
// when label is empty).
func sumWhere(mf *dto.MetricFamily, label, value string) float64 {
	var sum float64
	for _, m := range mf.GetMetric() {
		if label != "" && !hasLabel(m, label, value) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// Sub is s minus earlier, field by field: the growth between two reads.
func (s ServerStats) Sub(earlier ServerStats) ServerStats {
	return s.combine(earlier, func(a, b float64) float64 { return a - b })
}

// Max is the field-by-field maximum of s and o, for the peak of gauges
// sampled over a phase.
func (s ServerStats) Max(o ServerStats) ServerStats {
	return s.combine(o, func(a, b float64) float64 { return max(a, b) })
}

func (s ServerStats) combine(o ServerStats, f func(a, b float64) float64) ServerStats {
	var out ServerStats
	fo, fs := o.fields(), s.fields()
	for k, p := range out.fields() {
		*p = f(*fs[k], *fo[k])
	}
	return out
}

// ServerCostConfig sizes the server-cost phase: Locks mutexes held, spread
// over Sessions baton sessions and Namespaces namespaces (each session
// holds in each), then a queue of Waiters on one name.
type ServerCostConfig struct {
	Locks, Sessions, Namespaces int
	Waiters, Clients            int
	Deadline                    time.Duration
}

// DefaultServerCostConfig: 10,000 locks over 4 sessions and 2 namespaces,
// 1,000 waiters over 10 clients.
func DefaultServerCostConfig() ServerCostConfig {
	return ServerCostConfig{Locks: 10_000, Sessions: 4, Namespaces: 2, Waiters: 1000, Clients: 10, Deadline: 5 * time.Minute}
}

// Validate rejects sizes the phase cannot take, naming the field and bound.
func (c ServerCostConfig) Validate() error {
	var errs []error
	if c.Sessions < 1 {
		errs = append(errs, fmt.Errorf("server: Sessions must be at least 1, got %d", c.Sessions))
	}
	if c.Namespaces < 1 {
		errs = append(errs, fmt.Errorf("server: Namespaces must be at least 1, got %d", c.Namespaces))
	}
	if c.Locks < c.Sessions*c.Namespaces {
		errs = append(errs, fmt.Errorf("server: Locks must be at least Sessions × Namespaces (%d), got %d", c.Sessions*c.Namespaces, c.Locks))
	}
	if c.Waiters < 1 || c.Clients < 1 || c.Clients > c.Waiters {
		errs = append(errs, fmt.Errorf("server: Waiters must be at least Clients and Clients at least 1, got %d and %d", c.Waiters, c.Clients))
	}
	errs = append(errs, checkDeadline("server", c.Deadline))
	return errors.Join(errs...)
}

// ServerCost is what held locks and waiters cost the etcd member.
type ServerCost struct {
	Locks, Sessions, Namespaces, Waiters int
	// HeldGrowth is the member's growth with the locks held.
	HeldGrowth ServerStats `json:"held_growth"`
	// HeldWatchers is the watchers added while holding: one per held key
	// (its own deletion's), on one watch stream per session.
	HeldWatchers    float64 `json:"held_watchers"`
	WatchersPerLock float64 `json:"watchers_per_lock"`
	KeysPerLock     float64 `json:"keys_per_lock"`
	DBBytesPerLock  float64 `json:"db_bytes_per_lock"`
	// InUseBytesPerLock is the growth of the db's part in use per lock.
	InUseBytesPerLock float64 `json:"db_in_use_bytes_per_lock"`
	// Per waiter, from a waiters run of Waiters.
	WatchersPerWaiter float64 `json:"watchers_per_waiter"`
	KeysPerWaiter     float64 `json:"keys_per_waiter"`
	DBBytesPerWaiter  float64 `json:"db_bytes_per_waiter"`
	// KeysLeft and WatchersLeft after every session's Close.
	KeysLeft     int     `json:"keys_left"`
	WatchersLeft float64 `json:"watchers_left"`
}

// MeasureServerCost holds cfg.Locks on baton sessions of one client and
// reads the member's watchers, keys and db size (the member at endpoint
// must run in this process); then it closes them, checks nothing is left,
// and measures a queue of cfg.Waiters.
func MeasureServerCost(ctx context.Context, endpoint string, cfg ServerCostConfig) (ServerCost, error) {
	if err := cfg.Validate(); err != nil {
		return ServerCost{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	out := ServerCost{Locks: cfg.Locks, Sessions: cfg.Sessions, Namespaces: cfg.Namespaces, Waiters: cfg.Waiters}
	cli, err := harness.NewClient(endpoint, nil)
	if err != nil {
		return out, err
	}
	defer cli.Close()
	base, err := ReadServer(nil)
	if err != nil {
		return out, err
	}
	sessions := make([]*session.Session, cfg.Sessions)
	closeSessions := func() {
		for _, s := range sessions {
			if s != nil {
				_ = s.Close()
			}
		}
	}
	defer closeSessions()
	for i := range sessions {
		if sessions[i], err = session.New(cli, session.WithTTL(30*time.Second)); err != nil {
			return out, err
		}
	}
	run := time.Now().UnixNano()
	mus := make([]*mutex.Mutex, cfg.Locks)
	err = each(ctx, cfg.Locks, 32, func(ctx context.Context, i int) error {
		ns := fmt.Sprintf("scale-cost-%d-%d", run, i%cfg.Namespaces)
		m, err := mutex.New(cli, fmt.Sprintf("lock-%d", i), mutex.WithNamespace(ns), mutex.WithSession(sessions[(i/cfg.Namespaces)%cfg.Sessions]))
		if err != nil {
			return err
		}
		mus[i] = m
		_, err = m.Lock(ctx)
		return err
	})
	if err != nil {
		return out, err
	}
	time.Sleep(500 * time.Millisecond) // the last watches' creates are answered
	held, err := ReadServer(nil)
	if err != nil {
		return out, err
	}
	g := held.Sub(base)
	n := float64(cfg.Locks)
	out.HeldGrowth, out.HeldWatchers = g, g.Watchers
	out.WatchersPerLock, out.KeysPerLock, out.DBBytesPerLock, out.InUseBytesPerLock = g.Watchers/n, g.Keys/n, g.DBBytes/n, g.DBInUseBytes/n
	closeSessions()
	for _, m := range mus {
		if m != nil {
			_ = m.Close()
		}
	}
	left, err := cli.Get(ctx, fmt.Sprintf("/scale-cost-%d-", run), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return out, err
	}
	for _, kv := range left.Kvs {
		if !keys.IsReleased(string(kv.Key)) { // a namespace's release marks stay
			out.KeysLeft++
		}
	}
	out.WatchersLeft = watchersBack(ctx, base.Watchers)
	w, err := Waiters(ctx, endpoint, WaitersConfig{Impl: "baton", Waiters: cfg.Waiters, Clients: cfg.Clients, Rounds: 1,
		TTL: 60 * time.Second, Deadline: cfg.Deadline}, nil)
	if err != nil {
		return out, err
	}
	out.WatchersPerWaiter, out.KeysPerWaiter, out.DBBytesPerWaiter = w.WatchersPerWaiter, w.KeysPerWaiter, w.DBBytesPerWaiter
	return out, nil
}

// each runs f for 0..n-1, workers at a time, until the first error.
func each(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}
