package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/internal/netproxy"
	"github.com/batonhq/baton/shard"
)

// ShardsConfig scales the shards workload. The zero value of a field picks
// its default.
type ShardsConfig struct {
	Shards  int           `json:"shards"`     // 256
	Members int           `json:"members"`    // 8, the last of which joins and leaves
	Joins   int           `json:"joins"`      // 20
	Crashes int           `json:"crashes"`    // 3
	TTL     time.Duration `json:"ttl_ns"`     // 3 s, the members' lease TTL
	Timeout time.Duration `json:"timeout_ns"` // 60 s, bounds each wait for a balanced group
}

func (c ShardsConfig) defaults() ShardsConfig {
	if c.Shards == 0 {
		c.Shards = 256
	}
	if c.Members == 0 {
		c.Members = 8
	}
	if c.Joins == 0 {
		c.Joins = 20
	}
	if c.Crashes == 0 {
		c.Crashes = 3
	}
	if c.TTL == 0 {
		c.TTL = 3 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	return c
}

// ShardsReport is the shards workload's result.
type ShardsReport struct {
	Started    time.Time    `json:"started"`
	GoVersion  string       `json:"go_version"`
	CPUs       int          `json:"cpus"`
	LoadBefore string       `json:"load_before"`
	LoadAfter  string       `json:"load_after"`
	Config     ShardsConfig `json:"config"`
	// JoinToBalancedMs: from the last member's Run to a balanced group,
	// as an observer saw it, per join.
	JoinToBalancedMs []float64 `json:"join_to_balanced_ms"`
	// MovesPerJoin: shards whose owner changed, per join; MoveBound is
	// ceil(N/M), the guarantee's bound.
	MovesPerJoin []int `json:"moves_per_join"`
	MoveBound    int   `json:"move_bound"`
	// GapMs: for each shard moved by a join, from the old owner's work
	// returning (its release is sent then) to the new owner's work starting.
	GapMs []float64 `json:"gap_ms"`
	// ReleaseGapMs: for the same moves, from an observer's seeing the
	// shard's owner change (the old key's deletion made the new one head:
	// the release) to the new owner's work starting; below zero when the
	// new owner started before the observer heard.
	ReleaseGapMs []float64 `json:"release_gap_ms"`
	// Crashes: a member cut off from etcd; its shards' Contexts ended on it
	// before the new owner's work started (EndedFirst of Moved), and the
	// time from the cut to the last of them owned again.
	CrashMoved      []int     `json:"crash_moved"`
	CrashEndedFirst []int     `json:"crash_ended_first"`
	CrashOwnedMs    []float64 `json:"crash_owned_again_ms"`
	// Starvation is what a meter of this process's scheduling saw over the
	// workload; past benchStarvedIf its times are not results.
	Starvation harness.Starvation `json:"starvation"`
}

// shardMember is one member of the workload: its own client, Group and Run.
type shardMember struct {
	name   string
	g      *shard.Group
	cli    *clientv3.Client
	proxy  *netproxy.Proxy
	cancel context.CancelFunc
	done   chan error
}

// shardLog records when each shard's work started and ended, per member.
type shardLog struct {
	mu     sync.Mutex
	starts []shardEvent
	ends   []shardEvent // Context ended
	rets   []shardEvent // fn returned
}

type shardEvent struct {
	member string
	shard  int
	at     time.Time
}

func (l *shardLog) add(list *[]shardEvent, e shardEvent) {
	l.mu.Lock()
	*list = append(*list, e)
	l.mu.Unlock()
}

// RunShards measures the shard package: joins to a balanced group, moves
// per join, the gap of a graceful move, and crashed members.
func RunShards(ctx context.Context, srv *embedetcd.Server, cfg ShardsConfig, progress io.Writer) (*ShardsReport, error) {
	cfg = cfg.defaults()
	rep := &ShardsReport{Started: time.Now(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), LoadBefore: harness.Loadavg(), Config: cfg,
		MoveBound: (cfg.Shards + cfg.Members - 1) / cfg.Members}
	meter := harness.StartMeter(nil)
	defer func() { meter.Stop(); rep.Starvation = meter.Starvation() }()
	log := &shardLog{}
	group := fmt.Sprintf("bench-shards-%d", time.Now().UnixNano())
	var members []*shardMember
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	start := func(name string, proxied bool) (*shardMember, error) {
		m := &shardMember{name: name, done: make(chan error, 1)}
		endpoint := srv.Endpoint()
		if proxied {
			p, err := netproxy.New(strings.TrimPrefix(endpoint, "http://"))
			if err != nil {
				return nil, err
			}
			m.proxy, endpoint = p, p.Endpoint()
		}
		cli, err := srv.NewClient(endpoint)
		if err != nil {
			return nil, err
		}
		m.cli = cli
		g, err := shard.New(cli, group, cfg.Shards, shard.WithNamespace(harness.Namespace), shard.WithTTL(cfg.TTL))
		if err != nil {
			return nil, err
		}
		m.g = g
		rctx, cancel := context.WithCancel(ctx)
		m.cancel = cancel
		go func() {
			m.done <- g.Run(rctx, name, func(ctx context.Context, s *shard.Shard) error {
				log.add(&log.starts, shardEvent{name, s.ID(), time.Now()})
				<-ctx.Done()
				log.add(&log.ends, shardEvent{name, s.ID(), time.Now()})
				log.add(&log.rets, shardEvent{name, s.ID(), time.Now()})
				return nil
			})
		}()
		members = append(members, m)
		return m, nil
	}
	observer, err := srv.NewClient(srv.Endpoint())
	if err != nil {
		return nil, err
	}
	defer observer.Close()
	og, err := shard.New(observer, group, cfg.Shards, shard.WithNamespace(harness.Namespace))
	if err != nil {
		return nil, err
	}
	defer og.Close()
	names := func(ms []*shardMember) []string {
		out := make([]string, len(ms))
		for i, m := range ms {
			out[i] = m.name
		}
		return out
	}
	for i := 0; i < cfg.Members-1; i++ {
		if _, err := start(fmt.Sprintf("m%d", i), false); err != nil {
			return nil, err
		}
	}
	stable := append([]*shardMember(nil), members...)
	before, err := harness.Balanced(ctx, og, names(stable), cfg.Timeout)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "shards: %d shards over %d members balanced\n", cfg.Shards, len(stable))

	for j := 0; j < cfg.Joins; j++ {
		name := fmt.Sprintf("j%d", j)
		t0 := time.Now()
		log.mu.Lock()
		mark := len(log.starts)
		log.mu.Unlock()
		m, err := start(name, false)
		if err != nil {
			return nil, err
		}
		changed := map[int]time.Time{}
		after, err := harness.BalancedSeen(ctx, og, append(names(stable), name), cfg.Timeout, func(st shard.State, at time.Time) {
			for _, o := range st.Owners {
				if _, ok := changed[o.Shard]; !ok && o.Member == name {
					changed[o.Shard] = at
				}
			}
		})
		if err != nil {
			return nil, fmt.Errorf("join %d: %w", j, err)
		}
		rep.JoinToBalancedMs = append(rep.JoinToBalancedMs, harness.Ms(time.Since(t0)))
		moved := 0
		for s := range after.Owners {
			if after.Owners[s].Member != before.Owners[s].Member {
				moved++
			}
		}
		rep.MovesPerJoin = append(rep.MovesPerJoin, moved)
		// Each moved shard's gap: old owner's return to the newcomer's start.
		waitStarts(log, name, moved, mark, cfg.Timeout)
		log.mu.Lock()
		lastRet := map[int]time.Time{}
		for _, e := range log.rets {
			lastRet[e.shard] = e.at
		}
		for _, e := range log.starts[mark:] {
			if e.member == name {
				if r, ok := lastRet[e.shard]; ok {
					rep.GapMs = append(rep.GapMs, harness.Ms(e.at.Sub(r)))
				}
				if c, ok := changed[e.shard]; ok {
					rep.ReleaseGapMs = append(rep.ReleaseGapMs, harness.Ms(e.at.Sub(c)))
				}
			}
		}
		log.mu.Unlock()
		// The newcomer leaves again; the group settles back.
		m.stop()
		members = members[:len(members)-1]
		if before, err = harness.Balanced(ctx, og, names(stable), cfg.Timeout); err != nil {
			return nil, fmt.Errorf("leave %d: %w", j, err)
		}
		fmt.Fprintf(progress, "shards: join %d: balanced in %.0f ms, %d moves\n", j, rep.JoinToBalancedMs[j], moved)
	}

	for c := 0; c < cfg.Crashes; c++ {
		name := fmt.Sprintf("c%d", c)
		m, err := start(name, true)
		if err != nil {
			return nil, err
		}
		if _, err := harness.Balanced(ctx, og, append(names(stable), name), cfg.Timeout); err != nil {
			return nil, fmt.Errorf("crash %d: %w", c, err)
		}
		owners, err := og.Owners(ctx)
		if err != nil {
			return nil, err
		}
		mine := map[int]bool{}
		for _, o := range owners {
			if o.Member == name {
				mine[o.Shard] = true
			}
		}
		waitStarts(log, name, len(mine), 0, cfg.Timeout)
		cut := time.Now()
		m.proxy.Blackhole()
		if _, err := harness.Balanced(ctx, og, names(stable), cfg.Timeout); err != nil {
			return nil, fmt.Errorf("crash %d: %w", c, err)
		}
		owned := time.Since(cut)
		log.mu.Lock()
		ended := map[int]time.Time{}
		for _, e := range log.ends {
			if e.member == name {
				ended[e.shard] = e.at
			}
		}
		first, moved := 0, 0
		for _, e := range log.starts {
			if e.member != name && mine[e.shard] && e.at.After(cut) {
				moved++
				if t, ok := ended[e.shard]; ok && t.Before(e.at) {
					first++
				}
				mine[e.shard] = false // count each shard's first new owner
			}
		}
		log.mu.Unlock()
		rep.CrashMoved = append(rep.CrashMoved, moved)
		rep.CrashEndedFirst = append(rep.CrashEndedFirst, first)
		rep.CrashOwnedMs = append(rep.CrashOwnedMs, harness.Ms(owned))
		fmt.Fprintf(progress, "shards: crash %d: %d of %d ended first, owned again after %.0f ms\n", c, first, moved, harness.Ms(owned))
		m.proxy.Restore()
		m.stop()
		members = members[:len(members)-1]
		if _, err := harness.Balanced(ctx, og, names(stable), cfg.Timeout); err != nil {
			return nil, err
		}
	}
	rep.LoadAfter = harness.Loadavg()
	return rep, nil
}

