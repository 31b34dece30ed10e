// Package cluster runs an N-member embedded etcd cluster on 127.0.0.1 for
// fault-injection tests: members can be killed (no leadership transfer,
// client connections reset at once), restarted on their data, and the
// Raft leader found and killed. Clients can be given a proxy per member
// to partition them from the whole cluster, and a member can be cut from
// its peers while its clients still reach it.
//
//	c := cluster.Start(t, 3)          // closed by t.Cleanup
//	cli := c.Client(t)                // every member's endpoint
//	leader, _ := c.KillLeader(ctx)    // then leader.Restart()
//
// Each member's client address is a forwarder owned by the harness
// (netproxy, listening on the member's fixed address), so that a kill
// resets every client connection immediately, as a crashed process would:
// embed.Etcd.Close otherwise drains streams gracefully for seconds, which
// is a shutdown, not a crash. The member listens on a private port behind
// it. Peer
// ports are reserved up front: etcd needs every peer URL before any member
// starts, so port 0 cannot be used.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/internal/netproxy"
)

// Options tune the cluster. The zero Options is 3 members with a 50 ms
// heartbeat and a 500 ms election timeout: slower than etcdtest's single
// member so that a loaded machine running the race detector does not see
// spurious elections, fast enough for failover within a second.
type Options struct {
	// HeartbeatMs and ElectionMs are etcd's --heartbeat-interval and
	// --election-timeout.
	HeartbeatMs, ElectionMs uint
	// Logger receives etcd's logs; default silent.
	Logger *zap.Logger
}

// Cluster is a running set of members.
type Cluster struct {
	dir     string
	opts    Options
	initial string
	token   string
	members []*Member
}

// Member is one etcd member of a Cluster.
type Member struct {
	c      *Cluster
	index  int
	name   string
	dir    string
	public string // the front: what clients dial
	inner  string // the member's own client listener
	peer   string

	mu    sync.Mutex
	srv   *etcdtest.Server
	front *netproxy.Proxy // forwards public to inner while running
	id    uint64          // the Raft ID, once started: it outlives a stop
}

// Start starts an n-member cluster for a test and closes it on t.Cleanup.
func Start(tb testing.TB, n int, opts ...Options) *Cluster {
	tb.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	c, err := New(n, o)
	if err != nil {
		tb.Fatalf("cluster: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// New starts an n-member cluster and waits until every member serves. It
// retries with fresh ports if one was taken between its reservation and
// its use.
func New(n int, o Options) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("cluster: %d members, need at least 1", n)
	}
	if o.HeartbeatMs == 0 {
		o.HeartbeatMs = 50
	}
	if o.ElectionMs == 0 {
		o.ElectionMs = 500
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var c *Cluster
		if c, err = start(n, o); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func start(n int, o Options) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "baton-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, opts: o, token: "baton-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	var peers []string
	for i := 0; i < n; i++ {
		m := &Member{c: c, index: i, name: "m" + strconv.Itoa(i), dir: filepath.Join(dir, "m"+strconv.Itoa(i))}
		for _, p := range []*string{&m.public, &m.inner, &m.peer} {
			if *p, err = etcdtest.FreeAddr(); err != nil {
				_ = os.RemoveAll(dir)
				return nil, err
			}
		}
		c.members = append(c.members, m)
		peers = append(peers, m.name+"=http://"+m.peer)
	}
	c.initial = strings.Join(peers, ",")
	if err := c.Restart(c.members...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Members returns the members, running or not, in a fixed order.
func (c *Cluster) Members() []*Member { return append([]*Member(nil), c.members...) }

// Member returns member i.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.Endpoint()
	}
	return out
}

// NewClient returns a client of the given endpoints (default: every
// member), with a short dial timeout and silent logs.
func (c *Cluster) NewClient(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	return embedetcd.Dial(endpoints, nil)
}

// Client returns a client of every member, closed on t.Cleanup.
func (c *Cluster) Client(tb testing.TB, endpoints ...string) *clientv3.Client {
	tb.Helper()
	cli, err := c.NewClient(endpoints...)
	if err != nil {
		tb.Fatalf("cluster: client: %v", err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Partition is a set of proxies, one per member, that carry one client's
// traffic, so that the client can be cut off from the whole cluster.
type Partition struct{ proxies []*netproxy.Proxy }

// NewPartition starts a proxy in front of each of endpoints (any etcd's,
// embedded or not) and returns them with the proxies' endpoints, in the
// same order, for a client to dial.
func NewPartition(endpoints []string) (*Partition, []string, error) {
	p := &Partition{}
	var eps []string
	for _, ep := range endpoints {
		if i := strings.Index(ep, "://"); i >= 0 {
			ep = ep[i+3:]
		}
		x, err := netproxy.New(ep)
		if err != nil {
			p.Close()
			return nil, nil, fmt.Errorf("cluster: proxy: %w", err)
		}
		p.proxies = append(p.proxies, x)
		eps = append(eps, x.Endpoint())
	}
	return p, eps, nil
}

// Blackhole stops the client's traffic to every member; connections stay
// open, as in a network partition.
func (p *Partition) Blackhole() {
	for _, x := range p.proxies {
		x.Blackhole()
	}
}

// Restore lets the traffic flow again, held-back bytes first.
func (p *Partition) Restore() {
	for _, x := range p.proxies {
		x.Restore()
	}
}

// DropConnections resets every connection of the client (watch streams
// included); it reconnects by itself.
func (p *Partition) DropConnections() {
	for _, x := range p.proxies {
		x.DropConnections()
	}
}

// LoseReplies lets the client's requests through to every member and
// holds back their replies until Sever drops them: what it sends applies,
// and it hears nothing.
func (p *Partition) LoseReplies() {
	for _, x := range p.proxies {
		x.LoseReplies()
	}
}

// HoldRequests holds back what the client sends to every member, until
// Sever delivers it late.
func (p *Partition) HoldRequests() {
	for _, x := range p.proxies {
		x.HoldRequests()
	}
}

// Sever cuts the client's connections (its calls in flight fail and it
// connects again), drops the replies held back, and delivers the requests
// held back late after, on the old connections, kept open linger more:
// a request applies after its caller gave up on it, through whichever
// member it was sent to (netproxy.Proxy.Sever).
func (p *Partition) Sever(late, linger time.Duration) {
	for _, x := range p.proxies {
		x.Sever(late, linger)
	}
}

// SetDelay delays the client's traffic by d in both directions.
func (p *Partition) SetDelay(d time.Duration) {
	for _, x := range p.proxies {
		x.SetDelay(d)
	}
}

// Close closes the proxies. Idempotent.
func (p *Partition) Close() {
	for _, x := range p.proxies {
		x.Restore()
		_ = x.Close()
	}
}

// Proxied returns a client whose traffic to each member passes through a
// proxy of its own, and the partition controlling them; both are closed
// on t.Cleanup.
func (c *Cluster) Proxied(tb testing.TB) (*clientv3.Client, *Partition) {
	tb.Helper()
	p, eps, err := NewPartition(c.Endpoints())
	if err != nil {
		tb.Fatal(err)
	}
	cli, err := c.NewClient(eps...)
	if err != nil {
		p.Close()
		tb.Fatalf("cluster: proxied client: %v", err)
	}
	tb.Cleanup(func() {
		p.Restore()
		_ = cli.Close()
		p.Close()
	})
	return cli, p
}

// CutPeers cuts the member off from every other member, both ways, while
// its clients still reach it, as a network partition between the members
// alone would: the Raft messages between them are dropped (etcd's own
// test seam, EtcdServer.CutPeer, on both ends of each link). It loses its
// leadership, or its leader, after an election timeout; the others go on
// with a quorum. A member that restarts comes back with its links whole.
func (m *Member) CutPeers() { m.c.peerLinks(m, true) }

// MendPeers undoes CutPeers. Idempotent.
func (m *Member) MendPeers() { m.c.peerLinks(m, false) }

func (c *Cluster) peerLinks(m *Member, cut bool) {
	link := func(e *embed.Etcd, id uint64) {
		switch {
		case e == nil || id == 0:
		case cut:
			e.Server.CutPeer(types.ID(id))
		default:
			e.Server.MendPeer(types.ID(id))
		}
	}
	for _, o := range c.members {
		if o != m {
			link(m.Etcd(), o.raftID())
			link(o.Etcd(), m.raftID())
		}
	}
}

// Leader returns the member that every running member names as leader,
// or an error when there is none or they disagree.
func (c *Cluster) Leader() (*Member, error) {
	var lead uint64
	running := 0
	for _, m := range c.members {
		e := m.Etcd()
		if e == nil {
			continue
		}
		running++
		l := uint64(e.Server.Leader())
		if l == 0 {
			return nil, fmt.Errorf("cluster: %s knows no leader", m.name)
		}
		if lead != 0 && l != lead {
			return nil, fmt.Errorf("cluster: members disagree on the leader (%x, %x)", lead, l)
		}
		lead = l
	}
	if running == 0 {
		return nil, errors.New("cluster: no member running")
	}
	for _, m := range c.members {
		if e := m.Etcd(); e != nil && uint64(e.Server.MemberID()) == lead {
			return m, nil
		}
	}
	return nil, fmt.Errorf("cluster: leader %x is not running", lead)
}

// WaitLeader polls every 10 ms until the running members agree on a
// running leader, or ctx ends. Raft offers no event for a follower
// learning the leader, hence the poll.
func (c *Cluster) WaitLeader(ctx context.Context) (*Member, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		m, err := c.Leader()
		if err == nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// KillLeader waits for a leader, kills it and returns it.
func (c *Cluster) KillLeader(ctx context.Context) (*Member, error) {
	m, err := c.WaitLeader(ctx)
	if err != nil {
		return nil, err
	}
	m.Kill()
	return m, nil
}

// Followers returns the running members that are not the leader.
func (c *Cluster) Followers(ctx context.Context) ([]*Member, error) {
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Member
	for _, m := range c.members {
		if m != lead && m.Running() {
			out = append(out, m)
		}
	}
	return out, nil
}

// Restart starts the given stopped members on their data, all at once
// (a member alone cannot become ready without a quorum), and waits until
// each serves.
func (c *Cluster) Restart(ms ...*Member) error {
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.start()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close kills every member and removes the data directories. Idempotent.
// Members stop one after another: stopped together, each one's peer
// server waits for requests from peers that are stopping too, and
// connections are left open behind them.
func (c *Cluster) Close() {
	for _, m := range c.members {
		m.Kill()
	}
	_ = os.RemoveAll(c.dir)
}

// Name is the member's name (m0, m1, …).
func (m *Member) Name() string { return m.name }

// Endpoint is the member's client URL.
func (m *Member) Endpoint() string { return "http://" + m.public }

// Running reports whether the member is started.
func (m *Member) Running() bool { return m.Etcd() != nil }

// Etcd is the embedded member, nil while stopped.
func (m *Member) Etcd() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv == nil {
		return nil
	}
	return m.srv.Etcd()
}

// ID is the member's Raft ID, zero while stopped.
func (m *Member) ID() uint64 {
	if e := m.Etcd(); e != nil {
		return uint64(e.Server.MemberID())
	}
	return 0
}

// Kill stops the member as a crash would: client connections reset, Raft
// halted without handing leadership over. Its data stays for Restart.
// Idempotent.
func (m *Member) Kill() {
	m.mu.Lock()
	srv, front := m.srv, m.front
	m.srv, m.front = nil, nil
	m.mu.Unlock()
	if front != nil {
		_ = front.Close()
	}
	if srv == nil {
		return
	}
	srv.Etcd().Server.HardStop()
	srv.Stop()
}

// Restart starts a stopped member on its data and waits until it serves,
// which needs a quorum: to restart several members of a cluster without
// one, use Cluster.Restart.
func (m *Member) Restart() error { return m.c.Restart(m) }

func (m *Member) start() error {
	m.mu.Lock()
	running := m.srv != nil
	m.mu.Unlock()
	if running {
		return fmt.Errorf("cluster: %s already running", m.name)
	}
	c := m.c
	inner := url.URL{Scheme: "http", Host: m.inner}
	public := url.URL{Scheme: "http", Host: m.public}
	srv, err := etcdtest.New(etcdtest.Config{
		Dir: m.dir, ClientAddr: m.inner, PeerAddr: m.peer, Name: m.name, Logger: c.opts.Logger,
		Tune: func(ec *embed.Config) {
			ec.InitialCluster = c.initial
			ec.InitialClusterToken = c.token
			ec.ClusterState = embed.ClusterStateFlagNew // ignored once the member has data
			ec.TickMs, ec.ElectionMs = c.opts.HeartbeatMs, c.opts.ElectionMs
			ec.ListenClientUrls = []url.URL{inner}
			ec.AdvertiseClientUrls = []url.URL{public}
		},
	})
	if err != nil {
		return fmt.Errorf("cluster: start %s: %w", m.name, err)
	}
	front, err := netproxy.Listen(m.public, m.inner)
	if err != nil {
		srv.Stop()
		return fmt.Errorf("cluster: %s client address: %w", m.name, err)
	}
	m.mu.Lock()
	m.srv, m.front, m.id = srv, front, uint64(srv.Etcd().Server.MemberID())
	m.mu.Unlock()
	return nil
}

// raftID is the member's Raft ID, running or not; zero before its start.
func (m *Member) raftID() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id
}