// waitStarts waits until member's work started on n shards since mark.
func waitStarts(log *shardLog, member string, n, mark int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		log.mu.Lock()
		got := 0
		for _, e := range log.starts[mark:] {
			if e.member == member {
				got++
			}
		}
		log.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (m *shardMember) stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.cancel = nil
	<-m.done
	_ = m.g.Close()
	_ = m.cli.Close()
	if m.proxy != nil {
		_ = m.proxy.Close()
	}
}

// Print writes the report as a table.
func (r *ShardsReport) Print(w io.Writer) error {
	gaps := r.GapMs
	first, moved := 0, 0
	for i := range r.CrashMoved {
		first += r.CrashEndedFirst[i]
		moved += r.CrashMoved[i]
	}
	maxMoves := 0
	for _, m := range r.MovesPerJoin {
		maxMoves = max(maxMoves, m)
	}
	_, err := fmt.Fprintf(w, `shards: %d shards, %d members (the last joins and leaves %d times), TTL %v, %d CPUs, load %s -> %s
  last join to balanced      p50 %.0f ms  p99 %.0f ms  (target p99 <= 1000 ms)
  moves per join             max %d  (bound ceil(N/M) = %d)
  graceful move gap          p50 %.1f ms  p99 %.1f ms over %d moves, from the old owner's work returning
                             p50 %.1f ms  p99 %.1f ms from an observer seeing the release  (target p99 <= 20 ms)
  crashed member             %d of %d shards ended on it before the new owner started; owned again p50 %.0f ms, max %.0f ms (target TTL+2 s = %.0f ms)
`, r.Config.Shards, r.Config.Members, r.Config.Joins, r.Config.TTL, r.CPUs, r.LoadBefore, r.LoadAfter,
		harness.Percentile(r.JoinToBalancedMs, 50), harness.Percentile(r.JoinToBalancedMs, 99),
		maxMoves, r.MoveBound,
		harness.Percentile(gaps, 50), harness.Percentile(gaps, 99), len(gaps), harness.Percentile(r.ReleaseGapMs, 50), harness.Percentile(r.ReleaseGapMs, 99),
		first, moved, harness.Percentile(r.CrashOwnedMs, 50), harness.Percentile(r.CrashOwnedMs, 100), harness.Ms(r.Config.TTL+2*time.Second))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "  this process's scheduling  %s\n", r.Starvation)
	if err == nil && r.Starvation.Starved(benchStarvedIf) {
		_, err = fmt.Fprintf(w, "  STARVED: the times above are the machine's, not results; the targets not judged\n")
	}
	return err
}
